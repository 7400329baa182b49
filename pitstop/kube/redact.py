"""Redaction of secret payloads in Kubernetes objects before they leave an activity.

Whatever a kube module returns (its result data, a registered variable, a diff, an error) is
written to the run's Temporal history, which every reader of the namespace can see. So the
values of these never leave the worker:

* a Secret's `data` and `stringData` (whatever its type: Opaque, service-account tokens, TLS
  keys, Helm 3 release records `helm.sh/release.v1`), and its
  `kubectl.kubernetes.io/last-applied-configuration` annotation, which holds the data too;
* a Helm release record stored in a ConfigMap (Helm's `configmap` driver: label `owner=helm`,
  or a name `sh.helm.release.v1.*`): its `data` and `binaryData`, which hold the whole release
  (values, rendered manifests, chart files).

Keys stay, values become a marker `<redacted: N bytes>` (N: the decoded length), so a runbook
can still ask whether a key exists (`when: secret.resource.data.token is defined`) or how big
it is, but never read it. A runbook that needs a Secret's value cannot read it into history:
that is the point. It names the Secret where the value is consumed instead (a pod's
`secretKeyRef`, or a module argument `{secret: NAME}` the worker resolves).

Values seen while redacting are remembered for the current activity (`collecting()`), so text
built from them by mistake (an error message, a diff) is scrubbed too (`scrub_text`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from pitstop.kube.apply import LAST_APPLIED
from pitstop.kube.objects import Obj

HELM_RELEASE_PREFIX = "sh.helm.release.v1."
REDACTED_TEXT = "<redacted>"
# Values shorter than this are not scrubbed from free text: "1" or "true" would eat the message.
SCRUB_MIN_CHARS = 6

_SEEN: ContextVar[set[str] | None] = ContextVar("pitstop_redacted_values", default=None)


def marker(size: int, changed: bool = False) -> str:
    return f"<redacted: {size} bytes{', changed' if changed else ''}>"


_MARKER = re.compile(r"^<redacted: \d+ bytes(, changed)?>$")


def _is_marker(value: Any) -> bool:
    """Redacting twice changes nothing (a module redacts, then the wrapper looks again)."""
    return isinstance(value, str) and bool(_MARKER.fullmatch(value))


# --- which objects -------------------------------------------------------------------------


def _kind_of(obj: Mapping[str, Any], kind: str | None) -> str:
    found = obj.get("kind")
    return found if isinstance(found, str) and found else (kind or "")


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def is_helm_configmap(obj: Mapping[str, Any]) -> bool:
    """A Helm release record kept by Helm's ConfigMap storage driver."""
    meta = _metadata(obj)
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    name = meta.get("name")
    return (isinstance(labels, Mapping) and labels.get("owner") == "helm") or (
        isinstance(name, str) and name.startswith(HELM_RELEASE_PREFIX)
    )


def is_sensitive(obj: Mapping[str, Any], kind: str | None = None) -> bool:
    """Whether `obj` (of `kind` when the object does not say, as list items) carries a payload
    that must not leave the worker."""
    found = _kind_of(obj, kind)
    if found == "Secret":
        return True
    return found == "ConfigMap" and is_helm_configmap(obj)


# --- values --------------------------------------------------------------------------------


def _remember(*values: str) -> None:
    seen = _SEEN.get()
    if seen is None:
        return
    for value in values:
        if len(value) >= SCRUB_MIN_CHARS:
            seen.add(value)


def _decoded(value: str) -> bytes | None:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _redact_encoded(value: Any) -> str:
    """A `data`/`binaryData` value (base64 on the wire): its decoded size."""
    if _is_marker(value):
        return str(value)
    if not isinstance(value, str):
        return marker(len(json.dumps(value, default=str).encode()))
    raw = _decoded(value)
    _remember(value)
    if raw is None:
        return marker(len(value.encode()))
    with contextlib.suppress(UnicodeDecodeError):
        _remember(raw.decode("utf-8"))
    return marker(len(raw))


