"""HTTP endpoints of the simulator's exporters and the admin endpoints that move their figures.

Scrape endpoints (no token, like /_sim/; text format 0.0.4), one per exporter as a real
cluster has them, so a scrape config looks like a real one:

  GET /metrics/dcgm                dcgm-exporter, every Ready GPU node (Hostname tells them apart)
  GET /metrics/dcgm/{node}         dcgm-exporter of one node (the DaemonSet pod on that node;
                                   503 while the node is not Ready, so its target is down)
  GET /metrics/kube-state          kube-state-metrics (one per cluster)
  GET /metrics/etcd/{node}         the etcd member on a control-plane node

Admin endpoints:

  POST   /_sim/nodes/{node}/xid        XidInjection -> NodeHealth: GPU `gpu` raises Xid `xid`
                                       (DCGM_FI_DEV_XID_ERRORS, dmesg and dcgmi dmon show it)
  DELETE /_sim/nodes/{node}/xid        the node's Xids are gone (driver reloaded, GPUs reset)
  GET    /_sim/nodes/{node}/telemetry  NodeTelemetry
  POST   /_sim/nodes/{node}/telemetry  TelemetryUpdate -> NodeTelemetry
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from pitstop_sim.metrics import dcgm, etcd, kube_state
from pitstop_sim.metrics.exposition import CONTENT_TYPE, render
from pitstop_sim.metrics.telemetry import NodeTelemetry, TelemetryUpdate
from pitstop_sim.models import NodeHealth, ProfileUpdate

if TYPE_CHECKING:
    from pitstop_sim.cluster import SimControl
    from pitstop_sim.context import SimContext

SCRAPE_PREFIX = "/metrics"


class XidInjection(BaseModel):
    """Body of `POST /_sim/nodes/{node}/xid`."""

    model_config = ConfigDict(extra="forbid")

    xid: int = Field(ge=1, description="The Xid code, e.g. 79 (GPU has fallen off the bus), 48, 94.")
    gpu: int = Field(default=0, ge=0, description="The GPU's index on the node.")


def _text(body: str) -> web.Response:
    response = web.Response(text=body)
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


def scrape(ctx: SimContext, path: str) -> web.Response:
    """Answer a scrape of `path` (under /metrics)."""
    parts = [p for p in path.split("/") if p][1:]
    try:
        if parts == ["dcgm"]:
            return _text(render(dcgm.families(ctx, ctx.telemetry)))
        if len(parts) == 2 and parts[0] == "dcgm":
            if parts[1] not in ctx.profiles:
                raise KeyError(f"node {parts[1]!r} not found")
            if not dcgm.node_ready(ctx.store.get("nodes", None, parts[1])):
                # The node's exporter pod is not running (rebooting, NotReady): its target is down.
                return web.Response(status=503, text=f"node {parts[1]} is not Ready\n")
            return _text(render(dcgm.families(ctx, ctx.telemetry, [parts[1]])))
        if parts == ["kube-state"]:
            return _text(render(kube_state.families(ctx)))
        if len(parts) == 2 and parts[0] == "etcd":
            return _text(render(etcd.families(ctx, ctx.telemetry, parts[1])))
    except KeyError as exc:
        return web.Response(status=404, text=f"{exc.args[0]}\n")
    return web.Response(
        status=404,
        text="scrape /metrics/dcgm, /metrics/dcgm/{node}, /metrics/kube-state or /metrics/etcd/{node}\n",
    )


def inject_xid(control: SimControl, node: str, injection: XidInjection) -> NodeHealth:
    """Record Xid `injection.xid` on the node's GPU (NodeHealth.xid_errors: the i-th on GPU i)."""
    profile = control.node_profile(node)
    if injection.gpu >= profile.gpus:
        raise ValueError(f"node {node} has {profile.gpus} GPUs; there is no GPU {injection.gpu}")
    xids = list(profile.health.xid_errors)
    if injection.gpu > len(xids):
        raise ValueError(
            f"Xids are kept per GPU in index order (NodeHealth.xid_errors); the next GPU of {node} "
            f"that can get one is {len(xids)}"
        )
    if injection.gpu == len(xids):
        xids.append(injection.xid)
    else:
        xids[injection.gpu] = injection.xid
    health = profile.health.model_copy(update={"xid_errors": xids})
    return control.set_node_profile(node, ProfileUpdate(health=health)).health


def clear_xids(control: SimControl, node: str) -> NodeHealth:
    health = control.node_profile(node).health.model_copy(update={"xid_errors": []})
    return control.set_node_profile(node, ProfileUpdate(health=health)).health


def node_telemetry(control: SimControl, node: str) -> NodeTelemetry:
    control.node_profile(node)  # KeyError for an unknown node
    return control.ctx.telemetry.node(node).model_copy(deep=True)


def set_node_telemetry(control: SimControl, node: str, update: TelemetryUpdate) -> NodeTelemetry:
    profile = control.node_profile(node)
    for change in update.gpus:
        if change.gpu is not None and change.gpu >= profile.gpus:
            raise ValueError(f"node {node} has {profile.gpus} GPUs; there is no GPU {change.gpu}")
    if update.etcd_wal_fsync_seconds is not None and profile.role != "control-plane":
        raise ValueError(f"node {node} is not a control-plane node; it runs no etcd member")
    control.ctx.telemetry.node(node).apply(update)
    return node_telemetry(control, node)
