"""Per-kind behaviour of the real apiserver's registry strategies that client code can observe: defaulting,
what create and update reset (status, spec, generation), and the validation errors a controller is most likely
to trip over (names, label syntax, Job immutability, webhook configuration rules). Deliberately partial: where
the real apiserver validates more, the fake accepts more."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from . import errors
from .jsonutil import clone
from .resources import (
    DEPLOYMENTS,
    EVENTS_V1,
    JOBS,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    SERVICES,
    VALIDATING_WEBHOOKS,
    ResourceType,
)

Obj = dict[str, Any]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# The alphabet of names.SimpleNameGenerator: no vowels, no look-alike characters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_NAME = "batch.kubernetes.io/job-name"


_stamp: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """The current second, formatted once per second (every write stamps something)."""
    global _stamp
    second = int(time.time())
    if second != _stamp[0]:
        _stamp = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _stamp[1]


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))


# defaulting (runs on every write, as decoding does in the real apiserver)


def apply_defaults(rt: ResourceType, obj: Obj) -> None:
    obj.setdefault("metadata", {})
    if rt is JOBS:
        _default_job(obj)
    elif rt is PODS:
        _default_pod_spec(obj.setdefault("spec", {}))
    elif rt is NAMESPACES:
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    elif rt is DEPLOYMENTS:
        _default_deployment(obj.setdefault("spec", {}))
    elif rt is SERVICES:
        _default_service(obj.setdefault("spec", {}))
    elif rt in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        for hook in obj.get("webhooks") or []:
            _default_webhook(hook, mutating=rt is MUTATING_WEBHOOKS)


def _default_job(job: Obj) -> None:
    spec = job.setdefault("spec", {})
    # SetDefaults_Job: both unset means a single-pod Job.
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    if spec.get("suspend") is None:
        spec["suspend"] = False
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    template = spec.setdefault("template", {})
    template_labels = (template.get("metadata") or {}).get("labels")
    if template_labels and not job["metadata"].get("labels"):
        job["metadata"]["labels"] = dict(template_labels)
    _default_pod_spec(template.setdefault("spec", {}))


def _default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if not isinstance(container, dict):
            continue
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        image = str(container.get("image", ""))
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("resources", {})


def _default_deployment(spec: Obj) -> None:
    """SetDefaults_Deployment (apps/v1)."""
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _default_pod_spec(spec.setdefault("template", {}).setdefault("spec", {}))


def _default_service(spec: Obj) -> None:
    """SetDefaults_Service, without the cluster IP allocation that follows it."""
    kind = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if kind != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))


def _default_webhook(hook: Obj, *, mutating: bool) -> None:
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    hook.setdefault("namespaceSelector", {})
    hook.setdefault("objectSelector", {})
    hook.setdefault("timeoutSeconds", 10)
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        rule.setdefault("scope", "*")
    client = hook.get("clientConfig") or {}
    if isinstance(client.get("service"), dict):
        client["service"].setdefault("port", 443)


# create and update preparation (PrepareForCreate / PrepareForUpdate)


def prepare_for_create(rt: ResourceType, obj: Obj, namespace: str) -> None:
    """BeforeCreate, after mutating admission: name generation, identity, timestamps, status reset."""
    meta = obj["metadata"]
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = generate_name(meta["generateName"])
    if rt.namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339()
    for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
        meta.pop(transient, None)
    if rt.generation_field is not None:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    if rt is JOBS:
        obj["status"] = {}
        _generate_job_selector(obj)
    elif rt is PODS:
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(obj.get("spec") or {})}
    elif rt is NAMESPACES:
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
        obj["status"] = {"phase": "Active"}
    elif rt.custom and "status" in rt.subresources:
        obj.pop("status", None)  # a CRD with a status subresource drops status on create
    elif rt.group_resource in _EMPTY_STATUS:
        obj["status"] = clone(_EMPTY_STATUS[rt.group_resource])


# The zero status each strategy's PrepareForCreate leaves, as the apiserver serializes it.
_EMPTY_STATUS: dict[str, Obj] = {
    DEPLOYMENTS.group_resource: {},
    SERVICES.group_resource: {"loadBalancer": {}},
    POD_DISRUPTION_BUDGETS.group_resource: {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    },
}


def _generate_job_selector(job: Obj) -> None:
    spec = job["spec"]
    if spec.get("manualSelector"):
        return
    uid, name = job["metadata"]["uid"], job["metadata"].get("name", "")
    template_meta = spec["template"].setdefault("metadata", {})
    labels = template_meta.setdefault("labels", {})
    labels.update({"controller-uid": uid, JOB_CONTROLLER_UID: uid, "job-name": name, JOB_NAME: name})
    spec["selector"] = {"matchLabels": {JOB_CONTROLLER_UID: uid}}


def _qos_class(spec: Obj) -> str:
    requests_or_limits = [(c.get("resources") or {}) for c in spec.get("containers") or [] if isinstance(c, dict)]
    if not any(r.get("requests") or r.get("limits") for r in requests_or_limits):
        return "BestEffort"
    guaranteed = all(
        r.get("limits") and all(r.get("limits", {}).get(k) == v for k, v in (r.get("requests") or {}).items())
        for r in requests_or_limits
    )
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_for_update(rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
    """Identity comes from the stored object; the main resource cannot change status and the status
    subresource cannot change spec (the ResetFields of the real strategies); generation counts spec changes.
    """
    meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
    for immutable in ("uid", "creationTimestamp", "name", "namespace", "generation", "deletionTimestamp"):
        if immutable in old_meta:
            meta[immutable] = old_meta[immutable]
        else:
            meta.pop(immutable, None)
    if "status" in rt.subresources:
        if subresource == "status":
            for key in list(new):
                if key not in ("apiVersion", "kind", "metadata", "status"):
                    del new[key]
            for key, value in old.items():
                if key not in ("metadata", "status"):
                    new[key] = clone(value)
        elif "status" in old:
            new["status"] = clone(old["status"])
        else:
            new.pop("status", None)
    field_name = rt.generation_field
    if field_name is not None and new.get(field_name) != old.get(field_name):
        meta["generation"] = int(old_meta.get("generation", 1)) + 1


# validation


def validate(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    causes: list[Obj] = []
    if not name:
        causes.append(
            errors.required("metadata.name") | {"message": "Required value: name or generateName is required"}
        )
    elif rt is NAMESPACES and not _DNS_LABEL.match(name):
        causes.append(errors.invalid_value("metadata.name", name, _DNS_LABEL_MESSAGE))
    elif rt is not NAMESPACES and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
        causes.append(errors.invalid_value("metadata.name", name, _DNS_SUBDOMAIN_MESSAGE))
    causes += _validate_labels(meta.get("labels"), "metadata.labels")
    causes += _validate_annotations(meta.get("annotations"))
    if rt is JOBS:
        causes += _validate_job(obj, old)
    elif rt is PODS and old is None:
        causes += _validate_pod_spec(obj.get("spec") or {}, "spec")
    elif rt is EVENTS_V1 and old is None:
        causes += _validate_events_v1(obj)
    elif rt in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        causes += _validate_webhooks(obj.get("webhooks") or [])
    if causes:
        raise errors.invalid(rt, name, causes)


_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part " + _DNS_SUBDOMAIN_MESSAGE
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return None


def _validate_labels(labels: Any, path: str) -> list[Obj]:
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [errors.invalid_value(path, labels, "must be a map of strings")]
    causes: list[Obj] = []
    for key, value in labels.items():
        if problem := _key_problem(key):
            causes.append(errors.invalid_value(path, key, problem))
        if not isinstance(value, str):
            causes.append(errors.invalid_value(f"{path}", value, "label values must be strings"))
        elif len(value) > 63:
            causes.append(errors.invalid_value(path, value, "must be no more than 63 characters"))
        elif not _LABEL_VALUE.match(value):
            causes.append(errors.invalid_value(path, value, _LABEL_VALUE_MESSAGE))
    return causes


def _validate_annotations(annotations: Any) -> list[Obj]:
    if annotations is None:
        return []
    if not isinstance(annotations, dict):
        return [errors.invalid_value("metadata.annotations", annotations, "must be a map of strings")]
    causes: list[Obj] = []
    for key, value in annotations.items():
        if problem := _key_problem(key):
            causes.append(errors.invalid_value("metadata.annotations", key, problem))
        if not isinstance(value, str):
            causes.append(errors.invalid_value("metadata.annotations", value, "annotation values must be strings"))
    return causes


def _validate_pod_spec(spec: Obj, path: str) -> list[Obj]:
    causes: list[Obj] = []
    containers = spec.get("containers")
    if not containers:
        causes.append(errors.required(f"{path}.containers"))
    for i, container in enumerate(containers or []):
        if not isinstance(container, dict) or not container.get("name"):
            causes.append(errors.required(f"{path}.containers[{i}].name"))
        elif not container.get("image"):
            causes.append(errors.required(f"{path}.containers[{i}].image"))
    causes += _validate_labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
    return causes


# Fields of a suspended Job's pod template that may change before the Job first starts (Kueue relies on this
# to inject a flavor's node selector and tolerations when it admits a Job).
_MUTABLE_SCHEDULING_DIRECTIVES = ("nodeSelector", "affinity", "tolerations", "schedulingGates")


def _validate_job(job: Obj, old: Obj | None) -> list[Obj]:
    spec = job.get("spec") or {}
    causes: list[Obj] = []
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    causes += _validate_pod_spec(pod_spec, "spec.template.spec")
    causes += _validate_labels((template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
    restart = pod_spec.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        causes.append(errors.not_supported("spec.template.spec.restartPolicy", restart, ["OnFailure", "Never"]))
    for counter in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
        value = spec.get(counter)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append(errors.invalid_value(f"spec.{counter}", value, "must be greater than or equal to 0"))
    if old is None:
        return causes
    old_spec = old.get("spec") or {}
    for immutable in ("selector", "completionMode", "completions", "manualSelector", "podFailurePolicy"):
        if spec.get(immutable) != old_spec.get(immutable):
            causes.append(errors.invalid_value(f"spec.{immutable}", spec.get(immutable), "field is immutable"))
    old_template = old_spec.get("template") or {}
    if template != old_template:
        suspended_never_started = bool(old_spec.get("suspend")) and not (old.get("status") or {}).get("startTime")
        if not suspended_never_started or _strip_directives(template) != _strip_directives(old_template):
            causes.append(errors.invalid_value("spec.template", "...", "field is immutable"))
    return causes


def _strip_directives(template: Obj) -> Obj:
    stripped = clone(template)
    meta = stripped.setdefault("metadata", {})
    meta.pop("labels", None)
    meta.pop("annotations", None)
    for directive in _MUTABLE_SCHEDULING_DIRECTIVES:
        stripped.setdefault("spec", {}).pop(directive, None)
    return stripped


def _validate_events_v1(event: Obj) -> list[Obj]:
    causes = [
        errors.required(f)
        for f in ("eventTime", "reportingController", "reportingInstance", "action", "reason")
        if not event.get(f)
    ]
    if event.get("type") not in ("Normal", "Warning"):
        causes.append(errors.not_supported("type", event.get("type", ""), ["Normal", "Warning"]))
    return causes


def _validate_webhooks(hooks: list[Any]) -> list[Obj]:
    causes: list[Obj] = []
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        path = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            causes.append(errors.invalid_value(path, hook, "must be an object"))
            continue
        name = str(hook.get("name") or "")
        if name.count(".") < 2 or not _DNS_SUBDOMAIN.match(name):
            causes.append(
                errors.invalid_value(
                    f"{path}.name", name, "should be a domain with at least three segments separated by dots"
                )
            )
        if name in seen:
            causes.append(
                {
                    "reason": "FieldValueDuplicate",
                    "message": f'Duplicate value: "{name}"',
                    "field": f"{path}.name",
                }
            )
        seen.add(name)
        if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            causes.append(
                errors.not_supported(f"{path}.sideEffects", hook.get("sideEffects", ""), ["None", "NoneOnDryRun"])
            )
        versions = hook.get("admissionReviewVersions")
        if not versions:
            causes.append(errors.required(f"{path}.admissionReviewVersions"))
        elif "v1" not in versions:
            causes.append(
                errors.invalid_value(
                    f"{path}.admissionReviewVersions", versions, "must include at least one of v1, v1beta1"
                )
            )
        if hook.get("failurePolicy") not in ("Fail", "Ignore"):
            causes.append(errors.not_supported(f"{path}.failurePolicy", hook.get("failurePolicy"), ["Fail", "Ignore"]))
        timeout = hook.get("timeoutSeconds")
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            causes.append(
                errors.invalid_value(
                    f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"
                )
            )
        client = hook.get("clientConfig") or {}
        url, service = client.get("url"), client.get("service")
        if bool(url) == bool(service):
            causes.append(
                errors.required(f"{path}.clientConfig")
                | {"message": "Required value: exactly one of url or service is required"}
            )
        elif url and not str(url).startswith("https://"):
            causes.append(
                errors.invalid_value(f"{path}.clientConfig.url", url, "'https' is the only allowed URL scheme")
            )
    return causes
