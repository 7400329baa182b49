"""Server-side apply as the apiserver does it: field ownership per manager, merge, prune, conflicts.

Ported from kubernetes-sigs/structured-merge-diff (merge/update.go `Updater.Apply`/`Update`,
typed/tofieldset.go, typed/compare.go, typed/merge.go, fieldpath/serialize.go; mirror at
commit 15d0754) and the apiserver's field manager in k8s.io/apimachinery
(pkg/util/managedfields/internal: stripmeta.go, conflict.go, managedfields.go).

A field set is a Python set of paths; a path is a tuple of FieldsV1 path elements as strings
(`f:spec`, `k:{"name":"nginx"}`, `v:"finalizer"`), exactly as they appear in
`metadata.managedFields[].fieldsV1`. How each list merges comes from the schema the built-in
kinds declare (`x-kubernetes-list-type`/`x-kubernetes-list-map-keys`, generated from the
`+listType`/`+listMapKey` markers of k8s.io/api, which `ssa_schema` holds); custom resources'
lists are atomic, as a structural schema without `x-kubernetes-list-type` makes them.

Simplifications (documented so they are not mistaken for the real thing): every map is treated
as a struct (granular maps such as labels hold scalars, so their sets come out the same); the
whole `status` is left out of ownership on the main resource (the apiserver resets it there);
objects are compared as JSON, so a Go struct's zero-valued fields are not part of the "before"
of a create (the apiserver's `f:spec` of a created object has no `.` member; ours has).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pitstop_sim.ssa_schema import ListKind, list_kind, map_is_atomic

Obj = dict[str, Any]
Path = tuple[str, ...]
FieldSet = set[Path]

# stripmeta.go: never owned, never conflicting.
_STRIPPED: frozenset[Path] = frozenset(
    {("f:apiVersion",), ("f:kind",), ("f:metadata",), ("f:status",)}
    | {
        ("f:metadata", f"f:{name}")
        for name in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        )
    }
)


def _stripped(path: Path) -> bool:
    return path in _STRIPPED or path[:1] == ("f:status",)


@dataclass(frozen=True)
class Schema:
    """How lists and maps of one kind merge. `custom` kinds have atomic lists."""

    custom: bool = False

    def list_kind(self, field: str, parent: str) -> ListKind:
        return ListKind("atomic") if self.custom else list_kind(field, parent)

    def atomic_map(self, field: str, parent: str) -> bool:
        return not self.custom and map_is_atomic(field, parent)


# --- path elements ------------------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def item_element(kind: ListKind, item: Any) -> str:
    if kind.kind == "set":
        return "v:" + _compact(item)
    key = {name: (item or {}).get(name, kind.defaults.get(name)) for name in kind.keys}
    return "k:" + _compact({k: v for k, v in key.items() if v is not None})


def element_text(element: str) -> str:
    """A path element as the apiserver prints it in conflicts (fieldpath.PathElement.String)."""
    tag, body = element[:2], element[2:]
    if tag == "f:":
        return "." + body
    if tag == "k:":
        return "[" + ",".join(f"{k}={_go_text(v)}" for k, v in sorted(json.loads(body).items())) + "]"
    if tag == "v:":
        return f"[={_go_text(json.loads(body))}]"
    return f"[{body}]"


def _go_text(value: Any) -> str:
    # value.ToString: strings are quoted, numbers and booleans bare.
    return json.dumps(value) if isinstance(value, str) else _compact(value)


def path_text(path: Path) -> str:
    return "".join(element_text(e) for e in path)


def _value_order(value: Any) -> tuple[Any, ...]:
    """value.Compare's total order: numbers (ints and floats together), strings, booleans,
    lists, maps, then null."""
    if isinstance(value, bool):
        return (2, value)
    if isinstance(value, int | float):
        return (0, float(value))
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, list):
        return (3, tuple(_value_order(v) for v in value))
    if isinstance(value, dict):
        return (4, tuple((k, _value_order(v)) for k, v in sorted(value.items())))
    return (5,)


def element_order(element: str) -> tuple[Any, ...]:
    """PathElement.Compare: field names, then keys (their sorted fields, name then value),
    then set values, then indexes (numerically)."""
    tag, body = element[:2], element[2:]
    if tag == "f:":
        return (0, body)
    if tag == "k:":
        return (1, tuple((k, _value_order(v)) for k, v in sorted(json.loads(body).items())))
    if tag == "v:":
        return (2, _value_order(json.loads(body)))
    return (3, int(body) if body.lstrip("-").isdigit() else 0)


def path_order(path: Path) -> tuple[tuple[Any, ...], ...]:
    """Path.Compare: element by element, a prefix first."""
    return tuple(element_order(e) for e in path)


# --- ToFieldSet ---------------------------------------------------------------------------------


def field_set(obj: Obj, schema: Schema) -> FieldSet:
    out: FieldSet = set()
    _set_of_map(obj, (), "", schema, out)
    return {p for p in out if not _stripped(p)}


def _set_of_map(value: Obj, path: Path, parent: str, schema: Schema, out: FieldSet) -> None:
    for key, child in value.items():
        here = (*path, f"f:{key}")
        if isinstance(child, dict):
            if not child or schema.atomic_map(key, parent):
                out.add(here)
            else:
                _set_of_map(child, here, key, schema, out)
        elif isinstance(child, list):
            kind = schema.list_kind(key, parent)
            if kind.kind == "atomic":
                out.add(here)
            else:
                for item in child:
                    element = (*here, item_element(kind, item))
                    if kind.kind == "map" and isinstance(item, dict):
                        _set_of_map(item, element, key, schema, out)
                    out.add(element)
        else:
            out.add(here)


# --- Compare ------------------------------------------------------------------------------------


@dataclass
class Comparison:
    added: FieldSet
    modified: FieldSet
    removed: FieldSet


def compare(lhs: Obj, rhs: Obj, schema: Schema) -> Comparison:
    result = Comparison(set(), set(), set())
    _compare_maps(lhs, rhs, (), "", schema, result)
    for s in (result.added, result.modified, result.removed):
        for p in [p for p in s if _stripped(p)]:
            s.discard(p)
    return result


class _Absent:
    """A side of a comparison or merge where the field is not set."""


_ABSENT = _Absent()


def _compare(
    lhs: Any, rhs: Any, path: Path, field: str, parent: str, schema: Schema, out: Comparison
) -> None:
    leaf = True
    if isinstance(lhs, dict | _Absent) and isinstance(rhs, dict | _Absent):
        left = lhs if isinstance(lhs, dict) else {}
        right = rhs if isinstance(rhs, dict) else {}
        if (left or right) and not schema.atomic_map(field, parent):
            leaf = False
            _compare_maps(left, right, path, field, schema, out)
    elif isinstance(lhs, list | _Absent) and isinstance(rhs, list | _Absent):
        kind = schema.list_kind(field, parent)
        left_items = lhs if isinstance(lhs, list) else []
        right_items = rhs if isinstance(rhs, list) else []
        if kind.kind != "atomic" and (left_items or right_items):
            leaf = False
            _compare_lists(left_items, right_items, path, field, kind, schema, out)
    if leaf:
        if lhs is _ABSENT:
            out.added.add(path)
        elif rhs is _ABSENT:
            out.removed.add(path)
        elif lhs != rhs:
            out.modified.add(path)
        return
    if lhs is _ABSENT:
        out.added.add(path)
    elif rhs is _ABSENT:
        out.removed.add(path)


def _compare_maps(lhs: Obj, rhs: Obj, path: Path, parent: str, schema: Schema, out: Comparison) -> None:
    for key in dict.fromkeys([*lhs, *rhs]):
        _compare(lhs.get(key, _ABSENT), rhs.get(key, _ABSENT), (*path, f"f:{key}"), key, parent, schema, out)


def _index(items: list[Any], kind: ListKind) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for item in items:
        found.setdefault(item_element(kind, item), []).append(item)
    return found


def _compare_lists(
    lhs: list[Any], rhs: list[Any], path: Path, field: str, kind: ListKind, schema: Schema, out: Comparison
) -> None:
    left, right = _index(lhs, kind), _index(rhs, kind)
    for element in dict.fromkeys([*left, *right]):
        ls, rs = left.get(element, []), right.get(element, [])
        here = (*path, element)
        if len(ls) <= 1 and len(rs) <= 1:
            l_item = ls[0] if ls else _ABSENT
            r_item = rs[0] if rs else _ABSENT
            if kind.kind == "set":
                if l_item is _ABSENT:
                    out.added.add(here)
                elif r_item is _ABSENT:
                    out.removed.add(here)
            else:
                _compare(l_item, r_item, here, field, field, schema, out)
        elif len(ls) >= 2 and len(rs) >= 2:
            if ls != rs:
                out.modified.add(here)
        elif len(ls) >= 2:
            out.removed.add(here)
        else:
            out.added.add(here)


# --- Merge (config onto live) -------------------------------------------------------------------


def merge(live: Any, config: Any, field: str, parent: str, schema: Schema) -> Any:
    if isinstance(live, dict) and isinstance(config, dict) and not schema.atomic_map(field, parent):
        result = dict(live)
        for key, value in config.items():
            result[key] = (
                merge(live.get(key, _ABSENT), value, key, field, schema)
                if key in live
                else copy.deepcopy(value)
            )
        return result
    if isinstance(live, list) and isinstance(config, list):
        kind = schema.list_kind(field, parent)
        if kind.kind != "atomic":
            return _merge_lists(live, config, field, kind, schema)
    return copy.deepcopy(config)


def _merge_lists(lhs: list[Any], rhs: list[Any], field: str, kind: ListKind, schema: Schema) -> list[Any]:
    """typed/merge.go visitListItems: the live order, with the config's items in the config's
    order where they are shared, and the config's new items after the live item before them."""
    r_pes = [item_element(kind, i) for i in rhs]
    l_pes = [item_element(kind, i) for i in lhs]
    observed_r = dict(zip(r_pes, rhs, strict=True))
    observed_l = dict(zip(l_pes, lhs, strict=True))
    shared = [pe for pe in dict.fromkeys(r_pes) if pe in observed_l]
    next_shared = shared.pop(0) if shared else None
    merged_r: set[str] = set()
    out: list[Any] = []

    def item(pe: str) -> Any:
        if kind.kind == "set" or pe not in observed_l:
            return copy.deepcopy(observed_r[pe])
        return merge(observed_l[pe], observed_r[pe], field, field, schema)

    li = ri = 0
    while li < len(l_pes) or ri < len(r_pes):
        if li < len(l_pes) and ri < len(r_pes):
            pe = l_pes[li]
            if pe == r_pes[ri]:
                merged_r.add(pe)
                out.append(item(pe))
                li += 1
                ri += 1
                next_shared = shared.pop(0) if shared else None
                continue
            if pe in observed_r and next_shared is not None and next_shared != pe:
                li += 1
                continue
        if li < len(l_pes):
            pe = l_pes[li]
            if pe not in observed_r:
                out.append(copy.deepcopy(observed_l[pe]))
                li += 1
                continue
            if pe in merged_r:
                li += 1
        if ri < len(r_pes):
            pe = r_pes[ri]
            if pe not in merged_r:
                merged_r.add(pe)
                out.append(item(pe))
            ri += 1
    return out


