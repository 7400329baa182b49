"""Variable scope: the variables a template sees, as a stack of named layers.

Precedence, lowest first, as Ansible orders it. A run assembles each host's input from:

1. `groups`       the inventory's groups (only where no layer above names `groups`)
2. `inventory`    the host's inventory variables (`hostvars[host]`)
3. `play`         the runbook's `vars`
4. `stage`        the stage's `vars`
5. `stage_facts`  facts the host set in earlier stages (above play vars, below extra vars)
6. `extra_vars`   `--extra-vars` / the request's variables
7. `run_magic`    `run` and `stage`, which the engine alone writes
8. `call`         what one call adds (e.g. a rollback's trigger)

and a host, running one task, stacks on that input:

9.  `input`       the host's input (layers 1-8, merged by the run)
10. `task`        the enclosing blocks' `vars`, then the task's own `vars`
11. `facts`       `set_fact` results of this stage
12. `registered`  registered results (and `ansible_failed_*` in a rescue)
13. `loop`        the loop variable of the current item
14. `result`      the task's own result (`result` and its `register` name), for
                  `until`, `changed_when` and `failed_when`

and over everything the magic names `vars` (every variable above, merged) and
`hostvars` (every host's inventory variables).

A scope is built once per task attempt and extended per loop item or result: extending
stacks one layer on the parent (no copy of any variable), and never changes the parent.
Layers are held by reference: the host's facts and registered results are its live
dictionaries, so a loop item sees the facts an earlier item set. A scope merges its layers
once, the first time a template reads it; take a new scope (extending is cheap) after a
layer changed, as the engine does for each attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Layers a run merges into a host's input (see the list above).
RUN_LAYERS: tuple[str, ...] = (
    "groups",
    "inventory",
    "play",
    "stage",
    "stage_facts",
    "extra_vars",
    "run_magic",
    "call",
)
# Layers a host stacks on its input while running a task.
HOST_LAYERS: tuple[str, ...] = ("input", "task", "facts", "registered", "loop", "result")
# Every layer, lowest precedence first.
PRECEDENCE: tuple[str, ...] = (*RUN_LAYERS, *HOST_LAYERS)
_RANK = {name: rank for rank, name in enumerate(PRECEDENCE)}


class VarScope:
    """Named layers of variables, each above the ones before it in `PRECEDENCE`.

    Immutable: `with_layer` and `child` return a new scope that shares the parent's layers.
    `variables()` is what templates see.
    """

    __slots__ = ("_hostvars", "_layers", "_merged", "_variables")

    def __init__(
        self,
        layers: Mapping[str, Mapping[str, Any]] | None = None,
        hostvars: Mapping[str, Any] | None = None,
    ) -> None:
        items = sorted((layers or {}).items(), key=lambda item: _rank(item[0]))
        self._layers: tuple[tuple[str, Mapping[str, Any]], ...] = tuple(items)
        self._hostvars = hostvars
        self._merged: dict[str, Any] | None = None
        self._variables: dict[str, Any] | None = None

    # --- building ---------------------------------------------------------------------------
    def with_layer(self, name: str, values: Mapping[str, Any]) -> VarScope:
        """This scope with layer `name` set to `values` (replacing a layer of that name), placed
        by its precedence whatever the order layers were added in. The parent is unchanged."""
        _rank(name)
        layers = {n: v for n, v in self._layers if n != name}
        layers[name] = values
        return VarScope(layers, self._hostvars)

    def child(self, **item: Any) -> VarScope:
        """This scope with a loop item's variables (`loop_var=item`)."""
        return self.with_layer("loop", item)

    def renewed(self) -> VarScope:
        """The same layers, read afresh (after a live layer, such as the facts, changed)."""
        return VarScope(dict(self._layers), self._hostvars)

    # --- reading ----------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """The layers present, lowest precedence first."""
        return tuple(name for name, _ in self._layers)

    def layer(self, name: str) -> Mapping[str, Any]:
        for n, values in self._layers:
            if n == name:
                return values
        raise KeyError(name)

    def merged(self) -> dict[str, Any]:
        """Every layer's variables, the higher layer winning, without the magic names. Read
        once per scope and shared by later reads: do not change it."""
        if self._merged is None:
            merged: dict[str, Any] = {}
            for _, values in self._layers:
                merged.update(values)
            self._merged = merged
        return self._merged

    def variables(self) -> dict[str, Any]:
        """What templates see: the merged variables, then `vars` (all of them) and `hostvars`
        when the scope has hostvars. Read once per scope and shared: do not change it
        (templates cannot: their sandbox is immutable)."""
        if self._variables is None:
            merged = self.merged()
            if self._hostvars is None:
                self._variables = merged
            else:
                self._variables = {**merged, "vars": merged, "hostvars": self._hostvars}
        return self._variables

    def __repr__(self) -> str:
        return f"VarScope({list(self.names)})"


def _rank(name: str) -> int:
    if name not in _RANK:
        raise ValueError(f"unknown variable layer {name!r}; layers are {', '.join(PRECEDENCE)}")
    return _RANK[name]


__all__ = ["HOST_LAYERS", "PRECEDENCE", "RUN_LAYERS", "VarScope"]
