"""Reading a job of any kind caches the short strings every job repeats, never long ones: a body of up to 8 MiB
must not be able to pin megabytes of itself in memory through those caches."""

from __future__ import annotations

from workloads import quantities, reading, rules


def test_long_quantities_urls_and_timestamps_are_read_but_not_cached() -> None:
    long_quantity = "0" * 100_000 + "2"
    long_url = "http://example.org/" + "a" * 100_000
    long_time = "2026-03-01T08:00:00" + "0" * 100_000
    before = (
        quantities._cached_milli.cache_info().currsize,
        rules._cached_is_http_url.cache_info().currsize,
        reading._cached_epoch_ms.cache_info().currsize,
    )
    assert quantities._milli(long_quantity) is None  # refused before it is read: no quantity needs 100,000 characters
    assert rules._is_http_url(long_url)
    assert reading._epoch_ms(long_time) == 0
    after = (
        quantities._cached_milli.cache_info().currsize,
        rules._cached_is_http_url.cache_info().currsize,
        reading._cached_epoch_ms.cache_info().currsize,
    )
    assert after == before


def test_short_ones_are_cached() -> None:
    quantities._cached_milli.cache_clear()
    assert quantities._milli("4Gi") == 4 * 1024**3 * 1000
    assert quantities._milli("4Gi") == 4 * 1024**3 * 1000
    assert quantities._cached_milli.cache_info().hits == 1