# --- RemoveItems --------------------------------------------------------------------------------


def remove_items(obj: Obj, paths: FieldSet, schema: Schema) -> Obj:
    """The object without the given paths (a removed map or list item takes its children)."""
    trie: dict[str, Any] = {}
    for p in paths:
        node = trie
        for element in p[:-1]:
            node = node.setdefault(element, {})
            if node is None:
                break
        else:
            node[p[-1]] = None  # None: the whole member goes
    return _remove_map(obj, trie, "", schema)


def _remove_map(value: Obj, trie: dict[str, Any], parent: str, schema: Schema) -> Obj:
    out: Obj = {}
    for key, child in value.items():
        sub = trie.get(f"f:{key}", {})
        if sub is None:
            continue
        if sub and isinstance(child, dict):
            out[key] = _remove_map(child, sub, key, schema)
        elif sub and isinstance(child, list):
            kind = schema.list_kind(key, parent)
            kept = []
            for item in child:
                below = sub.get(item_element(kind, item), {}) if kind.kind != "atomic" else {}
                if below is None:
                    continue
                kept.append(
                    _remove_map(item, below, key, schema) if below and isinstance(item, dict) else item
                )
            out[key] = kept
        else:
            out[key] = child
    return out


# --- FieldsV1 -----------------------------------------------------------------------------------


