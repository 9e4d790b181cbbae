"""Why quota is taken back from running work: one value per preemption rule of the quota file, and by hand.

Defined here, below both the admission engine (which preempts for the first four) and the ledger (which records
every preemption, by hand ones included), so that both name the same values.
"""

from __future__ import annotations

from enum import StrEnum


class PreemptionReason(StrEnum):
    WITHIN_TEAM = "WithinTeam"
    COHORT_RECLAMATION = "CohortReclamation"
    COHORT_RECLAIM_WHILE_BORROWING = "CohortReclaimWhileBorrowing"
    COHORT_FAIR_SHARING = "CohortFairSharing"
    MANUAL = "Manual"
    """An operator's preempt (the controller passes "Manual by ACTOR"; the ledger records this value)."""
    PODS_READY_TIMEOUT = "PodsReadyTimeout"
    """Not a preemption for someone: its pods were not all ready in time (the quota file's waitForPodsReady)."""
    NODE_FAILURE = "NodeFailure"
    """Not a preemption for someone: a node it had pods on was NotReady or gone for longer than the quota file's
    nodeFailure.gracePeriod. No checkpoint is asked for (the node is gone); it resumes from its last one."""
