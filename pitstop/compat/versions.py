"""Component versions as components report them, made comparable.

Components print versions in many shapes: Kubernetes `v1.30.6`, the GPU driver `550.90.07`,
operator image tags `v24.6.2`, containerd `containerd://1.7.20`, MLNX_OFED `24.07-0.6.1.0`,
Debian packages `1.30.6-1.1`, DCGM exporter tags `3.3.7-3.5.0-ubuntu22.04`. The version is the
first dotted run of numbers; a `-rc.1`/`-alpha.2`/`-beta.0` right after it is a pre-release
(ordered before the release, as semver does); any other suffix is kept in `raw` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import total_ordering

# Text before the numbers: "v", "Kubernetes v", "containerd://", "MLNX_OFED_LINUX-".
_NUMBERS = re.compile(r"(?<![\d.])v?(\d+(?:\.\d+)*)")
_PRERELEASE = re.compile(r"^-((?:alpha|beta|rc|pre)[.\-]?(\d+)?)", re.IGNORECASE)
_PRERELEASE_RANK = {"alpha": 0, "beta": 1, "pre": 2, "rc": 3}


class VersionError(ValueError):
    """A text that holds no version; the message quotes it and shows the accepted shapes."""


@total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A parsed version: numeric parts for ordering, the text as the component printed it.

    Two versions are equal when their numbers and pre-release are equal (`v1.30.6` == `1.30.6`);
    missing parts count as zero (`1.30` == `1.30.0`).
    """

    parts: tuple[int, ...]
    raw: str
    prerelease: tuple[int, int] | None = field(default=None)

    @property
    def major(self) -> int:
        return self.parts[0]

    @property
    def minor(self) -> int:
        return self.parts[1] if len(self.parts) > 1 else 0

    @property
    def patch(self) -> int:
        return self.parts[2] if len(self.parts) > 2 else 0

    def minor_key(self) -> tuple[int, int]:
        """`(major, minor)`: the Kubernetes "minor version" and the vendors' release line."""
        return (self.major, self.minor)

    @property
    def minor_text(self) -> str:
        """`1.31` for `v1.31.2`: how the skew policy and the vendor matrices name a line."""
        return f"{self.major}.{self.minor}"

    @property
    def number(self) -> str:
        """The dotted numbers without prefix or suffix: `1.30.6` for `v1.30.6-1.1`."""
        return ".".join(str(part) for part in self.parts)

    def _key(self) -> tuple[tuple[int, ...], tuple[int, int, int]]:
        parts = self.parts
        while len(parts) > 1 and parts[-1] == 0:
            parts = parts[:-1]
        # A release sorts after every pre-release of the same numbers.
        pre = (1, 0, 0) if self.prerelease is None else (0, *self.prerelease)
        return (parts, pre)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        mine, theirs = self._key(), other._key()
        if mine[0] != theirs[0]:
            return _padded(mine[0], theirs[0]) < _padded(theirs[0], mine[0])
        return mine[1] < theirs[1]

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.raw


def _padded(parts: tuple[int, ...], other: tuple[int, ...]) -> tuple[int, ...]:
    return parts + (0,) * max(0, len(other) - len(parts))


def parse_version(text: str) -> Version:
    """Parse a version as a component reports it; `VersionError` when the text holds none."""
    raw = str(text).strip()
    match = _NUMBERS.search(raw)
    if match is None:
        raise VersionError(
            f"cannot read a version from {raw!r}: expected numbers like v1.30.6, 550.90.07 or "
            "containerd://1.7.20"
        )
    parts = tuple(int(part) for part in match.group(1).split("."))
    prerelease: tuple[int, int] | None = None
    pre = _PRERELEASE.match(raw[match.end() :])
    if pre is not None:
        label = re.sub(r"[^a-z]", "", pre.group(1).lower())
        prerelease = (_PRERELEASE_RANK[label], int(pre.group(2) or 0))
    return Version(parts=parts, raw=raw, prerelease=prerelease)


def try_parse_version(text: str | None) -> Version | None:
    """`parse_version`, or None for texts like "not deployed" that report no version."""
    if text is None:
        return None
    try:
        return parse_version(text)
    except VersionError:
        return None


def kube_minor(text: str) -> tuple[int, int]:
    """`(1, 30)` for `v1.30.6`: the minor version the Version Skew Policy counts in."""
    return parse_version(text).minor_key()
