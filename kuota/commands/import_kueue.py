"""`kuota import-kueue FILE... [-o OUT] [--set KEY=VALUE]...`: Kueue manifests → one team-quota file.

The conversion itself is importers.kueue (pure); this module reads the files, renders Go templates, follows
knavigator workflows to their templates, validates the result with kuota's own loader and writes it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml

from importers.kueue import (
    KUEUE_KINDS,
    KueueImportError,
    TemplateError,
    convert,
    expand_workflow,
    is_knavigator_workflow,
    is_template,
    render_template,
    template_kind,
    to_yaml,
    workflow_template_paths,
)
from quota.loader import ConfigError, load_config_data

HELP = (
    "Convert Kueue manifests (ResourceFlavor, ClusterQueue, Cohort, LocalQueue, WorkloadPriorityClass; "
    "kueue.x-k8s.io v1beta1 or v1beta2; multi-document YAML or `kind: List`) into one kuota team-quota "
    "file."
    "\n\n"
    "Fields kuota does not support are reported as warnings on stderr; other kinds are skipped. "
    "Files with Go-template placeholders ({{.name}}) are rendered with the --set values first. A NVIDIA "
    "knavigator workflow (a file with `tasks:`) is followed to the templates it submits, looked up beside "
    "the workflow and in its parent folders, in the current directory, and as flattened copies "
    "(`resources__templates__kueue__x.yaml`) beside it."
)


def register(app: typer.Typer) -> None:
    app.command("import-kueue", help=HELP)(import_kueue)


def import_kueue(
    files: Annotated[list[str], typer.Argument(metavar="FILE", help="Kueue manifests; '-' reads stdin.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", metavar="OUT", help="Write here instead of stdout.")
    ] = None,
    set_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Value for a template placeholder {{.KEY}} (repeatable). KEY.SUB=VALUE builds a map, e.g. "
            "--set nodeLabels.nvidia.com/gpu.count=8. In a workflow, the tasks' own params win.",
        ),
    ] = None,
) -> None:
    values = parse_set_values(set_values or [])
    documents: list[Any] = []
    warnings: list[str] = []
    for name in files:
        docs, notes = read_documents(name, values)
        documents += docs
        warnings += notes
    try:
        result = convert(documents)
    except KueueImportError as exc:
        _warn(warnings)
        _fail("the input has Kueue objects that cannot be converted:\n" + _indent(exc.problems))
    no_objects = any(w.startswith("no Kueue objects") for w in result.warnings)
    if no_objects and set(result.config) <= {"apiVersion", "kind"}:
        # An empty quota file is valid, but writing one would make a wrong input look like a success.
        _warn([*warnings, *(w for w in result.warnings if not w.startswith("no Kueue objects"))])
        _fail(f"nothing to import: no Kueue objects ({', '.join(KUEUE_KINDS)}) and no Kueue Configuration in the input")
    _warn([*warnings, *result.warnings])
    try:
        load_config_data(result.config, source="converted configuration")
    except ConfigError as exc:
        _fail(f"{exc.render()}\n(this is a bug in the Kueue importer: it must only produce valid files)")
    _write(to_yaml(result.config), output)


def parse_set_values(pairs: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` → {KEY: VALUE}; `MAP.SUB=VALUE` → {MAP: {SUB: VALUE}}.

    Split at the first dot only, so label keys such as nvidia.com/gpu.count stay whole. Values stay strings:
    templates print them as written.
    """
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(f"--set expects KEY=VALUE, got {pair!r}")
        top, dot, sub = key.partition(".")
        if not dot:
            values[top] = value
            continue
        mapping = values.setdefault(top, {})
        if not isinstance(mapping, dict):
            _fail(f"--set {key}: {top} was already given as a plain value")
        mapping[sub] = value
    return values


def read_documents(name: str, values: Mapping[str, Any]) -> tuple[list[Any], list[str]]:
    """The parsed documents of one file (rendered or expanded first when it is a template or workflow)."""
    text = _read(name)
    parsed = _try_parse(text)
    if parsed is not None and parsed and is_knavigator_workflow(parsed[0]):
        return _workflow(name, parsed[0], values)
    if is_template(text):
        kind = template_kind(text)
        if kind is not None and kind not in KUEUE_KINDS:
            # Such templates (Jobs) carry placeholders only their runner fills, e.g. knavigator's {{._NAME_}}.
            return [], [f"{name}: skipped a {kind} template (kuota imports only {', '.join(KUEUE_KINDS)})"]
        try:
            text = render_template(text, values, source=name)
        except TemplateError as exc:
            _fail(str(exc))
        return _parse(text, name, "after substituting the --set values"), []
    return (parsed if parsed is not None else _parse(text, name)), []


def _workflow(name: str, workflow: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[list[Any], list[str]]:
    base = Path(name).parent if name != "-" else Path.cwd()
    templates = {path: _read(str(_find_template(base, path, name))) for path in workflow_template_paths(workflow)}
    try:
        return expand_workflow(workflow, templates, values, source=name)
    except TemplateError as exc:
        _fail(str(exc))


def _find_template(base: Path, path: str, workflow: str) -> Path:
    # knavigator resolves template paths against the directory it runs in, normally its repository's root.
    candidates = [folder / path for folder in [base, *base.resolve().parents]]
    candidates += [Path.cwd() / path, base / path.replace("/", "__")]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    _fail(
        f"{workflow}: template {path!r} not found (looked beside the workflow, in its parent folders, in "
        f"the current directory, and for {path.replace('/', '__')!r} beside the workflow)"
    )


def _read(name: str) -> str:
    try:
        if name == "-":
            return sys.stdin.read()
        return Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _fail(f"cannot read {name}: {reason}")


def _try_parse(text: str) -> list[Any] | None:
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return None


def _parse(text: str, name: str, context: str = "") -> list[Any]:
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}{', ' + context if context else ''})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        _fail(f"{name}: not valid YAML{where}: {problem}")


def _write(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror or exc}")


def _warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


def _indent(lines: Sequence[str]) -> str:
    return "\n".join(f"  {line}" for line in lines)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)
