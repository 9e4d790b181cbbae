"""Pieces both webhooks use: is it a Job, in which namespace, and problems turned into a denial."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from admission.job import JobProblem, JobProblemKind, job_namespace
from webhooks.review import AdmissionRequest, Decision, deny


def not_a_job_kind(request: AdmissionRequest) -> Decision | None:
    """A denial when the review is about something other than a batch/v1 Job (a misconfigured rule)."""
    kind = request.kind
    if not kind or (kind.get("kind") == "Job" and kind.get("group") == "batch" and kind.get("version") == "v1"):
        return None
    got = f"{kind.get('group') or 'core'}/{kind.get('version')} {kind.get('kind')}"
    return deny(
        f"this webhook reviews batch/v1 Jobs only, not {got[:100]}; fix the rules of kuota's webhook configuration",
        code=400,
        reason="BadRequest",
    )


def request_namespace(request: AdmissionRequest) -> str | None:
    if request.namespace is not None:
        return request.namespace
    return job_namespace(request.object) if isinstance(request.object, Mapping) else None


def problems_denial(problems: Sequence[JobProblem]) -> Decision:
    """One denial listing every problem, each with its own remedy; the first problem decides the code."""
    not_a_job = problems[0].kind is JobProblemKind.NOT_A_JOB
    return deny(
        "; also, ".join(p.message for p in problems) if len(problems) > 1 else problems[0].message,
        code=400 if not_a_job else 422,
        reason="BadRequest" if not_a_job else "Invalid",
        causes=[{"reason": "FieldValueInvalid", "message": p.message, "field": p.field} for p in problems],
    )
