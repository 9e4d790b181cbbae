"""What can be wrong with a job of any kind, said to the person who ran `kubectl apply`.

Every message says what is wrong and then what to do about it: it reaches the user as the webhook's denial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class JobProblemKind(StrEnum):
    NOT_A_JOB = "NotAJob"
    INVALID_FIELD = "InvalidField"
    NO_NAMESPACE = "NoNamespace"
    NO_QUEUE = "NoQueue"
    INVALID_QUEUE_NAME = "InvalidQueueName"
    UNKNOWN_QUEUE = "UnknownQueue"
    QUEUE_NOT_OPEN = "QueueNotOpen"
    UNKNOWN_PRIORITY_CLASS = "UnknownPriorityClass"
    BAD_MIN_PARALLELISM = "BadMinParallelism"
    BAD_CHECKPOINT_URL = "BadCheckpointURL"
    BAD_EXPECTED_RUNTIME = "BadExpectedRuntime"
    BAD_QUANTITY = "BadQuantity"
    UNKNOWN_REFERENCE = "UnknownReference"
    """An object it reads its pod sets from (a TrainJob's runtime) does not exist, or not yet."""


@dataclass(frozen=True, slots=True)
class JobProblem:
    kind: JobProblemKind
    field: str
    """Where in the Job, e.g. `metadata.labels[kuota.dev/queue]`."""
    message: str
    """What is wrong, then what to do."""


class JobError(ValueError):
    """A Job kuota cannot turn into a workload; carries every problem found."""

    def __init__(self, problems: Sequence[JobProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(p.message for p in self.problems))


def not_a(kind: str, path: str, noun: str = "batch/v1 Job") -> JobProblem:
    """A part of the object that has the wrong type: the object is not one of `noun` at all."""
    return JobProblem(JobProblemKind.NOT_A_JOB, path, f"{path} must be {kind}; send a valid {noun}")


def short(value: Any) -> str:
    """A value as a message quotes it: its repr, cut to 80 characters (users send megabytes, too)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