def to_fields_v1(paths: Iterable[Path]) -> Obj:
    root: Obj = {}
    members = set(paths)
    for p in sorted(members):
        node = root
        for element in p:
            node = node.setdefault(element, {})
    for p in members:
        node = root
        for element in p:
            node = node[element]
        if node and p:
            node["."] = {}
    return _sorted_fields(root)


def _sorted_fields(node: Obj) -> Obj:
    # fieldpath/serialize.go writes "." first, then the children in PathElement order.
    keys = sorted(node, key=lambda k: (k != ".", k))
    return {k: _sorted_fields(node[k]) for k in keys}


def from_fields_v1(fields: Obj) -> FieldSet:
    out: FieldSet = set()

    def walk(node: Obj, path: Path) -> None:
        for key, child in node.items():
            if key == ".":
                out.add(path)
                continue
            here = (*path, key)
            if child:
                walk(child, here)
            else:
                out.add(here)

    walk(fields or {}, ())
    return out


# --- managers -----------------------------------------------------------------------------------


@dataclass
class Manager:
    manager: str
    operation: str  # Apply | Update
    api_version: str
    fields: FieldSet
    time: str
    subresource: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.manager, self.operation, self.subresource)

    def identifier(self) -> str:
        """BuildManagerIdentifier: the entry as JSON without time and fields (and without the
        apiVersion for appliers) - what conflict messages sort managers by."""
        entry = {"manager": self.manager, "operation": self.operation}
        if self.api_version and self.operation != "Apply":
            entry["apiVersion"] = self.api_version
        if self.subresource:
            entry["subresource"] = self.subresource
        return json.dumps(entry, separators=(",", ":"), ensure_ascii=False)

    def printed(self) -> str:
        """printManager in conflict.go (the apiserver keys managers without their time)."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text


def read_managers(obj: Obj) -> list[Manager]:
    out = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, dict):
            continue
        out.append(
            Manager(
                manager=str(entry.get("manager") or ""),
                operation=str(entry.get("operation") or "Update"),
                api_version=str(entry.get("apiVersion") or ""),
                fields=from_fields_v1(entry.get("fieldsV1") or {}),
                time=str(entry.get("time") or ""),
                subresource=str(entry.get("subresource") or ""),
            )
        )
    return out


def write_managers(obj: Obj, managers: list[Manager]) -> None:
    entries = []
    for m in managers:
        if not m.fields:
            continue
        entry: Obj = {
            "manager": m.manager,
            "operation": m.operation,
            "apiVersion": m.api_version,
            "time": m.time,
        }
        entry.update(fieldsType="FieldsV1", fieldsV1=to_fields_v1(m.fields))
        if m.subresource:
            entry["subresource"] = m.subresource
        entries.append(entry)
    metadata = obj.setdefault("metadata", {})
    if entries:
        metadata["managedFields"] = entries
    else:
        metadata.pop("managedFields", None)


def checked_managed_fields(sent: Any) -> list[Obj]:
    """managedFields a client wrote: a list of entries naming a manager and an operation
    (`[{}]` resets the record to nothing); anything else is a 400."""
    if not isinstance(sent, list) or not all(isinstance(e, dict) for e in sent):
        raise ValueError("metadata.managedFields must be a list of entries")
    if sent == [{}]:
        return []
    for entry in sent:
        if entry.get("operation") not in ("Apply", "Update") or not entry.get("manager"):
            raise ValueError(
                "metadata.managedFields: every entry needs a manager and an operation (Apply or Update)"
            )
    return [dict(e) for e in sent]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApplyConflict(Exception):
    def __init__(self, conflicts: list[tuple[Manager, Path]]) -> None:
        self.conflicts = conflicts
        super().__init__(conflict_message(conflicts))

    def causes(self) -> list[Obj]:
        return [
            {"type": "FieldManagerConflict", "message": f"conflict with {m.printed()}", "field": path_text(p)}
            for m, p in self.conflicts
        ]


def conflict_message(conflicts: list[tuple[Manager, Path]]) -> str:
    """getConflictMessage in conflict.go: managers sorted by their identifier, each one's paths
    in fieldpath.Set order (`path_order`)."""
    if len(conflicts) == 1:
        m, p = conflicts[0]
        return f"Apply failed with 1 conflict: conflict with {m.printed()}: {path_text(p)}"
    by_manager: dict[str, tuple[Manager, list[Path]]] = {}
    for m, p in conflicts:
        by_manager.setdefault(m.identifier(), (m, []))[1].append(p)
    lines = []
    for identifier in sorted(by_manager):
        m, paths = by_manager[identifier]
        lines.append(f"conflicts with {m.printed()}:")
        lines.extend(f"- {path_text(p)}" for p in sorted(paths, key=path_order))
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def _settle(
    live: Obj, new: Obj, managers: list[Manager], me: tuple[str, str, str], force: bool, schema: Schema
) -> tuple[list[Manager], Comparison]:
    """Updater.update: others lose what this write changes (or it fails on conflicts) and what
    it removed."""
    cmp = compare(live, new, schema)
    touched = cmp.modified | cmp.added
    conflicts: list[tuple[Manager, Path]] = []
    for m in managers:
        if m.key == me:
            continue
        conflicts.extend((m, p) for p in sorted(m.fields & touched, key=path_order))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for m in managers:
        if m.key != me:
            m.fields = m.fields - touched - cmp.removed
    return [m for m in managers if m.fields or m.key == me], cmp


def apply(
    live: Obj,
    config: Obj,
    *,
    manager: str,
    api_version: str,
    force: bool,
    schema: Schema,
    stamp: Callable[[], str] = now,
) -> Obj:
    """Updater.Apply: the object after `manager` applies `config` to `live` (raises ApplyConflict)."""
    managers = read_managers(live)
    if live and not managers:
        # skipnonapplied.go: an object nobody's fields were recorded for (made before
        # server-side apply, or by a client the field manager never saw) is first owned whole by
        # `before-first-apply`, so an apply that changes it conflicts like any other.
        owned = compare({}, _body(live), schema).added
        managers = [Manager("before-first-apply", "Update", api_version, owned, stamp())]
    me = (manager, "Apply", "")
    mine = next((m for m in managers if m.key == me), None)
    last = set(mine.fields) if mine else set()
    new_set = field_set(config, schema)
    merged = merge(_body(live), _body(config), "", "", schema)
    if mine is None:
        mine = Manager(manager, "Apply", api_version, new_set, stamp())
        managers.append(mine)
    mine.fields, mine.api_version = new_set, api_version
    if last:
        merged = _prune(merged, last, managers, schema)
    managers, _ = _settle(_body(live), merged, managers, me, force, schema)
    result = {**merged, "metadata": {**(merged.get("metadata") or {})}}
    if _body(live) != merged or read_managers(live) != managers:
        mine.time = stamp()
    write_managers(result, managers)
    return result


def _prune(merged: Obj, last: FieldSet, managers: list[Manager], schema: Schema) -> Obj:
    """Updater.prune: what this manager applied last time and no longer does goes, unless someone
    (this apply included) still owns it. Named fields on the way to an owned path count as owned
    (EnsureNamedFieldsAreMembers), so an abandoned struct such as `rollingUpdate` goes whole;
    list items do not, so an abandoned item goes whole too."""
    owned: FieldSet = set()
    for m in managers:
        owned |= m.fields
    # Only named fields are added back as parents (addBackOwnedItems): a list item nobody
    # applies any more goes whole, even if another manager owns a field inside it.
    kept = _with_named_parents(owned)
    gone = _with_named_parents(last) - kept
    return remove_items(merged, gone, schema)


def _with_named_parents(paths: FieldSet) -> FieldSet:
    out = set(paths)
    for p in paths:
        out.update(p[:i] for i in range(1, len(p)) if p[i - 1].startswith("f:"))
    return out


def update(
    live: Obj | None,
    new: Obj,
    *,
    manager: str,
    api_version: str,
    schema: Schema,
    subresource: str = "",
    stamp: Callable[[], str] = now,
) -> Obj:
    """Updater.Update: a create/update/patch by `manager` takes what it added or modified. The
    record it starts from is `new`'s (the live one carried over, or one the client wrote)."""
    managers = read_managers(new)
    me = (manager, "Update", subresource)
    before = _body(live or {})
    after = _body(new)
    managers, cmp = _settle(before, after, managers, me, True, schema)
    mine = next((m for m in managers if m.key == me), None)
    if mine is None:
        mine = Manager(manager, "Update", api_version, set(), stamp(), subresource)
        managers.append(mine)
    fields = (mine.fields - cmp.removed) | cmp.modified | cmp.added
    # managedfieldsupdater.go: the time moves only when this operation took fields (changed a
    # value, its own included); an update that changes nothing leaves every time as it was.
    if cmp.modified or cmp.added:
        mine.time = stamp()
    mine.fields, mine.api_version = fields, api_version
    result = copy.deepcopy(new)
    write_managers(result, managers)
    return result


def _body(obj: Obj) -> Obj:
    """The object without its managedFields (never merged, compared or owned)."""
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": metadata}


def default_manager(user_agent: str) -> str:
    """The apiserver names a manager that gave none after its user agent's first word
    (`kubectl/v1.32.4 (linux/amd64) ...` -> `kubectl`; kubectl itself sends its own names)."""
    head = (user_agent or "").split("/")[0].strip()
    return head[:128] or "unknown"
