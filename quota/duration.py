"""Go-style durations (`90s`, `2m`, `168h`, `1h30m`, `500ms`) held as integer milliseconds."""

from __future__ import annotations

import re
from decimal import Decimal

_UNIT_MS = {"ms": Decimal(1), "s": Decimal(1000), "m": Decimal(60_000), "h": Decimal(3_600_000)}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


#: The longest duration kuota accepts: 100 years. Deadlines and intervals are added to wall-clock times and
#: stored as timestamps; anything longer means nothing here and would overflow them (a checkpointTimeout of
#: 100000000h once stopped a controller at its first preemption: year 13434 is out of range).
MAX_DURATION_YEARS = 100
MAX_DURATION_MS = MAX_DURATION_YEARS * 36_525 * 24 * 3_600_000 // 100
#: Longer text is refused before it is read: no duration needs it.
MAX_DURATION_TEXT = 64


class DurationError(ValueError):
    """A string that is not a duration, or one beyond MAX_DURATION_MS."""


def _bounded(ms: int, shown: str) -> int:
    if ms > MAX_DURATION_MS:
        raise DurationError(f"{shown} is longer than {MAX_DURATION_YEARS} years, the longest duration kuota accepts")
    return ms


def parse_duration_ms(value: str | int) -> int:
    """Parse `1h30m`-style text (or a bare number of seconds) into whole milliseconds."""
    if isinstance(value, bool):
        raise DurationError(f"{value!r} is not a duration")
    if isinstance(value, int):
        if value < 0:
            raise DurationError(f"{value} is negative")
        shown = str(value) if value < 10**20 else f"{str(value)[:20]}..."
        return _bounded(value * 1000, f"{shown} seconds")
    text = str(value).strip()
    if len(text) > MAX_DURATION_TEXT:
        raise DurationError(f"{text[:20]!r}... is {len(text)} characters long, not a duration")
    if text == "0":
        return 0
    pos = 0
    total = Decimal(0)
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += Decimal(match[1]) * _UNIT_MS[match[2]]
        pos = match.end()
    if pos != len(text) or not text:
        raise DurationError(f"{text!r} is not a duration (examples: 90s, 2m, 168h, 1h30m)")
    return _bounded(int(total), repr(text))


def format_duration_ms(ms: int) -> str:
    if ms % 3_600_000 == 0 and ms:
        return f"{ms // 3_600_000}h"
    if ms % 60_000 == 0 and ms:
        return f"{ms // 60_000}m"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"
