"""Durations as people write them in runbooks: `90s`, `30m`, `4h`, `1d`, `1h30m`, or seconds."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
DURATION_PATTERN = r"^\s*((\d+(\.\d+)?)(ms|s|m|h|d|w))+\s*$|^\s*\d+(\.\d+)?\s*$"


def parse_duration(value: Any) -> float:
    """Seconds in `value`; raises ValueError with the accepted forms when it is not a duration."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"duration {value} is negative")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a duration")
    text = value.strip()
    try:
        return parse_duration(float(text))
    except ValueError:
        pass
    pos = 0
    total = 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(text):
        raise ValueError(
            f"invalid duration {value!r}: write a number of seconds or e.g. '90s', '30m', '4h', '1d', '1h30m'"
        )
    return total


DURATION_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        {"type": "string", "pattern": DURATION_PATTERN},
    ],
    "description": "Seconds, or a duration such as '90s', '30m', '4h', '1d', '1h30m'.",
}

# A duration field: accepts the forms above, holds seconds.
Duration = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)]


def duration_or_template(value: Any) -> float | str:
    """A duration, or a template (`"{{ observe_window }}"`) resolved when the run is planned."""
    if isinstance(value, str) and "{{" in value:
        return value
    return parse_duration(value)


TEMPLATED_DURATION_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [*DURATION_JSON_SCHEMA["anyOf"], {"type": "string", "pattern": r"\{\{"}],
    "description": DURATION_JSON_SCHEMA["description"]
    + " Or a template, resolved with the run's vars at plan time.",
}

# A duration that may be templated from the run's vars (resolved by plan.load).
TemplatedDuration = Annotated[
    float | str, BeforeValidator(duration_or_template), WithJsonSchema(TEMPLATED_DURATION_JSON_SCHEMA)
]
