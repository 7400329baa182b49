"""The three patch formats clients send: JSON patch (RFC 6902), JSON merge patch (RFC 7386)
and strategic merge patch (kubectl's default for built-in types).

Strategic merge needs each list's merge key. The apiserver reads it from the Go struct tags of
the API types, as kubectl does when it computes the patch; both read one table here,
`pitstop.kube.merge_keys` (a list with no patch strategy is replaced whole, e.g. `spec.taints`).
"""

from __future__ import annotations

import copy
from typing import Any

from pitstop.kube.merge_keys import list_merge

Obj = dict[str, Any]


class PatchError(ValueError):
    """The patch cannot be applied (bad operation, missing path, failed test)."""


# --- JSON merge patch ---------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: Obj = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- strategic merge patch ------------------------------------------------------------------


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    return _merge_map(target, patch, "")


def _merge_map(target: Any, patch: Any, parent: str) -> Any:
    """`patch` onto `target`, a map standing in field `parent` (what merge keys depend on)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result: Obj = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        strategy = list_merge(key, parent) if isinstance(value, list) else None
        if value is None:
            result.pop(key, None)
        elif strategy is not None and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, key, strategy.key)
        elif isinstance(value, list):
            result[key] = [_strip_directives(v) for v in value if not _is_directive_item(v)]
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    for key, order in patch.items():
        if key.startswith("$setElementOrder/") and isinstance(order, list):
            field = key.split("/", 1)[1]
            strategy = list_merge(field, parent)
            live = target.get(field) if isinstance(target, dict) else None
            if isinstance(result.get(field), list) and strategy is not None:
                result[field] = _in_order(result[field], order, live or [], strategy.key)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _identity(item: Any, key: str | None) -> Any:
    return repr(item.get(key) if isinstance(item, dict) else None) if key is not None else repr(item)


def _in_order(merged: list[Any], order: list[Any], live: list[Any], key: str | None) -> list[Any]:
    """The apiserver's `$setElementOrder` (apimachinery strategicpatch mergePatchIntoOriginal and
    normalizeElementOrder): elements the order names take its order; the others keep their
    place in the live list, placed before a named element that came after them there."""
    wanted = {_identity(o, key): i for i, o in enumerate(order)}
    was = {_identity(o, key): i for i, o in enumerate(live)}
    named = sorted(
        (m for m in merged if _identity(m, key) in wanted), key=lambda m: wanted[_identity(m, key)]
    )
    others = sorted(
        (m for m in merged if _identity(m, key) not in wanted),
        key=lambda m: was.get(_identity(m, key), len(was)),
    )
    out: list[Any] = []
    while named or others:
        if not named:
            out.append(others.pop(0))
            continue
        if others:
            a, b = was.get(_identity(others[0], key)), was.get(_identity(named[0], key))
            if a is not None and b is not None and a < b:
                out.append(others.pop(0))
                continue
        out.append(named.pop(0))
    return out


def _is_directive_item(item: Any) -> bool:
    return isinstance(item, dict) and item.get("$patch") in ("delete", "replace")


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    return copy.deepcopy(value)


def _merge_list(current: list[Any], patch: list[Any], field: str, key: str | None) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip_directives(p) for p in patch if not _is_directive_item(p)]
    if key is None:
        merged = list(current)
        for item in patch:
            if item not in merged:
                merged.append(item)
        return merged
    out = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map in list does not contain the merge key {key!r}: {item!r}")
        index = next(
            (i for i, cur in enumerate(out) if isinstance(cur, dict) and cur.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
            continue
        if index is None:
            out.append(_strip_directives(item))
        else:
            out[index] = _merge_map(out[index], item, field)
    return out


# --- JSON patch ------------------------------------------------------------------------------


def json_patch(document: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(document)
    for number, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"operation {number} must be an object with 'op' and 'path'")
        kind = op["op"]
        if kind == "add":
            doc = _add(doc, _pointer(op["path"]), copy.deepcopy(_need(op, "value")))
        elif kind == "remove":
            doc = _remove(doc, _pointer(op["path"]))[0]
        elif kind == "replace":
            doc, _ = _remove(doc, _pointer(op["path"]))
            doc = _add(doc, _pointer(op["path"]), copy.deepcopy(_need(op, "value")))
        elif kind == "move":
            doc, value = _remove(doc, _pointer(_need(op, "from")))
            doc = _add(doc, _pointer(op["path"]), value)
        elif kind == "copy":
            doc = _add(doc, _pointer(op["path"]), copy.deepcopy(_get(doc, _pointer(_need(op, "from")))))
        elif kind == "test":
            if _get(doc, _pointer(op["path"])) != op.get("value"):
                raise PatchError(f"testing value {op['path']} failed")
        else:
            raise PatchError(f"unexpected kind of operation {kind!r}")
    return doc


def _need(op: Obj, key: str) -> Any:
    if key not in op:
        raise PatchError(f"operation {op.get('op')!r} on {op.get('path')!r} is missing {key!r}")
    return op[key]


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    current = doc
    for part in parts[:-1]:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            raise PatchError(f"doc is missing path: /{'/'.join(parts)}")
    return current


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(f"doc is missing path: /{'/'.join(parts)}")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f"index out of range: /{'/'.join(parts)}")
    else:
        raise PatchError(f"doc is missing path: /{'/'.join(parts)}")
    return doc


def _remove(doc: Any, parts: list[str]) -> tuple[Any, Any]:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, parts)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return doc, parent.pop(int(last))
    raise PatchError(f"unable to remove nonexistent key: /{'/'.join(parts)}")
