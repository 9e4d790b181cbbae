"""Job traces for `kuota simulate`: real cluster traces and kuota's own CSV, read into plain `TraceJob`s.

Three formats:

- ``itp``: Microsoft ITP 2021 (``cluster,job_id,submission_time,duration,num_gpu``, seconds). Names are
  ``itp-<cluster>-<row>`` with the 1-based data row of the file.
- ``openb``: Alibaba PAI openb pod lists (``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
  creation_time,deletion_time,scheduled_time``). Submission is ``creation_time``; run time is ``deletion_time`` minus
  ``scheduled_time`` (``creation_time`` when a pod that ran has none). Pods that never ran (phase Pending) or have no
  positive run time are skipped and counted. A pod sharing a GPU (``gpu_milli`` < 1000) asks for a whole GPU
  (``fractionalGpu: roundUp``, because a quota counts whole ``nvidia.com/gpu``) or is skipped (``fractionalGpu: skip``).
- ``csv``: kuota's own, header ``submit_s,duration_s,team,priority_class,gpus,cpus,memory,checkpoint_s`` (plus the
  optional ``name``, ``kind`` and ``pods``). Empty optional cells take defaults: priority class → the quota file's
  default class, gpus → 0, cpus → 1 per pod, memory → 4Gi per GPU (1Gi per pod without GPUs), checkpoint_s → the
  mapping's checkpoint rule (never, unless the mapping says otherwise), kind → Job, pods → 1. ``none`` in
  checkpoint_s also means never. Names are ``job-<row>`` without a name column. ``kind`` names a job kind of
  `workloads.registry.REGISTRY`; ``pods`` makes the job a gang of that many identical pods admitted all at once,
  over which gpus, cpus and memory (the job's totals) are split evenly: GPUs into whole GPUs per pod, cpus and
  memory into whole milli-units, or the row is an error.

A `TraceMapping` (YAML, ``--mapping FILE``) says how rows become teams, priority classes, job kinds and checkpoint
intervals; every field left out takes the format's default (`default_mapping`). Randomness comes from one
``random.Random(seed)`` drawn row by row in file order before any window or limit is applied, so the same seed gives
the same job the same class whatever slice of the trace is read.

Times: ``start_ms``/``end_ms`` select jobs submitted in ``[start_ms, end_ms)`` of the trace's own clock. The jobs
returned are sorted by submission and shifted so that ``start_ms`` (when given) is 0; without it, the first job of an
``itp`` or ``openb`` trace is shifted to 0 (their clocks start at an arbitrary collection time) and a ``csv`` keeps
its own times. ``limit`` keeps the first jobs after that.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import random
import zlib
from bisect import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from itertools import accumulate
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from quota.config import MilliQuantity, QuotaConfig
from quota.duration import DurationError, parse_duration_ms
from quota.loader import ConfigError, format_path, parse_yaml_with_lines
from quota.quantity import QuantityError, format_quantity, parse_quantity
from workloads.registry import REGISTRY

TraceFormat = Literal["itp", "openb", "csv"]
FORMATS: tuple[TraceFormat, ...] = ("itp", "openb", "csv")

CSV_COLUMNS = ("submit_s", "duration_s", "team", "priority_class", "gpus", "cpus", "memory", "checkpoint_s")
#: Optional columns of kuota's csv beyond CSV_COLUMNS, which `format_csv` writes only when asked or needed.
CSV_EXTRA_COLUMNS = ("name", "kind", "pods")
DEFAULT_KIND = "Job"
ITP_COLUMNS = ("cluster", "job_id", "submission_time", "duration", "num_gpu")
OPENB_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
_CSV_OPTIONAL = frozenset((*CSV_COLUMNS[3:], "kind"))
_NEVER = ("none", "never")
_MIB_MILLI = 2**20 * 1000

log = logging.getLogger(__name__)


class TraceError(ValueError):
    """A trace or mapping that cannot be read; the message names the file, the line or the field."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    name: str
    submit_ms: int
    """Virtual time of submission, ms from the start of the replay."""
    duration_ms: int
    """Run time once admitted."""
    team: str
    priority_class: str | None
    gpus: int
    """Whole GPUs per job (the caller turns them into milli-units)."""
    cpu_milli: int
    memory_milli: int
    """Bytes × 1000 (Kubernetes milli-units of memory)."""
    checkpoint_interval_ms: int | None
    """None: never checkpoints, so all work since the start is lost on preemption."""
    kind: str = DEFAULT_KIND
    """A job kind of `workloads.registry.REGISTRY`."""
    pods: int = 1
    """A gang of this many identical pods, admitted all at once; gpus, cpu_milli and memory_milli are the job's
    totals, split evenly over them (`pod_requests`)."""

    def pod_requests(self) -> tuple[int, int, int]:
        """(GPU, cpu, memory) milli-units of one pod: the totals divided by `pods` exactly, or ValueError."""
        problem = uneven_split(self.gpus, self.cpu_milli, self.memory_milli, self.pods)
        if problem is not None:
            raise ValueError(f"trace job {self.name!r}: {problem}")
        return self.gpus // self.pods * 1000, self.cpu_milli // self.pods, self.memory_milli // self.pods


