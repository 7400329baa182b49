"""The rehearsal cluster's server-side apply, rule by rule against structured-merge-diff and the
apiserver's field manager (pitstop_sim.ssa names the upstream files)."""

from __future__ import annotations

import pytest

from pitstop_sim import ssa

BUILT_IN = ssa.Schema()
STAMP = "2026-12-02T00:00:00Z"


def stamp() -> str:
    return STAMP


def pod_spec(ports: list[dict[str, object]]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "a"}},
        "spec": {
            "containers": [{"name": "c", "image": "i:1", "ports": ports}],
            "tolerations": [{"key": "k"}],
        },
    }


def test_field_sets_use_list_map_keys_with_their_defaults_and_atomic_lists_whole() -> None:
    paths = {ssa.path_text(p) for p in ssa.field_set(pod_spec([{"containerPort": 53}]), BUILT_IN)}
    # Container ports are keyed by containerPort and protocol (protocol defaults to TCP);
    # tolerations have no list type, so they are one atomic field; name/apiVersion are never owned.
    assert paths == {
        ".metadata.labels.app",
        '.spec.containers[name="c"]',
        '.spec.containers[name="c"].name',
        '.spec.containers[name="c"].image',
        '.spec.containers[name="c"].ports[containerPort=53,protocol="TCP"]',
        '.spec.containers[name="c"].ports[containerPort=53,protocol="TCP"].containerPort',
        ".spec.tolerations",
    }


def test_fields_v1_round_trips_and_marks_members_that_have_children() -> None:
    fields = ssa.field_set(pod_spec([{"containerPort": 53, "protocol": "UDP"}]), BUILT_IN)
    encoded = ssa.to_fields_v1(fields)
    container = encoded["f:spec"]["f:containers"]['k:{"name":"c"}']
    assert next(iter(container)) == "." and container["f:image"] == {}
    assert 'k:{"containerPort":53,"protocol":"UDP"}' in container["f:ports"]
    assert ssa.from_fields_v1(encoded) == fields


def test_conflicts_are_worded_as_the_apiserver_words_them() -> None:
    live = ssa.update(
        None, pod_spec([]), manager="kubectl-edit", api_version="v1", schema=BUILT_IN, stamp=stamp
    )
    live = ssa.update(
        live,
        {**live, "metadata": {**live["metadata"], "labels": {"app": "b"}}},
        manager="ops",
        api_version="v1",
        schema=BUILT_IN,
        stamp=stamp,
    )
    config = pod_spec([])
    config["metadata"]["labels"] = {"app": "z"}
    config["spec"]["containers"][0]["image"] = "i:2"  # type: ignore[index]
    with pytest.raises(ssa.ApplyConflict) as one:
        ssa.apply(
            live,
            {**config, "spec": live["spec"]},
            manager="me",
            api_version="v1",
            force=False,
            schema=BUILT_IN,
        )
    assert (
        str(one.value) == 'Apply failed with 1 conflict: conflict with "ops" using v1: .metadata.labels.app'
    )
    with pytest.raises(ssa.ApplyConflict) as two:
        ssa.apply(live, config, manager="me", api_version="v1", force=False, schema=BUILT_IN)
    assert str(two.value) == (
        'Apply failed with 2 conflicts: conflicts with "kubectl-edit" using v1:\n'
        '- .spec.containers[name="c"].image\n'
        'conflicts with "ops" using v1:\n'
        "- .metadata.labels.app"
    )
    assert two.value.causes()[0] == {
        "type": "FieldManagerConflict",
        "message": 'conflict with "kubectl-edit" using v1',
        "field": '.spec.containers[name="c"].image',
    }
    forced = ssa.apply(live, config, manager="me", api_version="v1", force=True, schema=BUILT_IN, stamp=stamp)
    owners = {m.manager: m.fields for m in ssa.read_managers(forced)}
    assert ("f:metadata", "f:labels", "f:app") in owners["me"]
    assert "ops" not in owners  # its only field was taken, so its entry goes


def test_merging_keeps_the_live_order_with_the_configs_new_items_after_it() -> None:
    # typed/merge.go: live-only items keep their places, shared ones follow the config's order,
    # the config's new ones come when the walk reaches them (here, after the live list).
    live = {"spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}}
    config = {"spec": {"containers": [{"name": "b", "image": "x"}, {"name": "new"}]}}
    merged = ssa.merge(live, config, "", "", BUILT_IN)
    assert [c["name"] for c in merged["spec"]["containers"]] == ["a", "b", "c", "new"]
    swapped = ssa.merge(live, {"spec": {"containers": [{"name": "c"}, {"name": "a"}]}}, "", "", BUILT_IN)
    assert [c["name"] for c in swapped["spec"]["containers"]] == ["b", "c", "a"]
    assert merged["spec"]["containers"][1] == {"name": "b", "image": "x"}
    # Custom resources: lists are atomic, replaced whole.
    custom = ssa.merge(
        {"spec": {"tags": ["a", "b"]}}, {"spec": {"tags": ["c"]}}, "", "", ssa.Schema(custom=True)
    )
    assert custom == {"spec": {"tags": ["c"]}}


def deployment(containers: list[dict[str, object]], **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": containers, **spec}}},
    }


def test_an_object_nobody_owns_is_owned_by_before_first_apply_so_changes_conflict() -> None:
    # skipnonapplied.go: made before server-side apply (or seeded), the object is first owned
    # whole by `before-first-apply`; an apply that keeps its values co-owns them.
    live = deployment([{"name": "a", "image": "x:1"}])
    same = ssa.apply(
        live,
        deployment([{"name": "a", "image": "x:1"}]),
        manager="me",
        api_version="apps/v1",
        force=False,
        schema=BUILT_IN,
    )
    assert {m.manager for m in ssa.read_managers(same)} == {"before-first-apply", "me"}
    with pytest.raises(ssa.ApplyConflict) as changed:
        ssa.apply(
            live,
            deployment([{"name": "a", "image": "x:2"}]),
            manager="me",
            api_version="apps/v1",
            force=False,
            schema=BUILT_IN,
        )
    assert str(changed.value) == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using apps/v1: '
        '.spec.template.spec.containers[name="a"].image'
    )


