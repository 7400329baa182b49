"""The diff check mode shows for a patch: the object before and after, without the fields
the apiserver changes on every write."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from pitstop.kube.objects import Obj

VOLATILE_METADATA = ("resourceVersion", "managedFields", "generation")


def comparable(obj: Mapping[str, Any]) -> Obj:
    out = json.loads(json.dumps(obj))
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        for key in VOLATILE_METADATA:
            metadata.pop(key, None)
    return dict(out)


def object_diff(before: Mapping[str, Any], after: Mapping[str, Any], name: str) -> str:
    """A unified diff of the two objects as sorted JSON; empty when they are the same."""
    old = json.dumps(comparable(before), indent=2, sort_keys=True).splitlines()
    new = json.dumps(comparable(after), indent=2, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(old, new, f"{name} (before)", f"{name} (after)", lineterm=""))
