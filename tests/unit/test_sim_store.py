"""The object store: versions, indexes, pagination, watch history, owners."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop.kube.selectors import parse_selector
from pitstop_sim.selectors import FieldTerm
from pitstop_sim.store import InMemoryStore, ObjectExists, VersionConflict, WatchEvent, object_key

Obj = dict[str, Any]


def pod(name: str, node: str, app: str, owner: str | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": app}}
    if owner:
        meta["ownerReferences"] = [
            {"uid": owner, "kind": "ReplicaSet", "name": "rs", "apiVersion": "apps/v1"}
        ]
    return {"metadata": meta, "spec": {"nodeName": node}}


@pytest.fixture
def store() -> InMemoryStore:
    store = InMemoryStore(history=5)
    for i in range(6):
        store.create(
            "pods", pod(f"p{i}", f"n{i % 2}", "web" if i < 4 else "db", owner="rs-1" if i < 2 else None)
        )
    return store


def test_keys_are_shaped_like_etcd_and_versions_increase(store: InMemoryStore) -> None:
    assert object_key("pods", "ns", "p0") == "/registry/pods/ns/p0"
    assert object_key("nodes", None, "n") == "/registry/nodes/n"
    versions = [int(p["metadata"]["resourceVersion"]) for p in store.list("pods").items]
    assert versions == sorted(versions) and len(set(versions)) == 6
    with pytest.raises(ObjectExists):
        store.create("pods", pod("p0", "n0", "web"))


def test_list_by_label_and_indexed_field(store: InMemoryStore) -> None:
    web_on_n0 = store.list(
        "pods", labels=parse_selector("app=web"), fields=[FieldTerm("spec.nodeName", True, "n0")]
    )
    assert [p["metadata"]["name"] for p in web_on_n0.items] == ["p0", "p2"]
    assert [p["metadata"]["name"] for p in store.list("pods", labels=parse_selector("app!=web")).items] == [
        "p4",
        "p5",
    ]
    moved = dict(store.get("pods", "ns", "p0") or {})
    moved["spec"] = {"nodeName": "n1"}
    store.update("pods", moved)
    assert [
        p["metadata"]["name"]
        for p in store.list("pods", fields=[FieldTerm("spec.nodeName", True, "n0")]).items
    ] == ["p2", "p4"]


def test_pages_continue_where_the_last_one_ended(store: InMemoryStore) -> None:
    first = store.list("pods", limit=4)
    assert [p["metadata"]["name"] for p in first.items] == ["p0", "p1", "p2", "p3"]
    assert first.remaining == 2
    second = store.list("pods", limit=4, start_after=first.next_key)
    assert [p["metadata"]["name"] for p in second.items] == ["p4", "p5"]
    assert second.next_key is None


def test_update_with_a_stale_version_conflicts(store: InMemoryStore) -> None:
    current = store.get("pods", "ns", "p1") or {}
    with pytest.raises(VersionConflict):
        store.update("pods", {**current, "metadata": {**current["metadata"]}}, expect_rv="1")


def test_watch_history_is_bounded(store: InMemoryStore) -> None:
    seen: list[WatchEvent] = []
    store.subscribe(seen.append)
    store.delete("pods", "ns", "p5")
    assert [e.type for e in seen] == ["DELETED"]
    assert seen[0].old is not None and seen[0].obj["metadata"]["resourceVersion"] == str(
        store.resource_version
    )
    assert store.history_since(1) is None  # compacted: a watch from here gets 410 Gone
    recent = store.history_since(store.resource_version - 2) or []
    assert [(e.type, e.obj["metadata"]["name"]) for e in recent] == [("ADDED", "p5"), ("DELETED", "p5")]


def test_dependents_follow_owner_references(store: InMemoryStore) -> None:
    assert sorted(o["metadata"]["name"] for _, o in store.dependents("rs-1")) == ["p0", "p1"]
    store.delete("pods", "ns", "p0")
    assert [o["metadata"]["name"] for _, o in store.dependents("rs-1")] == ["p1"]
    assert store.by_uid("uid-p1") is not None and store.by_uid("uid-p0") is None