def test_a_list_item_no_longer_applied_goes_whole_even_if_another_manager_set_a_field_in_it() -> None:
    first = ssa.apply(
        {},
        deployment([{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]),
        manager="me",
        api_version="apps/v1",
        force=False,
        schema=BUILT_IN,
        stamp=stamp,
    )
    edited = deployment([{"name": "a", "image": "z:9"}, {"name": "b", "image": "y:1"}])
    edited["metadata"] = first["metadata"]
    by_someone = ssa.update(
        first, edited, manager="kubectl-set", api_version="apps/v1", schema=BUILT_IN, stamp=stamp
    )
    after = ssa.apply(
        by_someone,
        deployment([{"name": "b", "image": "y:1"}]),
        manager="me",
        api_version="apps/v1",
        force=False,
        schema=BUILT_IN,
        stamp=stamp,
    )
    assert after["spec"]["template"]["spec"]["containers"] == [{"name": "b", "image": "y:1"}]


def test_node_selector_is_atomic_a_different_one_conflicts_and_replaces_it_whole() -> None:
    mine = ssa.apply(
        {},
        deployment([{"name": "a"}], nodeSelector={"gpu": "yes"}),
        manager="me",
        api_version="apps/v1",
        force=False,
        schema=BUILT_IN,
        stamp=stamp,
    )
    theirs = deployment([{"name": "a"}], nodeSelector={"gpu": "yes", "pool": "a"})
    theirs["metadata"] = mine["metadata"]
    edited = ssa.update(
        mine, theirs, manager="kubectl-edit", api_version="apps/v1", schema=BUILT_IN, stamp=stamp
    )
    with pytest.raises(ssa.ApplyConflict, match=r"\.spec\.template\.spec\.nodeSelector$"):
        ssa.apply(
            edited,
            deployment([{"name": "a"}], nodeSelector={"gpu": "yes"}),
            manager="me",
            api_version="apps/v1",
            force=False,
            schema=BUILT_IN,
        )
    forced = ssa.apply(
        edited,
        deployment([{"name": "a"}], nodeSelector={"gpu": "yes"}),
        manager="me",
        api_version="apps/v1",
        force=True,
        schema=BUILT_IN,
    )
    assert forced["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "yes"}


def test_an_update_moves_its_managers_time_only_when_it_changed_a_value() -> None:
    """managedfieldsupdater.go: the entry's time is set when the operation took fields, even
    fields the manager already owned (a new value), and not when nothing changed."""
    first = ssa.update(None, pod_spec([]), manager="ops", api_version="v1", schema=BUILT_IN, stamp=stamp)

    def later() -> str:
        return "2026-12-03T00:00:00Z"

    def times(obj: dict[str, object]) -> list[object]:
        return [m["time"] for m in obj["metadata"]["managedFields"]]  # type: ignore[index]

    unchanged = ssa.update(first, dict(first), manager="ops", api_version="v1", schema=BUILT_IN, stamp=later)
    assert times(unchanged) == [STAMP]
    relabelled = {**first, "metadata": {**first["metadata"], "labels": {"app": "b"}}}  # type: ignore[dict-item]
    own_value = ssa.update(first, relabelled, manager="ops", api_version="v1", schema=BUILT_IN, stamp=later)
    assert times(own_value) == ["2026-12-03T00:00:00Z"]


def test_conflicts_list_paths_in_field_path_order_numbers_by_value() -> None:
    """getConflictMessage prints a manager's paths as fieldpath.Set iterates them: keys compare
    field by field and numbers by value (port 80 before 443), not as text."""
    ports = [
        {"containerPort": 443, "hostPort": 8443},
        {"containerPort": 80, "hostPort": 8080},
        {"containerPort": 9090, "hostPort": 9090},
    ]
    live = ssa.update(None, pod_spec(ports), manager="ops", api_version="v1", schema=BUILT_IN, stamp=stamp)
    changed = [{**p, "hostPort": int(p["hostPort"]) + 1} for p in ports]
    with pytest.raises(ssa.ApplyConflict) as refused:
        ssa.apply(
            live, pod_spec(changed), manager="me", api_version="v1", force=False, schema=BUILT_IN, stamp=stamp
        )
    lines = str(refused.value).splitlines()
    assert lines[0] == 'Apply failed with 3 conflicts: conflicts with "ops" using v1:'
    assert [line.split("containerPort=")[1].split(",")[0] for line in lines[1:]] == ["80", "443", "9090"]
