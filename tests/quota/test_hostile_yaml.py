"""Hostile YAML gets a clean ConfigError with a path and a line, never a stall, a traceback or a silent surprise:
an alias bomb, nesting deeper than any quota file needs, duplicate keys, bytes that are not UTF-8. What YAML users
rely on keeps working: anchors and merge keys, explicit tags, numbers and booleans."""

from __future__ import annotations

from pathlib import Path

import pytest

from quota.loader import MAX_DEPTH, MAX_VALUES, ConfigError, load_config_file, load_config_text, parse_yaml_with_lines

HEAD = "apiVersion: kuota.dev/v1\nkind: QuotaConfig\n"
TEAM = """
flavors: [{name: a100}]
teams:
  - name: ml
    queues: [ml/default]
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="q.yaml")
    return [p.render() for p in caught.value.problems]


def test_an_alias_bomb_is_refused_once_it_expands_past_the_bound() -> None:
    # Nine lines that would expand to 9**9 (387 million) strings.
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    found = problems("\n".join(lines) + "\n")
    assert len(found) == 1 and f"more than {MAX_VALUES:,} values (expanded YAML aliases count each time)" in found[0]


def test_nesting_deeper_than_a_quota_file_needs_is_refused() -> None:
    deep = "x: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    assert any(f"nested too deeply (at most {MAX_DEPTH} levels)" in p for p in problems(deep))
    # Far deeper than the parser itself follows: still a message, not a RecursionError.
    abyss = "x: " + "[" * 20_000 + "]" * 20_000 + "\n"
    assert problems(abyss)


def test_duplicate_keys_are_refused_with_both_lines() -> None:
    found = problems(HEAD + TEAM + "teams: []\n")
    assert found == ["teams (line 9): duplicate key (first on line 5)"]
    nested = HEAD + "flavors: [{name: a, name: b}]\n"
    assert problems(nested) == ["flavors[0].name (line 3): duplicate key (first on line 3)"]


def test_bytes_that_are_not_utf8_name_their_line_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_bytes(HEAD.encode() + b"teams:\n  - name: \xff\xfe\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert caught.value.problems[0].render() == (
        "(top level) (line 4): not UTF-8 text: byte 0xff at offset 60 cannot be decoded"
    )


def test_anchors_merge_keys_tags_and_scalars_still_mean_what_yaml_says() -> None:
    text = (
        HEAD
        + """
flavors: [{name: a100}]
x-defaults: &defaults
  queues: [ml/default]
  quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: !!int "8"}}}]
teams:
  - <<: *defaults
    name: ml
  - <<: *defaults
    name: cv
    queues: [cv/default]
"""
    )
    data, lines = parse_yaml_with_lines(text)
    assert data["teams"][0] == {
        "queues": ["ml/default"],
        "quotas": [{"flavor": "a100", "resources": {"nvidia.com/gpu": {"nominal": 8}}}],
        "name": "ml",
    }
    assert data["teams"][1]["queues"] == ["cv/default"]  # a key of the mapping wins over the merged one
    assert lines[("teams", 1, "name")] == 12
    plain, _ = parse_yaml_with_lines("a: 1\nb: true\nc: null\nd: 1.5\ne: '1'\n1: x\n")
    assert plain == {"a": 1, "b": True, "c": None, "d": 1.5, "e": "1", 1: "x"}


def test_a_file_of_four_thousand_teams_loads_in_one_pass() -> None:
    cohorts = "".join(f"  - name: c{c}\n" for c in range(40))
    teams = "".join(
        f"  - name: t{t}\n    parent: c{t % 40}\n    queues: [n{t}/q]\n"
        f"    quotas: [{{flavor: a100, resources: {{nvidia.com/gpu: {{nominal: 8}}}}}}]\n"
        for t in range(4000)
    )
    config = load_config_text(HEAD + "flavors: [{name: a100}]\ncohorts:\n" + cohorts + "teams:\n" + teams)
    assert len(config.teams) == 4000 and config.teams[-1].parent == "c39"
