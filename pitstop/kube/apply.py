"""Client-side apply as `kubectl apply` computes it (pure: no I/O).

The object as last applied is kept in the `kubectl.kubernetes.io/last-applied-configuration`
annotation, serialised byte for byte as kubectl does (Go's encoding/json: sorted keys, no
spaces, `<`, `>`, `&`, U+2028/U+2029 escaped, a trailing newline, `metadata.annotations`
present even when empty), so kubectl and pitstop can take turns on the same object and each
sees the other's apply as "unchanged".

Updating an object sends a three-way patch (last applied, new, live), as kubectl does:
- built-in kinds: a strategic merge patch (lists with a merge key merge element by element,
  removed elements get `$patch: delete`), changes against the live object plus deletions of
  fields the previous apply set and the new one dropped;
- custom resources (and CRDs themselves, which kubectl's scheme does not know): a JSON merge
  patch (RFC 7386) built the same way, lists replaced whole.
An empty patch means "unchanged".
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pitstop.kube.merge_keys import list_merge, retains_keys

Obj = dict[str, Any]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

# Groups served by kube-apiserver itself whose types kubectl knows (strategic merge patch).
BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "policy",
        "autoscaling",
        "extensions",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "admissionregistration.k8s.io",
        "certificates.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "node.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "resource.k8s.io",
        "internal.apiserver.k8s.io",
        "storagemigration.k8s.io",
    }
)


def group_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def uses_strategic_merge(api_version: str, kind: str) -> bool:
    """kubectl sends strategic merge patches for the types in its scheme only."""
    return group_of(api_version) in BUILTIN_GROUPS


# --- the annotation ---------------------------------------------------------------------------


def go_float(number: float) -> str:
    """A float64 as Go's encoding/json writes it: the shortest digits that read back, in plain
    notation from 1e-6 up to 1e21 (`100.0` is `100`, `1e-05` is `0.00001`), else as an
    exponent without a leading zero (`1e-07` is `1e-7`). Python's repr differs on all three,
    which made kubectl and pitstop each see the other's annotation as a change."""
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{number!r} is not representable in JSON")
    if number == 0:
        return "-0" if str(number).startswith("-") else "0"
    shortest = repr(number)
    if 1e-6 <= abs(number) < 1e21:
        text = format(Decimal(shortest), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, _, exponent = format(Decimal(shortest), "e").partition("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    sign, digits = exponent[0], exponent[1:].lstrip("0") or "0"
    return f"{mantissa}e{sign}{digits.zfill(2) if sign == '+' else digits}"


def _go_string(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        quoted = quoted.replace(char, escaped)
    return quoted.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def go_json(value: Any) -> str:
    """JSON as Go's encoding/json writes a decoded object: map keys sorted, compact,
    HTML-safe, numbers as Go formats float64 (`go_float`)."""
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_go_string(k)}:{go_json(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, str):
        return _go_string(value)
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def last_applied_of(obj: Mapping[str, Any]) -> str:
    """The annotation value kubectl would write for this manifest."""
    plain = copy.deepcopy(dict(obj))
    metadata = plain.setdefault("metadata", {})
    annotations = dict(metadata.get("annotations") or {})
    annotations.pop(LAST_APPLIED, None)
    metadata["annotations"] = annotations
    return go_json(plain) + "\n"


def with_last_applied(obj: Mapping[str, Any]) -> Obj:
    """The manifest as sent to the server: itself plus its own last-applied annotation."""
    out = copy.deepcopy(dict(obj))
    metadata = out.setdefault("metadata", {})
    annotations = dict(metadata.get("annotations") or {})
    annotations[LAST_APPLIED] = last_applied_of(obj)
    metadata["annotations"] = annotations
    return out


def recorded_config(live: Mapping[str, Any]) -> Obj | None:
    """The configuration last applied to a live object (None when it was never applied or the
    annotation is not JSON, in which case apply treats every field as new)."""
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# --- equality as Go compares decoded JSON ---------------------------------------------------


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return "scalar"


# --- JSON merge patch (custom resources) ----------------------------------------------------


def _merge_diff(current: Mapping[str, Any], modified: Mapping[str, Any]) -> Obj:
    """RFC 7386 patch turning `current` into `modified` (as evanphx/json-patch computes it)."""
    patch: Obj = {}
    for key, value in modified.items():
        if key not in current:
            patch[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(current[key], dict):
            sub = _merge_diff(current[key], value)
            if sub:
                patch[key] = sub
        elif not same(current[key], value):
            patch[key] = copy.deepcopy(value)
    for key in current:
        if key not in modified:
            patch[key] = None
    return patch


def _filter_nulls(patch: Mapping[str, Any], *, keep_null: bool) -> Obj:
    """keep_null: only the deletions; otherwise only additions and changes (kubectl's
    keepOrDeleteNullInObj: an explicitly empty map is a value, not an empty patch)."""
    out: Obj = {}
    for key, value in patch.items():
        if value is None:
            if keep_null:
                out[key] = None
        elif isinstance(value, dict):
            if not value:
                if not keep_null:
                    out[key] = value
                continue
            sub = _filter_nulls(value, keep_null=keep_null)
            if sub:
                out[key] = sub
        elif not keep_null:
            out[key] = value
    return out


def _merge_patches(first: Mapping[str, Any], second: Mapping[str, Any]) -> Obj:
    out: Obj = copy.deepcopy(dict(first))
    for key, value in second.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge_patches(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def three_way_json_merge_patch(
    original: Mapping[str, Any] | None, modified: Mapping[str, Any], current: Mapping[str, Any]
) -> Obj:
    additions = _filter_nulls(_merge_diff(current, modified), keep_null=False)
    deletions = _filter_nulls(_merge_diff(original or {}, modified), keep_null=True)
    return _merge_patches(deletions, additions)


# --- strategic merge patch (built-in kinds) -------------------------------------------------


def _merge_key(field: str, path: tuple[str, ...]) -> str | bool | None:
    """The merge key of list `field` at `path` (None: primitives merged as a set); False when
    the list has no patch strategy and is replaced whole (`pitstop.kube.merge_keys`)."""
    strategy = list_merge(field, path[-1] if path else "")
    return False if strategy is None else strategy.key


# Ported from k8s.io/apimachinery pkg/util/strategicpatch/patch.go (CreateThreeWayMergePatch,
# diffMaps, diffLists, mergeMap), so that the patch is the one kubectl sends, byte for byte
# once written as Go writes JSON: `$retainKeys` for union structs, `$setElementOrder/<list>`
# whenever a merged list changes or is reordered (the server then keeps the manifest's order,
# which matters for env entries referring to each other with `$(VAR)`).
RETAIN_KEYS = "$retainKeys"
SET_ORDER = "$setElementOrder/"
DELETE_FROM = "$deleteFromPrimitiveList/"


def _diff_maps(
    original: Mapping[str, Any],
    modified: Mapping[str, Any],
    path: tuple[str, ...],
    *,
    additions: bool,
    deletions: bool,
    retain: bool = False,
) -> Obj:
    patch: Obj = {}
    parent = path[-1] if path else ""
    for key, new in modified.items():
        if key not in original:
            if additions:
                patch[key] = copy.deepcopy(new)
            continue
        old = original[key]
        if _kind(old) != _kind(new):
            if additions:
                patch[key] = copy.deepcopy(new)
            continue
        if isinstance(new, dict):
            sub = _diff_maps(
                old,
                new,
                (*path, key),
                additions=additions,
                deletions=deletions,
                retain=retains_keys(key, parent),
            )
            if sub:
                patch[key] = sub
        elif isinstance(new, list):
            patch.update(_diff_lists(key, old, new, path, additions=additions, deletions=deletions))
        elif additions and not same(old, new):
            patch[key] = copy.deepcopy(new)
    if deletions:
        for key in original:
            if key not in modified:
                patch[key] = None
    kept = sorted(k for k, v in modified.items() if v is not None) if retain else []
    dropped = any(v is not None and k not in modified for k, v in original.items())
    if kept and (patch or dropped):
        patch[RETAIN_KEYS] = kept
    return patch


def _diff_lists(
    key: str,
    old: list[Any],
    new: list[Any],
    path: tuple[str, ...],
    *,
    additions: bool,
    deletions: bool,
) -> Obj:
    merge_key = _merge_key(key, path)
    if merge_key is False:
        return {key: copy.deepcopy(new)} if additions and not same(old, new) else {}
    if not old:
        return {key: copy.deepcopy(new)} if additions and new else {}
    if merge_key is None:  # primitives merged as a set
        out: Obj = {}
        added = _unique([item for item in new if not any(same(item, o) for o in old)])
        removed = sorted(_unique([i for i in old if not any(same(i, n) for n in new)]), key=go_json)
        if additions and added:
            out[key] = added
        if deletions and removed:
            out[DELETE_FROM + key] = removed
        if (deletions and removed) or (additions and not same(old, new)):
            out[SET_ORDER + key] = copy.deepcopy(new)
        return out
    if not isinstance(merge_key, str) or not all(
        isinstance(i, dict) and merge_key in i for i in [*old, *new]
    ):
        return {key: copy.deepcopy(new)} if additions and not same(old, new) else {}
    # Items sharing a key value (a port 53 for TCP and one for UDP) pair up in order, as
    # apimachinery's diffListsOfMaps walks both lists sorted by key.
    before: dict[str, list[Any]] = {}
    for item in old:
        before.setdefault(_identity(item, merge_key), []).append(item)
    retain = retains_keys(key, path[-1] if path else "")
    items: list[Any] = []
    for item in new:
        matches = before.get(_identity(item, merge_key))
        if not matches:
            if additions:
                items.append(copy.deepcopy(item))
            continue
        match = matches.pop(0)
        sub = _diff_maps(match, item, (*path, key), additions=additions, deletions=deletions, retain=retain)
        if sub:
            items.append({**sub, merge_key: item[merge_key]})
    if deletions:
        gone = sorted((m[merge_key] for left in before.values() for m in left), key=str)
        items.extend({merge_key: k, "$patch": "delete"} for k in gone)
    result: Obj = {key: items} if items else {}
    reordered = [item[merge_key] for item in old] != [item[merge_key] for item in new]
    if (additions and (items or reordered)) or (deletions and items):
        result[SET_ORDER + key] = [{merge_key: item[merge_key]} for item in new]
    return result


def _unique(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(same(item, seen) for seen in out):
            out.append(item)
    return out


def _without_directives(value: Any) -> tuple[Any, bool]:
    """Go's removeDirectives: drops maps carrying `$patch` (and says so)."""
    if isinstance(value, dict):
        if "$patch" in value:
            return None, False
        out: Obj = {}
        for k, v in value.items():
            kept, keep = _without_directives(v)
            if keep:
                out[k] = kept
        return out, True
    if isinstance(value, list):
        return [kept for kept, keep in map(_without_directives, value) if keep], True
    return copy.deepcopy(value), True


def _identity(item: Any, merge_key: str | None) -> Any:
    if merge_key is None:
        return json.dumps(item, sort_keys=True)
    return json.dumps(item.get(merge_key), sort_keys=True) if isinstance(item, dict) else None


def _ordered(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    """Go's normalizeSliceOrder: `$patch` deletions last, the rest by their place in `order`."""
    places = {_identity(o, merge_key): i for i, o in reversed(list(enumerate(order)))}
    plain = [i for i in items if not (isinstance(i, dict) and "$patch" in i)]
    deleted = [i for i in items if isinstance(i, dict) and "$patch" in i]
    plain.sort(key=lambda i: places.get(_identity(i, merge_key), len(places)))
    return plain + deleted


def _merge_sorted(left: list[Any], right: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    """Go's mergeSortedSlice: interleave two sorted lists by their places in `order`."""
    places = {_identity(o, merge_key): i for i, o in reversed(list(enumerate(order)))}
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right) or (
            i < len(left)
            and (a := places.get(_identity(left[i], merge_key))) is not None
            and (b := places.get(_identity(right[j], merge_key))) is not None
            and a < b
        ):
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    return out


def _merge_lists(
    mine: list[Any], theirs: list[Any], order: list[Any], merge_key: str | None, path: tuple[str, ...]
) -> list[Any]:
    """Two patches' lists of one merged field as one (Go's mergeSlice, then the order of
    `$setElementOrder` or the second list)."""
    merged = [copy.deepcopy(m) for m in mine]
    for item in theirs:
        at = next(
            (n for n, m in enumerate(merged) if _identity(m, merge_key) == _identity(item, merge_key)), None
        )
        if at is None:
            merged.append(copy.deepcopy(item))
        elif isinstance(item, dict) and isinstance(merged[at], dict):
            merged[at] = _merge_strategic(merged[at], item, path)
    wanted = {_identity(o, merge_key) for o in order}
    patch_items = _ordered([m for m in merged if _identity(m, merge_key) in wanted], order, merge_key)
    server_only = _ordered([m for m in merged if _identity(m, merge_key) not in wanted], mine, merge_key)
    return _merge_sorted(server_only, patch_items, mine, merge_key)


def _merge_strategic(first: Mapping[str, Any], second: Mapping[str, Any], path: tuple[str, ...]) -> Obj:
    """The deletions patch and the changes patch as one (Go's mergeMap without parallel lists):
    directives of the second are copied over, lists merge by their keys."""
    out: Obj = copy.deepcopy(dict(first))
    if RETAIN_KEYS in second:
        out.setdefault(RETAIN_KEYS, copy.deepcopy(second[RETAIN_KEYS]))
    for key, value in second.items():
        if key.startswith(SET_ORDER):
            out.setdefault(key, copy.deepcopy(value))
    for key, value in second.items():
        if key == RETAIN_KEYS or key.startswith(SET_ORDER):
            continue
        mine = out.get(key)
        if key not in out or value is None or _kind(mine) != _kind(value):
            kept, keep = _without_directives(value)
            if keep:
                out[key] = kept
            continue
        if isinstance(value, dict) and isinstance(mine, dict):
            out[key] = _merge_strategic(mine, value, (*path, key))
        elif isinstance(value, list) and isinstance(mine, list):
            merge_key = _merge_key(key, path) if not key.startswith(DELETE_FROM) else None
            if merge_key is False:
                out[key] = copy.deepcopy(value)
                continue
            order = second.get(SET_ORDER + key, value)
            keyed = merge_key if isinstance(merge_key, str) else None
            out[key] = _merge_lists(mine, value, order, keyed, (*path, key))
        else:
            out[key] = copy.deepcopy(value)
    return out


def three_way_strategic_merge_patch(
    original: Mapping[str, Any] | None, modified: Mapping[str, Any], current: Mapping[str, Any]
) -> Obj:
    delta = _diff_maps(current, modified, (), additions=True, deletions=False)
    removals = _diff_maps(original or {}, modified, (), additions=False, deletions=True)
    return _merge_strategic(removals, delta, ())


def apply_patch(manifest: Mapping[str, Any], live: Mapping[str, Any]) -> tuple[Obj, str]:
    """The patch `kubectl apply` would send to bring `live` to `manifest`, and its type
    (`strategic` or `merge`); an empty patch means the object is unchanged."""
    modified = with_last_applied(manifest)
    original = recorded_config(live)
    api_version = str(manifest.get("apiVersion") or "")
    if uses_strategic_merge(api_version, str(manifest.get("kind") or "")):
        return three_way_strategic_merge_patch(original, modified, live), "strategic"
    return three_way_json_merge_patch(original, modified, live), "merge"
