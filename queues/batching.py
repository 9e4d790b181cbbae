"""How long the real-time loop lets changes gather before it decides: adaptive, not a fixed window.

Every cycle nominates every team's head again, so a cycle costs about the same whether one Job arrived or fifty:
under a steady stream of arrivals a fixed 20 ms window made thousands of cycles that each decided a few Jobs
(bench/e2e.py), and a fixed 100 ms window cut the controller's CPU by a quarter or more but made a lone Job wait
for nothing. So the window follows the load: after a quiet spell the first change is decided at once; while the
loop is busy, it waits a multiple of what the last step cost (at least `least_s`, at most `most_s`), which keeps
scheduling to a bounded share of the process's time and lets expensive cycles carry more work each.
"""

from __future__ import annotations

from dataclasses import dataclass

LEAST_S = 0.02
"""The shortest window while busy (the fixed window the loop used before)."""
MOST_S = 0.1
"""The longest: a Job never waits longer than this for a cycle that would decide it."""
RATIO = 4.0
"""Window per second of the last step: scheduling takes at most about 1 / (1 + RATIO) of the time while busy."""
IDLE_S = 0.5
"""A loop that has not stepped for this long is idle: its next change is decided at once."""


@dataclass(slots=True)
class BatchWindow:
    least_s: float = LEAST_S
    most_s: float = MOST_S
    ratio: float = RATIO
    idle_s: float = IDLE_S
    last_end_s: float | None = None
    last_cost_s: float = 0.0

    def wait_s(self, now_s: float) -> float:
        """How long to let changes gather before the step that `now_s`'s wake-up asks for."""
        if self.last_end_s is None or now_s - self.last_end_s >= self.idle_s:
            return 0.0
        return min(self.most_s, max(self.least_s, self.ratio * self.last_cost_s))

    def stepped(self, started_s: float, ended_s: float) -> None:
        """A step ran from `started_s` to `ended_s` (seconds on a monotonic clock)."""
        self.last_cost_s = max(0.0, ended_s - started_s)
        self.last_end_s = ended_s
