"""The three patch formats, as the apiserver applies them."""

from __future__ import annotations

import pytest

from pitstop_sim.patch import PatchError, json_patch, merge_patch, strategic_merge_patch

POD = {
    "metadata": {"labels": {"app": "web", "tier": "front"}, "finalizers": ["a"]},
    "spec": {
        "containers": [{"name": "main", "image": "web:1"}, {"name": "sidecar", "image": "proxy:1"}],
        "tolerations": [{"key": "x", "operator": "Exists"}],
    },
}


def test_merge_patch_sets_deletes_and_replaces_lists() -> None:
    patched = merge_patch(
        POD, {"metadata": {"labels": {"tier": None, "new": "1"}}, "spec": {"containers": [{"name": "only"}]}}
    )
    assert patched["metadata"]["labels"] == {"app": "web", "new": "1"}
    assert patched["spec"]["containers"] == [{"name": "only"}]
    assert POD["metadata"]["labels"]["tier"] == "front"  # the input is not modified


def test_strategic_merge_merges_containers_by_name_and_keeps_the_rest() -> None:
    patched = strategic_merge_patch(
        POD, {"spec": {"containers": [{"name": "main", "image": "web:2"}, {"name": "new", "image": "n:1"}]}}
    )
    assert patched["spec"]["containers"] == [
        {"name": "main", "image": "web:2"},
        {"name": "sidecar", "image": "proxy:1"},
        {"name": "new", "image": "n:1"},
    ]


def test_strategic_merge_directives_delete_items_and_replace_lists() -> None:
    deleted = strategic_merge_patch(POD, {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["main"]
    replaced = strategic_merge_patch(
        POD, {"spec": {"containers": [{"name": "solo", "image": "s:1"}, {"$patch": "replace"}]}}
    )
    assert replaced["spec"]["containers"] == [{"name": "solo", "image": "s:1"}]
    assert strategic_merge_patch(POD, {"metadata": {"finalizers": ["b"]}})["metadata"]["finalizers"] == [
        "a",
        "b",
    ]
    trimmed = strategic_merge_patch(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert trimmed["metadata"]["finalizers"] == []


def test_strategic_merge_replaces_lists_without_a_merge_key_and_null_unsets() -> None:
    patched = strategic_merge_patch(
        POD, {"spec": {"tolerations": [{"key": "y", "operator": "Exists"}], "nodeName": None}}
    )
    assert patched["spec"]["tolerations"] == [{"key": "y", "operator": "Exists"}]
    cordoned = strategic_merge_patch({"spec": {"unschedulable": True}}, {"spec": {"unschedulable": None}})
    assert cordoned == {"spec": {}}


def test_strategic_merge_item_without_its_merge_key_is_an_error() -> None:
    with pytest.raises(PatchError, match="does not contain the merge key 'name'"):
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "x"}]}})


def test_json_patch_operations() -> None:
    doc = {"spec": {"taints": [{"key": "a"}]}, "metadata": {"labels": {"k/v": "1"}}}
    patched = json_patch(
        doc,
        [
            {"op": "add", "path": "/spec/taints/-", "value": {"key": "b"}},
            {"op": "remove", "path": "/spec/taints/0"},
            {"op": "replace", "path": "/metadata/labels/k~1v", "value": "2"},
            {"op": "copy", "from": "/metadata/labels/k~1v", "path": "/metadata/labels/copy"},
            {"op": "move", "from": "/metadata/labels/copy", "path": "/metadata/labels/moved"},
            {"op": "test", "path": "/spec/taints/0/key", "value": "b"},
        ],
    )
    assert patched == {"spec": {"taints": [{"key": "b"}]}, "metadata": {"labels": {"k/v": "2", "moved": "2"}}}
    assert doc["spec"]["taints"] == [{"key": "a"}]


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([{"op": "test", "path": "/spec/x", "value": 1}], "doc is missing path: /spec/x"),
        ([{"op": "remove", "path": "/nope"}], "unable to remove nonexistent key: /nope"),
        ([{"op": "frobnicate", "path": "/spec"}], "unexpected kind of operation 'frobnicate'"),
        ({"op": "add"}, "a JSON patch must be a list of operations"),
    ],
)
def test_json_patch_failures_say_what_is_wrong(ops: object, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        json_patch({"spec": {}}, ops)
