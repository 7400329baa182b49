"""VarScope: Ansible's variable precedence as named layers, extended without changing the parent."""

from __future__ import annotations

from typing import Any

import pytest

from pitstop.runbook.scope import HOST_LAYERS, PRECEDENCE, RUN_LAYERS, VarScope
from pitstop.runbook.templating import render


def _host_scope(facts: dict[str, Any] | None = None, registered: dict[str, Any] | None = None) -> VarScope:
    return VarScope(
        {
            "input": {"x": "input", "only_input": 1},
            "task": {"x": "task", "only_task": 2},
            "facts": facts if facts is not None else {"x": "fact"},
            "registered": registered if registered is not None else {},
        },
        hostvars={"h1": {"inventory_hostname": "h1"}},
    )


def test_precedence_is_ansibles_lowest_first() -> None:
    assert (*RUN_LAYERS, *HOST_LAYERS) == PRECEDENCE
    assert RUN_LAYERS.index("play") < RUN_LAYERS.index("stage") < RUN_LAYERS.index("extra_vars")
    assert HOST_LAYERS == ("input", "task", "facts", "registered", "loop", "result")


def test_each_layer_overrides_the_ones_below() -> None:
    scope = _host_scope(registered={"x": "registered"})
    assert scope.merged()["x"] == "registered"
    assert scope.child(x="item").merged()["x"] == "item"
    assert scope.child(x="item").with_layer("result", {"x": "result"}).merged()["x"] == "result"
    assert scope.merged()["only_input"] == 1 and scope.merged()["only_task"] == 2


def test_a_layer_takes_its_place_by_name_not_by_the_order_it_was_added() -> None:
    added_late = VarScope({"facts": {"x": "fact"}}).with_layer("input", {"x": "input"})
    assert added_late.names == ("input", "facts")
    assert added_late.merged()["x"] == "fact"


def test_templates_see_vars_and_hostvars_over_everything() -> None:
    scope = _host_scope().with_layer("task", {"hostvars": "shadowed", "y": 3})
    variables = scope.variables()
    assert variables["hostvars"] == {"h1": {"inventory_hostname": "h1"}}
    assert variables["vars"]["y"] == 3
    assert render("{{ vars['y'] + 1 }}", variables) == 4
    # Without hostvars (a run-level scope) there are no magic names.
    assert "vars" not in VarScope({"play": {"a": 1}}).variables()


def test_extending_does_not_change_the_parent() -> None:
    parent = _host_scope()
    before = dict(parent.variables())
    child = parent.child(item="a").with_layer("result", {"result": {"rc": 0}, "x": "result"})
    parent.with_layer("task", {"x": "other task"})
    assert child.merged()["item"] == "a" and child.merged()["x"] == "result"
    assert parent.names == ("input", "task", "facts", "registered")
    assert parent.variables() == before
    assert "item" not in parent.merged() and "result" not in parent.merged()
    assert parent.layer("task") == {"x": "task", "only_task": 2}


def test_replacing_a_layer_drops_the_old_one_in_the_new_scope_only() -> None:
    parent = _host_scope()
    replaced = parent.with_layer("task", {"z": 9})
    assert "only_task" not in replaced.merged() and replaced.merged()["z"] == 9
    assert parent.merged()["only_task"] == 2 and "z" not in parent.merged()


def test_layers_are_live_until_read_and_renewed_after_a_change() -> None:
    facts: dict[str, Any] = {}
    scope = _host_scope(facts=facts)
    facts["late"] = "set before the first read"
    assert scope.variables()["late"] == "set before the first read"
    facts["later"] = "set after"
    # A scope is read once; a renewed (or extended) one sees the change.
    assert "later" not in scope.variables()
    assert scope.renewed().variables()["later"] == "set after"
    assert scope.child(item=1).variables()["later"] == "set after"


def test_an_unknown_layer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown variable layer 'play_vars'"):
        VarScope({"play_vars": {}})
    with pytest.raises(ValueError, match="unknown variable layer"):
        VarScope().with_layer("nope", {})


def test_a_runs_layers_merge_a_hosts_input_in_the_order_the_run_uses() -> None:
    def layer(name: str) -> dict[str, Any]:
        return {"x": name, f"only_{name}": True}

    scope = VarScope({name: layer(name) for name in reversed(RUN_LAYERS)})
    assert scope.names == RUN_LAYERS
    assert scope.merged()["x"] == "call"
    assert scope.with_layer("call", {}).merged()["x"] == "run_magic"
    # Facts of earlier stages sit above the stage's vars and below extra vars (Ansible).
    without_top = VarScope({n: layer(n) for n in ("play", "stage", "stage_facts", "extra_vars")})
    assert without_top.merged()["x"] == "extra_vars"
    assert without_top.with_layer("extra_vars", {}).merged()["x"] == "stage_facts"
    assert all(scope.merged()[f"only_{name}"] for name in RUN_LAYERS)