def _redact_plain(value: Any) -> str:
    """A `stringData` value (plain text)."""
    if _is_marker(value):
        return str(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    _remember(text)
    return marker(len(text.encode()))


def _redact_map(values: Any, encoded: bool) -> Any:
    if not isinstance(values, Mapping):
        return marker(len(json.dumps(values, default=str).encode())) if values is not None else None
    redact = _redact_encoded if encoded else _redact_plain
    return {key: redact(value) for key, value in values.items()}


def _redact_last_applied(text: Any, kind: str) -> str:
    """The annotation kubectl and kube.apply write: the applied object as JSON, itself redacted
    (and re-serialized) so the diff still shows its shape."""
    if _is_marker(text):
        return str(text)
    if not isinstance(text, str):
        return marker(len(json.dumps(text, default=str).encode()))
    _remember(text)
    try:
        applied = json.loads(text)
    except ValueError:
        return marker(len(text.encode()))
    if not isinstance(applied, dict):
        return marker(len(text.encode()))
    return json.dumps(redact_object(applied, kind), sort_keys=True, separators=(",", ":"))


# --- objects -------------------------------------------------------------------------------


def redact_object(obj: Mapping[str, Any], kind: str | None = None) -> Obj:
    """A copy of `obj` safe for history. `kind` names the objects' kind when they do not carry
    it (items of a list answer); Lists (`kind: List`, `SecretList`, ...) are redacted item by
    item. Objects that carry no secret payload come back as they were."""
    found = _kind_of(obj, kind)
    if found.endswith("List") and isinstance(obj.get("items"), list):
        item_kind = found.removesuffix("List") or None
        out = dict(obj)
        out["items"] = [
            redact_object(item, item_kind) if isinstance(item, Mapping) else item for item in obj["items"]
        ]
        return out
    if not is_sensitive(obj, kind):
        return dict(obj)
    out = dict(obj)
    if found == "Secret":
        if "data" in out:
            out["data"] = _redact_map(out["data"], encoded=True)
        if "stringData" in out:
            out["stringData"] = _redact_map(out["stringData"], encoded=False)
    else:
        for key in ("data", "binaryData"):
            if key in out:
                out[key] = _redact_map(out[key], encoded=key == "binaryData" or _all_base64(out[key]))
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        annotations = meta.get("annotations")
        if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
            out["metadata"] = {
                **meta,
                "annotations": {
                    **annotations,
                    LAST_APPLIED: _redact_last_applied(annotations[LAST_APPLIED], found),
                },
            }
    return out


def _all_base64(values: Any) -> bool:
    # A Helm ConfigMap's `data.release` is base64(gzip(JSON)): report the decoded size.
    return isinstance(values, Mapping) and all(isinstance(v, str) and _decoded(v) for v in values.values())


def redact_objects(objs: list[Obj], kind: str | None = None) -> list[Obj]:
    return [redact_object(obj, kind) for obj in objs]


def redact_pair(
    before: Mapping[str, Any], after: Mapping[str, Any], kind: str | None = None
) -> tuple[Obj, Obj]:
    """Both sides of a change, redacted; a value that differs is marked `changed` on the after
    side, so a diff still shows that a Secret's key changed without showing either value."""
    old, new = redact_object(before, kind), redact_object(after, kind)
    if not (is_sensitive(before, kind) or is_sensitive(after, kind)):
        return old, new
    for key in ("data", "stringData", "binaryData"):
        was, now = before.get(key), after.get(key)
        red = new.get(key)
        if not isinstance(now, Mapping) or not isinstance(red, dict):
            continue
        was_map = was if isinstance(was, Mapping) else {}
        for name, value in now.items():
            if name in was_map and was_map[name] != value and isinstance(red.get(name), str):
                red[name] = red[name].removesuffix(">") + ", changed>"
    was_applied = _annotations(before).get(LAST_APPLIED)
    now_applied = _annotations(after).get(LAST_APPLIED)
    shown = _annotations(new)
    if (
        isinstance(now_applied, str)
        and was_applied is not None
        and was_applied != now_applied
        and _annotations(old).get(LAST_APPLIED) == shown.get(LAST_APPLIED)
    ):
        new["metadata"] = {
            **new["metadata"],
            "annotations": {**shown, LAST_APPLIED: marker(len(now_applied.encode()), changed=True)},
        }
    return old, new


def _annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    found = _metadata(obj).get("annotations")
    return dict(found) if isinstance(found, Mapping) else {}


def redact_tree(value: Any) -> Any:
    """`value` with every Kubernetes object found anywhere inside it redacted: the last line of
    defence for module results (objects carry `kind` and `metadata`)."""
    if isinstance(value, Mapping):
        if isinstance(value.get("kind"), str) and isinstance(value.get("metadata"), Mapping):
            value = redact_object(value)
        return {key: redact_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_tree(item) for item in value]
    return value


# --- free text -----------------------------------------------------------------------------


def scrub_tree(value: Any, values: set[str]) -> Any:
    """`value` with `scrub_text` applied to every string inside it (keys included)."""
    if not values:
        return value
    if isinstance(value, str):
        return scrub_text(value, values)
    if isinstance(value, Mapping):
        return {scrub_tree(key, values): scrub_tree(item, values) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub_tree(item, values) for item in value]
    return value


@contextlib.contextmanager
def collecting() -> Iterator[set[str]]:
    """Remember the values redacted while the block runs (one activity), for `scrub_text`."""
    seen: set[str] = set()
    token = _SEEN.set(seen)
    try:
        yield seen
    finally:
        _SEEN.reset(token)


def scrub_text(text: str | None, values: set[str] | None = None) -> str | None:
    """`text` with every remembered secret value (longest first) replaced by `<redacted>`."""
    if not text:
        return text
    known = values if values is not None else (_SEEN.get() or set())
    for value in sorted(known, key=len, reverse=True):
        if value in text:
            text = text.replace(value, REDACTED_TEXT)
    return text


__all__ = [
    "LAST_APPLIED",
    "collecting",
    "is_helm_configmap",
    "is_sensitive",
    "marker",
    "redact_object",
    "redact_objects",
    "redact_pair",
    "redact_tree",
    "scrub_text",
    "scrub_tree",
]
