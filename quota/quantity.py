"""Kubernetes quantities held exactly, as integer milli-units.

`500m`, `4Ti`, `1.5`, `2e3` and friends parse to an int of milli-units; nothing here ever goes through a binary
float, so no admission can be decided by rounding error. Values finer than a milli-unit round up, as Kubernetes'
MilliValue() does, because under-counting a request would let something over-admit.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

MILLI = 1000

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
}
_PATTERN = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity, or one beyond what kuota accounts."""


class QuantityTooLarge(QuantityError):
    """A Kubernetes quantity beyond MAX_MILLI."""


#: The largest quantity kuota accounts, in milli-units: the ledger stores quantities (and a workload's usage) as
#: 64-bit integers, so 2**63 - 1 milli-units (about 8 Pi of bytes, 9.2 million million whole GPUs or CPUs). A Job
#: asking for 10Pi of memory once was admitted inside kuota and never started, because its usage could not be
#: written down; now it is refused where it is read.
MAX_MILLI = 2**63 - 1
#: Longer text is refused before it is parsed: a 100,000-digit number took seconds to read, and no quantity needs
#: more than this.
MAX_QUANTITY_TEXT = 64


def too_large(milli: int) -> bool:
    return abs(milli) > MAX_MILLI


def parse_quantity(value: str | int | float | Decimal) -> int:
    """Parse a Kubernetes quantity into integer milli-units (rounded up below a milli-unit)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return _bounded(value * MILLI, str(value))
    # YAML hands us floats for `1.5`; their repr is the shortest decimal that round-trips, i.e. what was written.
    text = repr(value) if isinstance(value, float) else str(value)
    text = text.strip()
    if len(text) > MAX_QUANTITY_TEXT:
        raise QuantityError(f"{text[:20]!r}... is {len(text)} characters long, not a Kubernetes quantity")
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity (examples: 500m, 2, 1.5, 4Gi, 2e3)")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{text!r} is not a Kubernetes quantity") from exc
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{text!r}: exponent out of range")
        scaled = number * (Decimal(10) ** exponent)
    else:
        suffix = match["suffix"] or ""
        scaled = number * _BINARY[suffix] if suffix in _BINARY else number * _DECIMAL[suffix]
    milli = (scaled * MILLI).to_integral_value(rounding=ROUND_CEILING)
    return _bounded(int(milli), repr(text))


def _bounded(milli: int, shown: str) -> int:
    if too_large(milli):
        shown = shown if len(shown) <= 24 else shown[:20] + "..."
        raise QuantityTooLarge(
            f"{shown} is too large: kuota accounts quantities below 2**63 milli-units (about 8Pi, or "
            f"{MAX_MILLI // MILLI:,} whole units), what its ledger stores"
        )
    return milli


def format_quantity(milli: int, binary: bool = False) -> str:
    """Print milli-units back in Kubernetes syntax, choosing the largest exact suffix.

    `binary` prefers Ki/Mi/Gi… (memory-like resources) when the value is a whole multiple of 1024.
    """
    if milli % MILLI:
        return f"{milli}m"
    units = milli // MILLI
    if units == 0:
        return "0"
    if binary:
        for suffix, factor in sorted(_BINARY.items(), key=lambda item: -item[1]):
            if units % factor == 0:
                return f"{units // factor}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        factor = int(_DECIMAL[suffix])
        if units % factor == 0:
            return f"{units // factor}{suffix}"
    return str(units)


def is_memory_like(resource: str) -> bool:
    """Resources whose natural unit is bytes, printed with binary suffixes."""
    return resource in {"memory", "ephemeral-storage", "storage"} or resource.startswith("hugepages-")


def format_resource(resource: str, milli: int) -> str:
    return format_quantity(milli, binary=is_memory_like(resource))
