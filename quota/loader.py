"""Read a team-quota file: YAML text → QuotaConfig, with every error naming its path and line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path as FilePath
from typing import Any

import yaml
from pydantic import ValidationError

from quota import rules
from quota.config import QuotaConfig

Path = tuple[str | int, ...]
LineMap = dict[Path, int]


@dataclass(frozen=True)
class ConfigProblem:
    path: Path
    message: str
    line: int | None = None

    def render(self) -> str:
        where = format_path(self.path) or "(top level)"
        at = f" (line {self.line})" if self.line is not None else ""
        return f"{where}{at}: {self.message}"


class ConfigError(ValueError):
    """A team-quota file that cannot be used; carries every problem found."""

    def __init__(self, problems: list[ConfigProblem], source: str = "") -> None:
        self.problems = problems
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.source}: " if self.source else ""
        count = len(self.problems)
        lines = [f"{head}{count} problem{'s' if count != 1 else ''} in the quota configuration"]
        lines += [f"  {p.render()}" for p in self.problems]
        return "\n".join(lines)


def format_path(path: Path) -> str:
    """`("teams", 3, "quotas", 0, "resources", "nvidia.com/gpu")` → `teams[3].quotas[0].resources.nvidia.com/gpu`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def load_config_file(path: str | FilePath) -> QuotaConfig:
    file = FilePath(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigProblem((), f"cannot read the file: {exc.strerror}")], str(path)) from None
    return load_config_text(text, source=str(path))


def load_config_text(text: str, source: str = "") -> QuotaConfig:
    data, lines = parse_yaml_with_lines(text, source)
    return load_config_data(data, lines, source=source)


def load_config_data(data: Any, lines: LineMap | None = None, prefix: Path = (), source: str = "") -> QuotaConfig:
    """Validate an already-parsed body (e.g. the `config:` of a scenario, whose paths start with `prefix`)."""
    lines = lines or {}
    if not isinstance(data, Mapping):
        raise ConfigError([ConfigProblem(prefix, "expected a mapping (a QuotaConfig body)", lines.get(prefix))], source)
    try:
        config = QuotaConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            [_problem(prefix, tuple(err["loc"]), _message(err), lines) for err in exc.errors()], source
        ) from None
    problems = rules.check(config)
    if problems:
        raise ConfigError([_problem(prefix, path, msg, lines) for path, msg in problems], source)
    return config


def _message(err: Mapping[str, Any]) -> str:
    message = str(err["msg"])
    if err["type"] == "extra_forbidden":
        return "unknown field"
    return message.removeprefix("Value error, ")


def _problem(prefix: Path, loc: Path, message: str, lines: LineMap) -> ConfigProblem:
    # pydantic puts enum/union branch names into loc; they are not keys of the file.
    path = (*prefix, *(p for p in loc if not (isinstance(p, str) and p.startswith(("function-", "tagged-")))))
    return ConfigProblem(path, message, _nearest_line(path, lines))


def _nearest_line(path: Path, lines: LineMap) -> int | None:
    # A missing key has no line of its own; its parent mapping's line is the helpful one.
    for cut in range(len(path), -1, -1):
        line = lines.get(path[:cut])
        if line is not None:
            return line
    return None


def parse_yaml_with_lines(text: str, source: str = "") -> tuple[Any, LineMap]:
    """Parse one YAML document and remember the 1-based line of every key and list item."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem((), f"not valid YAML: {problem}", line)], source) from None
    lines: LineMap = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def _walk(node: yaml.Node, path: Path, lines: LineMap) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
            child = (*path, key)
            lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, lines)
            lines[child] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines)
