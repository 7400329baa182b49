"""Kubernetes resource quantities (`500m`, `2`, `64Gi`, `1e3`) as numbers, for scheduling."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

_SUFFIX: dict[str, Decimal] = {
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
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(value: str | int | float) -> Decimal:
    """The numeric value of a quantity; ValueError names the bad input."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """Cached: a fleet's pods and nodes repeat a handful of quantities (Decimals are immutable)."""
    match = _QUANTITY_RE.match(value.strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression '{_QUANTITY_RE.pattern}': {value!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        raise ValueError(f"invalid quantity {value!r}") from None
    return number * _SUFFIX[match.group(2) or ""]


def is_quantity(value: object) -> bool:
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except (ValueError, TypeError, AttributeError):
        return False
    return True
