"""What every simulated controller looks like: it observes store events (cheaply marking
work), then syncs the marked work when the manager runs it. Syncs write through the store,
which produces more events; the manager loops until nothing is marked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pitstop.kube.objects import meta, name_of
from pitstop_sim.context import SimContext
from pitstop_sim.store import WatchEvent

if TYPE_CHECKING:
    from pitstop_sim.api import KubeApi
    from pitstop_sim.controllers.manager import ControllerManager

Obj = dict[str, Any]


def key_of(obj: Obj) -> tuple[str, str]:
    return (meta(obj).get("namespace") or "", name_of(obj))


class Controller:
    name = "controller"

    def __init__(self, ctx: SimContext, api: KubeApi, manager: ControllerManager) -> None:
        self.ctx = ctx
        self.api = api
        self.manager = manager

    def observe(self, event: WatchEvent) -> None:
        """Mark work for `event`; must not write to the store."""

    def pending(self) -> bool:
        return False

    def sync(self) -> None:
        """Do the marked work."""

    def resync(self) -> None:
        """Mark everything (at start)."""

    def later(self, sim_seconds: float, callback: Any) -> None:
        """Run `callback` after simulated time, then let the controllers react to what it wrote."""

        def run() -> None:
            if self.manager.stopped:
                return
            callback()
            self.manager.wake()

        self.ctx.clock.call_later(sim_seconds, run)
