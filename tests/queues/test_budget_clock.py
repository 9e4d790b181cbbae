"""BudgetKeeper on a replay's clock: with `epoch_ms` the controller's time 0 is a real instant, so windows fall on
real dates, past usage loads in epoch milliseconds, and the next review comes back on the controller's clock."""

from __future__ import annotations

from datetime import UTC, datetime

from queues.budgets import BudgetKeeper
from quota.budgets import HOUR_MS, epoch_ms_of
from quota.credits import UsageInterval
from quota.loader import load_config_text

CONFIG = load_config_text("""
flavors: [{name: a100}]
teams:
  - name: ml
    quotas: [{flavor: a100, resources: {nvidia.com/gpu: {nominal: 8}}}]
    budgets: [{window: month, resources: {nvidia.com/gpu: 10}, onExhausted: block, blockAbove: zero}]
""")
EPOCH = epoch_ms_of(datetime(2021, 3, 31, 22, tzinfo=UTC))
GPU = "nvidia.com/gpu"


def test_windows_fall_on_real_dates_and_the_month_ends_at_midnight_utc() -> None:
    keeper = BudgetKeeper(CONFIG, epoch_ms=EPOCH)
    keeper.keep_record()
    keeper.load([UsageInterval("ml", GPU, 4000, EPOCH - 3 * HOUR_MS, EPOCH)])  # 12 GPU-hours before time 0
    keeper.review(0)
    (status,) = keeper.statuses
    assert status.start == epoch_ms_of(datetime(2021, 3, 1, tzinfo=UTC)) and status.exhausted
    assert not keeper.restrictions["ml"].admit
    assert keeper.exhausted_at == {("ml", False, GPU, "month", status.start): EPOCH}
    assert keeper.next_review(0) == 2 * HOUR_MS  # 1 April 00:00 UTC, two hours into the replay

    keeper.open("job", "ml", {GPU: 1000}, 2 * HOUR_MS)
    keeper.review(2 * HOUR_MS)
    assert keeper.restrictions == {}  # April: nothing spent yet
    assert keeper.current(3 * HOUR_MS)[0].spent == 1000 * HOUR_MS


def test_without_an_epoch_the_clock_is_the_epochs() -> None:
    keeper = BudgetKeeper(CONFIG)
    keeper.load([UsageInterval("ml", GPU, 4000, EPOCH - 3 * HOUR_MS, EPOCH)])
    keeper.review(EPOCH)
    assert keeper.statuses[0].start == epoch_ms_of(datetime(2021, 3, 1, tzinfo=UTC)) and keeper.statuses[0].exhausted
    assert keeper.record is None and keeper.exhausted_at == {}  # kept only for a replay's report
