"""Pieces both webhooks use: is the review about the kind its path serves, in which namespace, and problems
turned into a denial."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webhooks.review import AdmissionRequest, Decision, deny
from workloads.kind import JobKind
from workloads.problems import JobProblem, JobProblemKind
from workloads.rules import job_namespace


def not_the_kind(request: AdmissionRequest, kind: JobKind) -> Decision | None:
    """A denial when the review is about something other than `kind` (a misconfigured webhook rule)."""
    got = request.kind
    if not got or (
        got.get("kind") == kind.kind and got.get("group") == kind.group and got.get("version") == kind.version
    ):
        return None
    what = f"{got.get('group') or 'core'}/{got.get('version')} {got.get('kind')}"
    return deny(
        f"this webhook path reviews {kind.noun}s only, not {what[:100]}; fix the rules of kuota's webhook "
        "configuration (each kind has its own path: /mutate/GROUP/VERSION/PLURAL)",
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
