from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quota.duration import DurationError, format_duration_ms, parse_duration_ms
from quota.quantity import QuantityError, format_quantity, format_resource, parse_quantity


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("1", 1000),
        ("1.5", 1500),
        (1.5, 1500),
        (3, 3000),
        ("2e3", 2_000_000),
        ("2E-3", 2),
        ("4Ti", 4 * 2**40 * 1000),
        ("4Gi", 4 * 2**30 * 1000),
        ("100Mi", 100 * 2**20 * 1000),
        ("1k", 1_000_000),
        ("1M", 1_000_000_000),
        ("0.5Gi", 2**29 * 1000),
        ("1n", 1),  # below a milli-unit rounds up: under-counting would over-admit
        ("1u", 1),
        ("0", 0),
        ("+2", 2000),
        (".5", 500),
        ("-1", -1000),
        (Decimal("0.25"), 250),
    ],
)
def test_parse(text: object, milli: int) -> None:
    assert parse_quantity(text) == milli  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "abc", "1x", "1.2.3", "Gi", "1 Gi", "1Gib", "--1", "1e", True, "1e99"])
def test_parse_rejects(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("milli", "binary", "text"),
    [
        (500, False, "500m"),
        (1000, False, "1"),
        (2_000_000, False, "2k"),
        (4 * 2**40 * 1000, True, "4Ti"),
        (1536 * 2**20 * 1000, True, "1536Mi"),
        (0, False, "0"),
        (1500, False, "1500m"),
    ],
)
def test_format(milli: int, binary: bool, text: str) -> None:
    assert format_quantity(milli, binary=binary) == text


@given(st.integers(min_value=0, max_value=10**15))
def test_round_trip(milli: int) -> None:
    assert parse_quantity(format_quantity(milli)) == milli
    assert parse_quantity(format_resource("memory", milli)) == milli


def test_durations() -> None:
    assert parse_duration_ms("2m") == 120_000
    assert parse_duration_ms("168h") == 168 * 3_600_000
    assert parse_duration_ms("1h30m") == 5_400_000
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms(60) == 60_000
    assert format_duration_ms(120_000) == "2m"
    for bad in ("", "2x", "m", "1h 2m", True):
        with pytest.raises(DurationError):
            parse_duration_ms(bad)  # type: ignore[arg-type]


def test_bounds_what_the_ledger_can_store() -> None:
    assert parse_quantity("8Pi") == 8 * 2**50 * 1000  # the largest power of two that fits
    for absurd in ("9Pi", "10Pi", "1e16", 10**17):
        with pytest.raises(QuantityError, match="too large"):
            parse_quantity(absurd)
    with pytest.raises(QuantityError, match="100000 characters long"):
        parse_quantity("1" * 100_000)  # refused before it is read: reading it took seconds


def test_a_quota_beyond_the_bound_is_a_config_problem() -> None:
    from quota.loader import ConfigError, load_config_text

    text = (
        "flavors: [{name: f}]\nteams:\n  - name: t\n    quotas: [{flavor: f, resources: {memory: {nominal: 100Pi}}}]\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config_text(text, source="q.yaml")
    rendered = [p.render() for p in info.value.problems]
    assert any("memory.nominal (line 4): '100Pi' is too large" in line for line in rendered), rendered