def uneven_split(gpus: int, cpu_milli: int | None, memory_milli: int | None, pods: int) -> str | None:
    """Why these totals do not split evenly over `pods` pods, or None when they do: a pod asks for whole GPUs
    (Kubernetes counts an extended resource such as nvidia.com/gpu in whole units) and whole milli-units of cpu and
    memory. Totals left out (None) take per-pod defaults, which always split."""
    if pods < 1:
        return f"pods {pods} must be 1 or more"
    if gpus % pods:
        return f"gpus {gpus} do not split into whole GPUs over {pods} pods"
    for what, total in (("cpus", cpu_milli), ("memory", memory_milli)):
        if total is not None and total % pods:
            shown = format_quantity(total, binary=what == "memory")
            return f"{what} {shown} do not split evenly over {pods} pods (in milli-units)"
    return None


@dataclass(frozen=True, slots=True)
class TraceRead:
    """Jobs and what happened to the rest of the file, for a line of output."""

    jobs: list[TraceJob]
    rows: int
    """Data rows in the file."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Rows that are not jobs, by reason (e.g. pods that never ran)."""
    outside: int = 0
    """Jobs left out by the time window or the limit."""

    def summary(self) -> str:
        parts = [f"{len(self.jobs)} jobs from {self.rows} rows"]
        parts += [f"{count} skipped: {reason}" for reason, count in self.skipped.items()]
        if self.outside:
            parts.append(f"{self.outside} outside the window or limit")
        return "; ".join(parts)


