"""Client-side apply computed as kubectl does: the last-applied annotation and three-way patches."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pitstop.kube.apply import (
    LAST_APPLIED,
    apply_patch,
    last_applied_of,
    three_way_json_merge_patch,
    three_way_strategic_merge_patch,
    with_last_applied,
)
from pitstop.kube.manifests import ManifestError, parse_documents

Obj = dict[str, Any]


def deployment(env: list[Obj], image: str = "nginx:1") -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image, "env": env}]}}},
    }


def test_the_annotation_is_serialised_as_kubectl_writes_it() -> None:
    manifest = {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "cm"}, "data": {"k": "a<b&c é"}}
    # kubectl 1.3x wrote exactly this for the same manifest (sorted keys, HTML-escaped, newline).
    assert last_applied_of(manifest) == (
        '{"apiVersion":"v1","data":{"k":"a\\u003cb\\u0026c é"},"kind":"ConfigMap",'
        '"metadata":{"annotations":{},"name":"cm"}}\n'
    )
    applied = with_last_applied(manifest)
    assert json.loads(applied["metadata"]["annotations"][LAST_APPLIED]) == {
        **manifest,
        "metadata": {"name": "cm", "annotations": {}},
    }
    assert "annotations" not in manifest["metadata"]  # the input is not modified


def test_an_object_already_applied_with_server_defaults_needs_no_patch() -> None:
    manifest = deployment([{"name": "A", "value": "1"}])
    live = with_last_applied(manifest)
    live["spec"]["replicas"] = 1  # defaulted by the server
    live["metadata"]["uid"] = "u-1"
    assert apply_patch(manifest, live) == ({}, "strategic")


def test_strategic_patch_changes_merge_keyed_elements_and_deletes_dropped_ones() -> None:
    old = deployment([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
    new = deployment([{"name": "B", "value": "3"}, {"name": "C", "value": "4"}], image="nginx:2")
    live = with_last_applied(old)
    patch = three_way_strategic_merge_patch(json.loads(last_applied_of(old)), with_last_applied(new), live)
    [container] = patch["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "c" and container["image"] == "nginx:2"
    assert sorted(container["env"], key=lambda e: e["name"]) == [
        {"name": "A", "$patch": "delete"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]


def test_fields_set_by_others_survive_while_fields_this_config_dropped_are_removed() -> None:
    old = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3, "tags": ["a"]},
    }
    new = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"tags": ["b"]},
    }
    live = with_last_applied(old)
    live["spec"]["owner"] = "controller"  # not ours: untouched
    patch, kind = apply_patch(new, live)
    assert kind == "merge"
    assert patch["spec"] == {"size": None, "tags": ["b"]}
    assert LAST_APPLIED in patch["metadata"]["annotations"]


def test_json_merge_patch_for_an_object_never_applied_adds_without_deleting() -> None:
    manifest = {"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"a": 1}}
    live = {"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"a": 1, "b": 2}}
    patch = three_way_json_merge_patch(None, with_last_applied(manifest), live)
    assert patch == {"metadata": {"annotations": {LAST_APPLIED: last_applied_of(manifest)}}}


def test_booleans_and_numbers_are_not_confused() -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "x": True}
    live = with_last_applied(manifest)
    live["x"] = 1
    assert apply_patch(manifest, live)[0] == {"x": True}


def test_manifests_keep_timestamps_as_text_and_flatten_lists() -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {d: 2024-01-01}}\n"
    )
    [item] = parse_documents(text, "f.yaml")
    assert item.obj["data"] == {"d": "2024-01-01"} and item.where == "f.yaml document 0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [1\nb: 2\n", "f.yaml:2:2: invalid YAML: while parsing a flow sequence expected ',' or ']'"),
        ("- 1\n", "f.yaml document 0: a manifest is a mapping with apiVersion, kind and metadata"),
        (
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: ConfigMap\n",
            "f.yaml document 1: missing apiVersion, metadata.name",
        ),
    ],
)
def test_bad_manifests_name_file_and_line_or_document(text: str, message: str) -> None:
    with pytest.raises(ManifestError) as error:
        parse_documents(text, "f.yaml")
    assert str(error.value).startswith(message)
