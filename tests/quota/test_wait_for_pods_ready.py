"""The quota file's `waitForPodsReady` block, globally and per team: read into integer milliseconds, bounded like
every duration, and refused with the path and the line when wrong."""

from __future__ import annotations

import pytest

from quota.loader import ConfigError, load_config_text

BASE = """flavors: [{name: f}]
waitForPodsReady: {timeout: 5m, requeuingLimit: 3, recoveryTimeout: 90s, blockAdmission: true, backoffBase: 1m}
teams:
  - {name: plain, queues: [plain/q]}
  - name: own
    queues: [own/q]
    waitForPodsReady: {timeout: 10s}
"""


def test_settings_are_read_and_a_teams_block_overrides_the_global_one() -> None:
    config = load_config_text(BASE)
    settings, scope = config.pods_ready_settings("plain")
    assert scope is None and settings is not None
    assert (settings.timeout, settings.requeuing_limit, settings.recovery_timeout) == (300_000, 3, 90_000)
    assert settings.block_admission and settings.backoff_base == 60_000
    own, scope = config.pods_ready_settings("own")
    assert scope == "own" and own is not None
    assert (own.timeout, own.requeuing_limit, own.recovery_timeout, own.block_admission, own.backoff_base) == (
        10_000,
        None,
        None,
        False,
        None,
    )


def test_absent_means_nothing_is_timed() -> None:
    config = load_config_text("teams: [{name: t, queues: [t/q]}]\n")
    assert config.pods_ready_settings("t") == (None, None)


def _errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, source="bad.yaml")
    return [p.render() for p in info.value.problems]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("{}", "waitForPodsReady.timeout (line 1): Field required"),
        ("{timeout: 0s}", "waitForPodsReady.timeout (line 1): must be longer than 0"),
        ("{timeout: 100000000h}", "waitForPodsReady.timeout (line 1): '100000000h' is longer than 100 years"),
        ("{timeout: soon}", "waitForPodsReady.timeout (line 1): 'soon' is not a duration"),
        ("{timeout: 1m, requeuingLimit: -1}", "waitForPodsReady.requeuingLimit (line 1): Input should be greater"),
        ("{timeout: 1m, requeuingLimit: 1.5}", "waitForPodsReady.requeuingLimit (line 1): 1.5 is not a whole number"),
        ("{timeout: 1m, requeuingLimit: yes}", "waitForPodsReady.requeuingLimit (line 1): True is not a whole number"),
        ("{timeout: 1m, recoveryTimeout: 0}", "waitForPodsReady.recoveryTimeout (line 1): must be longer than 0"),
        ("{timeout: 1m, backoffBase: 1y}", "waitForPodsReady.backoffBase (line 1): '1y' is not a duration"),
        ("{timeout: 1m, blockAdmission: maybe}", "waitForPodsReady.blockAdmission (line 1): Input should be a valid"),
        ("{timeout: 1m, wait: 1m}", "waitForPodsReady.wait (line 1): unknown field"),
    ],
)
def test_wrong_settings_are_refused_with_path_and_line(block: str, expected: str) -> None:
    rendered = _errors(f"waitForPodsReady: {block}\n")
    assert any(expected in line for line in rendered), rendered


def test_a_teams_block_is_checked_at_its_own_path() -> None:
    rendered = _errors("teams:\n  - name: t\n    waitForPodsReady: {timeout: -5s}\n")
    assert any("teams[0].waitForPodsReady.timeout (line 3)" in line for line in rendered), rendered