# -- the mapping ---------------------------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Assign(_Model):
    """How one field of a job (its team, priority class or kind) is chosen. Exactly one of value, column, random.

    - ``{value: nlp}``: every job gets it.
    - ``{column: cluster}``: the cell itself names it.
    - ``{column: cluster, map: {cluster01: nlp, ...}, default: vision}``: looked up; ``default`` covers values not
      in the map and empty cells (without one they are errors, except an empty priority class, which takes the
      quota file's default class, and an empty kind, which is Job).
    - ``{column: cluster, roundRobin: true}``: the column's distinct values, sorted, go to the quota file's teams
      (or priority classes, or the known job kinds) in file order, wrapping around.
    - ``{column: name, hash: true}``: CRC-32 of the cell picks one of them (stable across runs and machines).
    - ``{random: {production: 0.1, research: 0.6, development: 0.3}}``: drawn with these relative weights.
    """

    value: str | None = None
    column: str | None = None
    map: dict[str, str] | None = None
    round_robin: bool = False
    hash: bool = False
    random: dict[str, float] | None = None
    default: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Assign:
        ways = [name for name in ("value", "column", "random") if getattr(self, name) is not None]
        if len(ways) != 1:
            raise ValueError("give exactly one of `value`, `column` or `random`")
        lookups = [
            name
            for name, on in (("map", self.map is not None), ("roundRobin", self.round_robin), ("hash", self.hash))
            if on
        ]
        if self.column is None and (lookups or self.default is not None):
            raise ValueError(f"`{(lookups or ['default'])[0]}` needs a `column`")
        if len(lookups) > 1:
            raise ValueError(f"give at most one of `map`, `roundRobin` or `hash` (got {', '.join(lookups)})")
        return self

    @field_validator("random")
    @classmethod
    def _weights(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("name at least one choice")
        for name, weight in value.items():
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(f"weight of {name!r} must be a non-negative number")
        if sum(value.values()) <= 0:
            raise ValueError("the weights add up to 0")
        return value

    def names(self) -> set[str]:
        """Every team or class the rule names by itself (cells read by an identity rule are checked per row)."""
        named = set(self.map.values()) if self.map else set()
        named |= {n for n in (self.value, self.default) if n is not None}
        return named | set(self.random or {})


class ResourceDefaults(_Model):
    """Requests for traces (or CSV cells) that give none."""

    cpus: MilliQuantity = 1000
    memory_per_gpu: MilliQuantity = 4 * 2**30 * 1000
    memory: MilliQuantity = 2**30 * 1000
    """For jobs without GPUs."""


class TraceMapping(_Model):
    """How a trace's rows become kuota jobs. Fields left out take the format's default (see `default_mapping`).

    ```yaml
    team: {column: cluster, map: {cluster01: nlp, cluster02: vision}, default: speech}
    priority: {random: {production: 0.1, research: 0.6, development: 0.3}}
    kind: {value: PyTorchJob}   # every job's kind (csv default: {column: kind}, whose empty cells are Jobs)
    checkpointInterval: 30m     # or none
    checkpointFraction: 0.5     # share of jobs that checkpoint (drawn per job); the rest never do
    fractionalGpu: roundUp      # openb pods on a shared GPU: roundUp to one whole GPU, or skip them
    defaults: {cpus: 1, memoryPerGpu: 4Gi, memory: 1Gi}
    ```
    """

    team: Assign | None = None
    priority: Assign | None = None
    kind: Assign | None = None
    checkpoint_interval: str | None = None
    checkpoint_fraction: float | None = Field(default=None, ge=0, le=1)
    fractional_gpu: Literal["roundUp", "skip"] = "roundUp"
    defaults: ResourceDefaults = Field(default_factory=ResourceDefaults)

    @field_validator("checkpoint_interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() in _NEVER):
            return None if value is None else "none"
        try:
            ms = parse_duration_ms(value)
        except DurationError as exc:
            raise ValueError(f"{exc}, or `none`") from None
        if ms <= 0:
            raise ValueError("a checkpoint interval must be longer than 0 (or `none`)")
        return str(value).strip()

    def checkpoint_ms(self) -> int | None:
        if self.checkpoint_interval is None or self.checkpoint_interval == "none":
            return None
        return parse_duration_ms(self.checkpoint_interval)


def load_mapping(path: str | Path) -> TraceMapping:
    """Read a mapping file; every problem is reported with its field and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the mapping file: {exc.strerror}") from None
    return parse_mapping(text, source=str(path))


def parse_mapping(text: str, source: str = "mapping") -> TraceMapping:
    try:
        data, lines = parse_yaml_with_lines(text, source)
    except ConfigError as exc:
        raise TraceError(exc.render().replace("quota configuration", "trace mapping")) from None
    if data is None:
        return TraceMapping()
    if not isinstance(data, Mapping):
        raise TraceError(f"{source}: a trace mapping is a YAML mapping (team, priority, checkpointInterval, ...)")
    try:
        return TraceMapping.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            line = next((lines[loc[:cut]] for cut in range(len(loc), -1, -1) if loc[:cut] in lines), None)
            at = f" (line {line})" if line is not None else ""
            message = "unknown field" if err["type"] == "extra_forbidden" else str(err["msg"])
            problems.append(f"  {format_path(loc) or '(top level)'}{at}: {message.removeprefix('Value error, ')}")
        raise TraceError(f"{source}: {len(problems)} problem(s) in the trace mapping\n" + "\n".join(problems)) from None


def default_mapping(fmt: TraceFormat, config: QuotaConfig) -> TraceMapping:
    """The mapping used for every field a mapping file leaves out.

    - itp: teams ``{column: cluster, roundRobin: true}`` (cluster01 → the first team of the quota file, …);
      priority classes drawn at random (`class_weights`); checkpoint every 30m for half of the jobs.
    - openb: teams ``{column: name, hash: true}``; priority ``{column: qos}`` with LS and Guaranteed → the highest
      preemptible class, Burstable → the next one, BE → the lowest (`qos_map`); never checkpoints (mostly services).
    - csv: ``{column: team}``, ``{column: priority_class}`` and ``{column: kind}`` as written; empty checkpoint
      cells never checkpoint.

    Every job of an itp or openb trace is a Job unless the mapping gives a ``kind`` rule.
    """
    if fmt == "itp":
        weights = class_weights(config)
        return TraceMapping(
            team=Assign(column="cluster", round_robin=True),
            priority=Assign(random=weights) if weights else None,
            checkpoint_interval="30m",
            checkpoint_fraction=0.5,
        )
    if fmt == "openb":
        qos = qos_map(config)
        return TraceMapping(
            team=Assign(column="name", hash=True),
            priority=Assign(column="qos", map=qos) if qos else None,
            checkpoint_interval="none",
            checkpoint_fraction=1.0,
        )
    if fmt == "csv":
        return TraceMapping(
            team=Assign(column="team"),
            priority=Assign(column="priority_class"),
            kind=Assign(column="kind"),
            checkpoint_interval="none",
            checkpoint_fraction=1.0,
        )
    raise TraceError(f"unknown trace format {fmt!r} (one of {', '.join(FORMATS)})")


def effective_mapping(fmt: TraceFormat, mapping: TraceMapping, config: QuotaConfig) -> TraceMapping:
    """`mapping` with what it leaves out filled from the format's default."""
    base = default_mapping(fmt, config)
    fraction = mapping.checkpoint_fraction
    if fraction is None:
        # An interval given on its own means every job checkpoints; the format's fraction goes with its interval.
        fraction = 1.0 if mapping.checkpoint_interval is not None else base.checkpoint_fraction
    return TraceMapping(
        team=mapping.team if mapping.team is not None else base.team,
        priority=mapping.priority if mapping.priority is not None else base.priority,
        kind=mapping.kind if mapping.kind is not None else base.kind,
        checkpoint_interval=mapping.checkpoint_interval or base.checkpoint_interval,
        checkpoint_fraction=fraction,
        fractional_gpu=mapping.fractional_gpu,
        defaults=mapping.defaults,
    )


def _preemptible_classes(config: QuotaConfig) -> list[str]:
    """Classes a trace job may get, highest value first: non-preemptible ones are reserved for the system."""
    classes = [pc for pc in config.priority_classes if pc.preemptible] or list(config.priority_classes)
    return [pc.name for pc in sorted(classes, key=lambda pc: -pc.value)]


def class_weights(config: QuotaConfig) -> dict[str, float]:
    """Default draw for traces without priorities: the default class 0.6, the classes above it share 0.1, those
    below share 0.3 (a research cluster: mostly ordinary work, some urgent, the rest tinkering). Non-preemptible
    classes are left out. Without a default class, equal weights."""
    names = _preemptible_classes(config)
    default = config.default_priority_class()
    if default is None or default.name not in names:
        return dict.fromkeys(names, 1.0)
    values = {pc.name: pc.value for pc in config.priority_classes}
    above = [n for n in names if values[n] > default.value]
    below = [n for n in names if values[n] < default.value]
    weights = {default.name: 0.6}
    weights |= {n: 0.1 / len(above) for n in above}
    weights |= {n: 0.3 / len(below) for n in below}
    return {n: weights[n] for n in names if n in weights}


def qos_map(config: QuotaConfig) -> dict[str, str]:
    """openb QoS → class: latency-sensitive and guaranteed pods get the highest preemptible class, best-effort the
    lowest, burstable the one below the highest."""
    names = _preemptible_classes(config)
    if not names:
        return {}
    second = names[1] if len(names) > 1 else names[0]
    return {"LS": names[0], "Guaranteed": names[0], "Burstable": second, "BE": names[-1]}


# -- reading -------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Row:
    """A parsed row, then the team, class, kind and checkpoint interval the mapping chose for it.

    One object per row (the ITP trace has 69k), built positionally and completed in place: no second object per row.
    """

    line: int
    name: str
    submit_ms: int
    duration_ms: int
    gpus: int
    cells: list[str]
    cpu_milli: int | None
    memory_milli: int | None
    checkpoint_ms: int | None
    checkpoint_given: bool
    team: str = ""
    priority_class: str | None = None
    kind: str = DEFAULT_KIND
    pods: int = 1


@dataclass(slots=True)
class _Parsed:
    header: list[str]
    rows: list[_Row]
    skipped: dict[str, int]
    optional: frozenset[str] = frozenset()
    """Columns of the format that a file may leave out."""


_Lines = Iterator[tuple[int, list[str]]]
#: A format's reader: numbered data rows in, _Rows out; rows that are not jobs are counted in `skipped` by reason.
_FormatReader = Callable[[_Lines, list[str], TraceMapping, str, dict[str, int]], Iterator[_Row]]
_Chooser = Callable[[_Row, random.Random], str | None]


def read_trace(
    path: str | Path,
    fmt: TraceFormat,
    mapping: TraceMapping,
    config: QuotaConfig,
    *,
    seed: int = 0,
    limit: int | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> list[TraceJob]:
    """The jobs of a trace file, sorted by submission. See the module docstring for formats and mapping."""
    result = read_trace_detailed(path, fmt, mapping, config, seed=seed, limit=limit, start_ms=start_ms, end_ms=end_ms)
    if result.skipped or result.outside:
        log.info("%s: %s", path, result.summary())
    return result.jobs


def read_trace_detailed(
    path: str | Path,
    fmt: TraceFormat,
    mapping: TraceMapping,
    config: QuotaConfig,
    *,
    seed: int = 0,
    limit: int | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> TraceRead:
    """`read_trace`, also saying how many rows were skipped and why."""
    source = str(path)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r} (one of {', '.join(FORMATS)})")
    if limit is not None and limit < 0:
        raise TraceError(f"limit must be 0 or more, not {limit}")
    mapping = effective_mapping(fmt, mapping, config)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            parsed = _parse(handle, fmt, mapping, source)
    except OSError as exc:
        raise TraceError(f"{source}: cannot read the trace: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{source}: not a UTF-8 text file ({exc.reason})") from None
    # Choices are drawn for every row, in file order, before the window: a job's class does not depend on the slice.
    _choose(parsed, mapping, config, seed, source)
    kept = [
        row
        for row in parsed.rows
        if (start_ms is None or row.submit_ms >= start_ms) and (end_ms is None or row.submit_ms < end_ms)
    ]
    kept.sort(key=lambda row: (row.submit_ms, row.name))
    origin = start_ms if start_ms is not None else (kept[0].submit_ms if kept and fmt != "csv" else 0)
    if limit is not None:
        kept = kept[:limit]
    jobs = [_job(row, origin, mapping.defaults) for row in kept]
    data_rows = len(parsed.rows) + sum(parsed.skipped.values())
    return TraceRead(jobs, data_rows, parsed.skipped, len(parsed.rows) - len(jobs))


def _job(row: _Row, origin: int, defaults: ResourceDefaults) -> TraceJob:
    # Defaults are per pod (memory: per GPU), so the totals they make always split evenly over the pods.
    if row.memory_milli is not None:
        memory = row.memory_milli
    else:
        memory = defaults.memory_per_gpu * row.gpus if row.gpus else defaults.memory * row.pods
    return TraceJob(
        row.name,
        row.submit_ms - origin,
        row.duration_ms,
        row.team,
        row.priority_class,
        row.gpus,
        defaults.cpus * row.pods if row.cpu_milli is None else row.cpu_milli,
        memory,
        row.checkpoint_ms,
        row.kind,
        row.pods,
    )


def _parse(handle: Iterable[str], fmt: TraceFormat, mapping: TraceMapping, source: str) -> _Parsed:
    reader = csv.reader(handle)
    try:
        header = [cell.strip() for cell in next(reader, [])]
    except csv.Error as exc:
        raise TraceError(f"{source}, line 1: not valid CSV ({exc})") from None
    if not header:
        raise TraceError(f"{source}: the file is empty (expected a header line)")
    skipped: dict[str, int] = {}
    rows = list(_READERS[fmt](_numbered(reader, len(header), source), header, mapping, source, skipped))
    return _Parsed(header, rows, skipped, _CSV_OPTIONAL if fmt == "csv" else frozenset())


def _numbered(reader: Any, width: int, source: str) -> _Lines:
    try:
        for cells in reader:
            if len(cells) != width:
                if not cells or (len(cells) == 1 and not cells[0].strip()):
                    continue
                raise _fail(source, reader.line_num, f"{len(cells)} cells where the header has {width}")
            yield reader.line_num, cells
    except csv.Error as exc:
        raise _fail(source, reader.line_num, f"not valid CSV ({exc})") from None


def _fail(source: str, line: int, message: str) -> TraceError:
    return TraceError(f"{source}, line {line}: {message}")


def _columns(header: list[str], wanted: Iterable[str], fmt: str, source: str) -> dict[str, int]:
    missing = [name for name in wanted if name not in header]
    if missing:
        raise TraceError(
            f"{source}: not {fmt} trace: missing column(s) {', '.join(missing)} (header: {','.join(header)})"
        )
    return {name: index for index, name in enumerate(header)}


def _int(text: str, what: str, source: str, line: int, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _fail(source, line, f"{what} {text!r} is not a whole number") from None
    if value < minimum:
        raise _fail(source, line, f"{what} {text!r} must be {minimum} or more")
    return value


def _seconds_ms(text: str, what: str, source: str, line: int, positive: bool = False) -> int:
    """Seconds (whole or decimal) → whole milliseconds, exactly: no binary float on the way."""
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise _fail(source, line, f"{what} {text!r} is not a number of seconds") from None
    if not number.is_finite() or number < 0 or (positive and number == 0):
        raise _fail(source, line, f"{what} {text!r} must be {'more than 0' if positive else '0 or more'} seconds")
    return int(number * 1000)


def _quantity(text: str, what: str, source: str, line: int) -> int | None:
    if not text:
        return None
    try:
        milli = parse_quantity(text)
    except QuantityError as exc:
        raise _fail(source, line, f"{what}: {exc}") from None
    if milli < 0:
        raise _fail(source, line, f"{what} {text!r} is negative")
    return milli


def _itp_rows(
    lines: _Lines, header: list[str], mapping: TraceMapping, source: str, skipped: dict[str, int]
) -> Iterator[_Row]:
    col = _columns(header, ITP_COLUMNS, "an itp", source)
    cluster, submitted, duration, num_gpu = (col[c] for c in ("cluster", "submission_time", "duration", "num_gpu"))
    for row, (line, cells) in enumerate(lines, 1):
        # The fast path converts without per-cell helpers; anything odd is re-checked to name the cell at fault.
        try:
            submit_s, duration_s, gpus = int(cells[submitted]), int(cells[duration]), int(cells[num_gpu])
        except ValueError:
            submit_s = duration_s = gpus = -1
        if submit_s < 0 or duration_s <= 0 or gpus < 0:
            _int(cells[submitted], "submission_time", source, line)
            _int(cells[duration], "duration", source, line, minimum=1)
            _int(cells[num_gpu], "num_gpu", source, line)
        name = f"itp-{cells[cluster].strip()}-{row}"
        yield _Row(line, name, submit_s * 1000, duration_s * 1000, gpus, cells, None, None, None, False)


def _openb_rows(
    lines: _Lines, header: list[str], mapping: TraceMapping, source: str, skipped: dict[str, int]
) -> Iterator[_Row]:
    col = _columns(header, OPENB_COLUMNS, "an openb", source)
    skip_shared = mapping.fractional_gpu == "skip"
    for row, (line, cells) in enumerate(lines, 1):
        reason = None
        deleted = cells[col["deletion_time"]].strip()
        created = _int(cells[col["creation_time"]], "creation_time", source, line)
        scheduled = cells[col["scheduled_time"]].strip()
        started = _int(scheduled, "scheduled_time", source, line) if scheduled else created
        duration_s = _int(deleted, "deletion_time", source, line) - started if deleted else 0
        gpus = _int(cells[col["num_gpu"]], "num_gpu", source, line)
        gpu_milli = _int(cells[col["gpu_milli"]].strip() or "0", "gpu_milli", source, line)
        if cells[col["pod_phase"]].strip() == "Pending":
            reason = "never ran (pod_phase Pending)"
        elif duration_s <= 0:
            reason = "no run time (no deletion_time, or not after scheduled_time)"
        elif skip_shared and gpus and 0 < gpu_milli < 1000:
            reason = "shares a GPU (gpu_milli < 1000, fractionalGpu: skip)"
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        yield _Row(
            line,
            cells[col["name"]].strip() or f"openb-{row}",
            created * 1000,
            duration_s * 1000,
            # With roundUp a shared-GPU pod takes a whole nvidia.com/gpu: that is what a quota can count.
            gpus,
            cells,
            _int(cells[col["cpu_milli"]], "cpu_milli", source, line),
            _int(cells[col["memory_mib"]], "memory_mib", source, line) * _MIB_MILLI,
            None,
            False,
        )


def _csv_rows(
    lines: _Lines, header: list[str], mapping: TraceMapping, source: str, skipped: dict[str, int]
) -> Iterator[_Row]:
    col = _columns(header, ("submit_s", "duration_s"), "a kuota csv", source)
    # Columns the mapping reads are fine; any other unknown one is probably a typo that would silently default.
    rules = (mapping.team, mapping.priority, mapping.kind)
    known = {*CSV_COLUMNS, *CSV_EXTRA_COLUMNS, *(rule.column for rule in rules if rule and rule.column)}
    unknown = [name for name in header if name not in known]
    if unknown:
        raise TraceError(
            f"{source}: unknown column(s) {', '.join(unknown)} "
            f"(kuota csv columns: {','.join(CSV_COLUMNS)}, {', '.join(CSV_EXTRA_COLUMNS)})"
        )
    names: dict[str, int] = {}
    for row, (line, cells) in enumerate(lines, 1):

        def cell(name: str, cells: list[str] = cells) -> str:
            index = col.get(name)
            return cells[index].strip() if index is not None else ""

        name = cell("name") or f"job-{row}"
        if names.setdefault(name, line) != line:
            raise _fail(source, line, f"name {name!r} is already used on line {names[name]}")
        checkpoint = cell("checkpoint_s")
        interval = None
        if checkpoint and checkpoint.lower() not in _NEVER:
            interval = _seconds_ms(checkpoint, "checkpoint_s", source, line, positive=True)
        parsed = _Row(
            line,
            name,
            _seconds_ms(cell("submit_s"), "submit_s", source, line),
            _seconds_ms(cell("duration_s"), "duration_s", source, line, positive=True),
            _int(cell("gpus") or "0", "gpus", source, line),
            cells,
            _quantity(cell("cpus"), "cpus", source, line),
            _quantity(cell("memory"), "memory", source, line),
            interval,
            bool(checkpoint),
        )
        parsed.pods = _int(cell("pods") or "1", "pods", source, line, minimum=1)
        problem = uneven_split(parsed.gpus, parsed.cpu_milli, parsed.memory_milli, parsed.pods)
        if problem is not None:
            raise _fail(source, line, problem)
        yield parsed


_READERS: dict[str, _FormatReader] = {"itp": _itp_rows, "openb": _openb_rows, "csv": _csv_rows}


# -- choosing teams, classes, checkpoints and kinds ----------------------------------------------------------------


def _choose(parsed: _Parsed, mapping: TraceMapping, config: QuotaConfig, seed: int, source: str) -> None:
    """Give every row its team, priority class, checkpoint interval and kind."""
    teams = [team.name for team in config.teams]
    if not teams:
        raise TraceError("the quota file has no teams to give trace jobs to")
    default_class = config.default_priority_class()
    classes = [pc.name for pc in config.priority_classes]
    choose_team = _chooser(mapping.team, _Field("team", "team", teams, "of the quota file"), parsed, source)
    choose_class = _chooser(
        mapping.priority,
        _Field(
            "priority", "priority class", classes, "of the quota file", default_class.name if default_class else None
        ),
        parsed,
        source,
    )
    kinds = _Field("kind", "job kind", list(REGISTRY.names()), "kuota knows", DEFAULT_KIND)
    choose_kind = _chooser(mapping.kind, kinds, parsed, source)
    interval, fraction = mapping.checkpoint_ms(), mapping.checkpoint_fraction
    if interval is None or not fraction:
        interval, fraction = None, 1.0
    draw = fraction is not None and fraction < 1
    rng = random.Random(seed)
    for row in parsed.rows:
        team = choose_team(row, rng)
        assert team is not None  # a team chooser has no None fallback
        row.team = team
        row.priority_class = choose_class(row, rng)
        if not row.checkpoint_given:
            row.checkpoint_ms = interval if not draw or rng.random() < (fraction or 0) else None
        row.kind = choose_kind(row, rng) or DEFAULT_KIND
        if row.kind != DEFAULT_KIND and "/" in row.name:
            # The workload is named KIND/NAMESPACE/NAME: NAME is one object's name.
            raise _fail(source, row.line, f"name {row.name!r} of a {row.kind} cannot hold '/'")


@dataclass(frozen=True, slots=True)
class _Field:
    """A field of a job that a mapping rule chooses, and how messages name it."""

    key: str
    """The mapping's field: team, priority or kind."""
    label: str
    names: list[str]
    """What it may be."""
    where: str
    """Where those come from, after "not a <label>"."""
    fallback: str | None = None
    """For an empty cell without the rule's default (a team has none: an empty team is an error)."""

    def unknown(self, value: str) -> str:
        return f"{value} not a {self.label} {self.where} ({self.label}s: {', '.join(self.names) or 'none'})"


def _chooser(rule: Assign | None, chosen: _Field, parsed: _Parsed, source: str) -> _Chooser:
    """Compile a rule into a per-row function, checking once everything that can be checked before reading rows."""
    fallback = chosen.fallback
    if rule is None:
        return lambda row, rng: fallback
    unknown = sorted(rule.names() - set(chosen.names))
    if unknown:
        raise TraceError(f"mapping {chosen.key}: {chosen.unknown(', '.join(map(repr, unknown)))}")
    if rule.value is not None:
        constant = rule.value
        return lambda row, rng: constant
    if rule.random is not None:
        return _weighted(rule.random)
    assert rule.column is not None  # Assign allows exactly one of value, random, column
    if rule.column not in parsed.header and rule.column in parsed.optional:
        # An optional column of the format left out: every cell is empty.
        return _column_chooser(rule, None, chosen, lambda value: value, source)
    if rule.column not in parsed.header:
        raise TraceError(
            f"mapping {chosen.key}.column: {source} has no column {rule.column!r} (columns: {','.join(parsed.header)})"
        )
    index = parsed.header.index(rule.column)
    if (rule.round_robin or rule.hash) and not chosen.names:
        raise TraceError(f"mapping {chosen.key}: the quota file has no {chosen.label}s to spread {rule.column!r} over")
    return _column_chooser(rule, index, chosen, _lookup(rule, index, chosen.names, parsed), source)


def _weighted(weights: dict[str, float]) -> _Chooser:
    # What random.choices(cum_weights=...) does, without its per-call set-up.
    names = list(weights)
    cumulative = list(accumulate(weights.values()))
    total, last = cumulative[-1], len(names) - 1
    return lambda row, rng: names[bisect(cumulative, rng.random() * total, 0, last)]


def _lookup(rule: Assign, index: int, names: list[str], parsed: _Parsed) -> Callable[[str], str | None]:
    if rule.round_robin:
        distinct = sorted({row.cells[index].strip() for row in parsed.rows} - {""})
        return {value: names[n % len(names)] for n, value in enumerate(distinct)}.get
    if rule.hash:
        return lambda value: names[zlib.crc32(value.encode()) % len(names)]
    if rule.map is not None:
        return rule.map.get
    return lambda value: value


def _column_chooser(
    rule: Assign, index: int | None, chosen: _Field, lookup: Callable[[str], str | None], source: str
) -> _Chooser:
    column, default, known = rule.column, rule.default, set(chosen.names)

    def choose(row: _Row, rng: random.Random) -> str | None:
        cell = row.cells[index].strip() if index is not None else ""
        if not cell:
            if default is not None:
                return default
            if chosen.key != "team":
                return chosen.fallback
            raise _fail(source, row.line, f"{column} is empty and the mapping's team rule has no default")
        value = lookup(cell)
        if value is None:
            if default is not None:
                return default
            raise _fail(
                source, row.line, f"{column} {cell!r} is not in the mapping's {chosen.label} map, which has no default"
            )
        if value not in known:
            raise _fail(source, row.line, f"{column} {chosen.unknown(f'{cell!r} is')}")
        return value

    return choose


# -- writing kuota's own format -----------------------------------------------------------------------------------


def format_csv(jobs: Iterable[TraceJob], *, names: bool = False) -> str:
    """Jobs in kuota's csv format, which `read_trace(..., "csv", ...)` reads back to the same jobs. The kind and
    pods columns are written when a job is not a single-pod Job."""
    jobs = list(jobs)
    gangs = any(job.kind != DEFAULT_KIND or job.pods != 1 for job in jobs)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *(["name"] if names else []), *(["kind", "pods"] if gangs else [])])
    for job in jobs:
        checkpoint = "" if job.checkpoint_interval_ms is None else _format_seconds(job.checkpoint_interval_ms)
        writer.writerow(
            [
                _format_seconds(job.submit_ms),
                _format_seconds(job.duration_ms),
                job.team,
                job.priority_class or "",
                job.gpus,
                format_quantity(job.cpu_milli),
                format_quantity(job.memory_milli, binary=True),
                checkpoint,
                *([job.name] if names else []),
                *([job.kind, job.pods] if gangs else []),
            ]
        )
    return out.getvalue()


def _format_seconds(ms: int) -> str:
    return str(ms // 1000) if ms % 1000 == 0 else str(Decimal(ms) / 1000)
