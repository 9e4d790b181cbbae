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
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError([ConfigProblem((), f"cannot read the file: {exc.strerror}")], str(path)) from None
    return load_config_text(decode_text(raw, str(path)), source=str(path))


def decode_text(raw: bytes, source: str = "") -> str:
    """UTF-8 text, or a ConfigError saying where the first byte that is not UTF-8 is."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        message = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start} cannot be decoded"
        raise ConfigError([ConfigProblem((), message, line)], source) from None


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


#: The deepest nesting a quota file, scenario or mapping may have; the real ones need about ten levels.
MAX_DEPTH = 64
#: The most values (keys, items, scalars) a document may hold once its aliases are expanded: far above a
#: 10,000-team file, far below what an alias bomb (a few lines that expand to billions) would make.
MAX_VALUES = 1_000_000

#: libyaml's parser when PyYAML has it (several times faster on large files), else PyYAML's own.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml_with_lines(text: str, source: str = "") -> tuple[Any, LineMap]:
    """Parse one YAML document once, and remember the 1-based line of every key and list item.

    Hostile input gets a clean ConfigError, not a stall or a traceback: nesting deeper than MAX_DEPTH, more than
    MAX_VALUES values once aliases are expanded, and duplicate keys (YAML says a key appears once; PyYAML would
    keep the last silently) are refused before anything is built from the document."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigError([ConfigProblem((), f"nested too deeply (at most {MAX_DEPTH} levels)")], source) from None
        except yaml.YAMLError as exc:
            raise _yaml_error(exc, source) from None
        if node is None:
            return None, {}
        walk = _Walk(loader)
        data = walk.build(node)
        if walk.problems:
            raise ConfigError(walk.problems, source)
        if walk.merges:  # `<<: *defaults` needs PyYAML's merge rules: let its constructor build the document
            try:
                data = loader.construct_document(node)
            except yaml.YAMLError as exc:
                raise _yaml_error(exc, source) from None
            except ValueError as exc:  # as in _Walk._scalar, past the walk only through a merge key
                raise ConfigError([ConfigProblem((), f"not a value kuota can read ({exc})"[:300])], source) from None
        return data, walk.lines
    finally:
        loader.dispose()


def _yaml_error(exc: yaml.YAMLError, source: str) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    return ConfigError([ConfigProblem((), f"not valid YAML: {problem}", line)], source)


class _Limit(Exception):
    """The document is too deep or too large: stop walking at once."""


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


class _Walk:
    """One pass over the composed document that builds its value and checks it: the line of every key and item,
    the depth and size bounds, duplicate keys. Building here instead of with PyYAML's constructor halves the time
    of a large file (the constructor is pure Python, and was a second pass); scalars that are not plain strings
    (numbers, booleans, null, timestamps, custom tags) still go through the loader's own constructors."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.lines: LineMap = {}
        self.problems: list[ConfigProblem] = []
        self.values = 0
        self.merges = False

    def build(self, node: yaml.Node) -> Any:
        try:
            return self._build(node, (), 0)
        except _Limit:  # the problem is recorded; the rest of the document is not looked at
            return None

    def _build(self, node: yaml.Node, path: Path, depth: int) -> Any:
        self.values += 1
        line = node.start_mark.line + 1
        if self.values > MAX_VALUES:
            self.problems.append(
                ConfigProblem(path, f"more than {MAX_VALUES:,} values (expanded YAML aliases count each time)", line)
            )
            raise _Limit
        if depth > MAX_DEPTH:
            self.problems.append(ConfigProblem(path, f"nested too deeply (at most {MAX_DEPTH} levels)", line))
            raise _Limit
        self.lines.setdefault(path, line)
        if isinstance(node, yaml.ScalarNode):
            return node.value if node.tag == _STR else self._scalar(node, path, line)
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
            return [self._build(item, (*path, index), depth + 1) for index, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode) and node.tag == _MAP:
            out: dict[Any, Any] = {}
            first: dict[Any, int] = {}
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line + 1
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
                    self.merges = True
                    self._build(value_node, path, depth + 1)  # checked and counted; merged by PyYAML afterwards
                    continue
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.value)
                child = (*path, key)
                if key in first:
                    self.problems.append(ConfigProblem(child, f"duplicate key (first on line {first[key]})", key_line))
                    continue
                first[key] = key_line
                self.lines[child] = key_line
                value = self._build(value_node, child, depth + 1)
                self.lines[child] = key_line
                out[self._key(key_node)] = value
            return out
        return self.loader.construct_object(node, deep=True)  # an explicit tag: PyYAML knows what it means

    def _scalar(self, node: yaml.ScalarNode, path: Path, line: int) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except ValueError as exc:
            # Python refuses to convert integers of more than 4,300 digits (a guard against quadratic parsing);
            # no quota file needs one, so the scalar is a problem of its own line, not a traceback.
            if "digits" in str(exc):
                message = f"a number of {len(node.value):,} characters, far beyond any bound kuota accepts"
            else:
                message = f"not a value kuota can read: {node.value[:40]} ({exc})"[:300]
            self.problems.append(ConfigProblem(path, message, line))
            return None

    def _key(self, node: yaml.Node) -> Any:
        if isinstance(node, yaml.ScalarNode) and node.tag == _STR:
            return node.value
        try:
            key = self.loader.construct_object(node, deep=True)
            hash(key)
        except TypeError:
            return str(node.value)
        return key
