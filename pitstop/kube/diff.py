"""The diff check mode shows for a patch: the object before and after, without the fields
the apiserver changes on every write, and with secret payloads redacted (`pitstop.kube.redact`):
a diff goes to history like any result."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from pitstop.kube.objects import Obj
from pitstop.kube.redact import redact_pair

VOLATILE_METADATA = ("resourceVersion", "managedFields", "generation")


def comparable(obj: Mapping[str, Any]) -> Obj:
    out = json.loads(json.dumps(obj))
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        for key in VOLATILE_METADATA:
            metadata.pop(key, None)
    return dict(out)


def object_diff(before: Mapping[str, Any], after: Mapping[str, Any], name: str) -> str:
    """A unified diff of the two objects as sorted JSON; empty when they are the same. Secret
    values never appear: a changed one shows as `<redacted: N bytes, changed>`."""
    shown_before, shown_after = redact_pair(before, after)
    old = json.dumps(comparable(shown_before), indent=2, sort_keys=True).splitlines()
    new = json.dumps(comparable(shown_after), indent=2, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(old, new, f"{name} (before)", f"{name} (after)", lineterm=""))
