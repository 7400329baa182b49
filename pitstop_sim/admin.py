"""`/_sim/` admin endpoints: counters, timeline, reboots, node profiles, faults, PDB blocks.

No token is needed (the simulator listens on loopback); all answers are JSON.

  GET    /_sim/counters                      CountersSnapshot
  POST   /_sim/counters/reset                also zeroes /_sim/writes
  GET    /_sim/writes?resource=nodes[&annotation=KEY]
                                             WriteCounts: per object of the resource (a plural,
                                             default nodes) written since serving began or the
                                             last reset, the changes stored for it (create,
                                             update, delete; by any client or controller) and,
                                             per annotation key, how often its value changed
                                             (set, changed, removed). A patch that stores
                                             nothing new is no change. With `annotation`, only
                                             objects whose value of that key changed, with that
                                             key's count: "every node annotated exactly once"
                                             is `len(objects) == nodes` and every count 1.
                                             Kept by a store listener (pitstop_sim/writes.py),
                                             a few dict operations per write, so it stays cheap
                                             at 10,000 nodes; 404 for a resource not served.
  GET    /_sim/timeline                      [TimelineEvent]
  GET    /_sim/unavailability                [DomainUnavailability]
  POST   /_sim/reboot/{node}                 reboot a node (NotReady, then Ready)
  GET    /_sim/nodes/{node}/profile          NodeProfile
  POST   /_sim/nodes/{node}/profile          ProfileUpdate -> NodeProfile
  GET    /_sim/nodes/{node}/ssh              SshEndpointInfo (port, host key, processes, faults)
  POST   /_sim/nodes/{node}/ssh              SshNodeFaults -> SshEndpointInfo (replaces the node's SSH faults)
  GET    /_sim/faults                        injected faults and how often they fired
  POST   /_sim/faults                        {"api_error": ApiErrorFault} or {"latency": LatencyFault}
  DELETE /_sim/faults                        remove all faults
  POST   /_sim/pdbs/{namespace}/{name}/block     the PDB never allows a disruption
  DELETE /_sim/pdbs/{namespace}/{name}/block     back to its real budget
  GET    /_sim/state                         object counts, resourceVersion, simulated time
  POST   /_sim/nodes/{node}/xid              XidInjection -> NodeHealth (see pitstop_sim.metrics.routes)
  DELETE /_sim/nodes/{node}/xid              clear the node's Xids
  GET    /_sim/nodes/{node}/telemetry        NodeTelemetry (GPU temperature, utilization, clocks, etcd fsync)
  POST   /_sim/nodes/{node}/telemetry        TelemetryUpdate -> NodeTelemetry
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from pitstop_sim.counters import unavailability
from pitstop_sim.metrics import routes as metrics_routes
from pitstop_sim.metrics.telemetry import TelemetryUpdate
from pitstop_sim.models import ApiErrorFault, LatencyFault, ProfileUpdate
from pitstop_sim.ssh.models import SshNodeFaults

if TYPE_CHECKING:
    from pitstop_sim.cluster import SimControl


def _answer(body: Any, status: int = 200) -> web.Response:
    if isinstance(body, BaseModel):
        text = body.model_dump_json()
    elif isinstance(body, list) and all(isinstance(b, BaseModel) for b in body):
        text = "[" + ",".join(b.model_dump_json() for b in body) + "]"
    else:
        text = json.dumps(body)
    return web.Response(text=text, status=status, content_type="application/json")


def _problem(message: str, status: int = 400) -> web.Response:
    return _answer({"error": message}, status)


class AdminRoutes:
    def __init__(self, control: SimControl) -> None:
        self.control = control

    async def handle(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p][1:]
        method = request.method
        control = self.control
        try:
            if parts == ["counters"] and method == "GET":
                return _answer(control.counters())
            if parts == ["counters", "reset"] and method == "POST":
                control.reset_counters()
                return _answer({"reset": True})
            if parts == ["writes"] and method == "GET":
                return _answer(
                    control.writes(
                        request.query.get("resource", "nodes"), request.query.get("annotation") or None
                    )
                )
            if parts == ["timeline"] and method == "GET":
                return _answer(control.timeline())
            if parts == ["unavailability"] and method == "GET":
                return _answer(unavailability(control.timeline()))
            if len(parts) == 2 and parts[0] == "reboot" and method == "POST":
                control.reboot(parts[1])
                return _answer({"rebooting": parts[1]}, 202)
            if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "profile":
                if method == "GET":
                    return _answer(control.node_profile(parts[1]))
                if method == "POST":
                    update = ProfileUpdate.model_validate(await request.json())
                    return _answer(control.set_node_profile(parts[1], update))
            if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "ssh":
                if method == "GET":
                    return _answer(control.ssh_info(parts[1]))
                if method == "POST":
                    faults = SshNodeFaults.model_validate(await request.json())
                    return _answer(control.set_ssh_faults(parts[1], faults))
            if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "xid":
                if method == "POST":
                    injection = metrics_routes.XidInjection.model_validate(await request.json())
                    return _answer(metrics_routes.inject_xid(control, parts[1], injection), 201)
                if method == "DELETE":
                    return _answer(metrics_routes.clear_xids(control, parts[1]))
            if len(parts) == 3 and parts[0] == "nodes" and parts[2] == "telemetry":
                if method == "GET":
                    return _answer(metrics_routes.node_telemetry(control, parts[1]))
                if method == "POST":
                    telemetry = TelemetryUpdate.model_validate(await request.json())
                    return _answer(metrics_routes.set_node_telemetry(control, parts[1], telemetry))
            if parts == ["faults"]:
                if method == "GET":
                    return _answer(control.faults())
                if method == "DELETE":
                    control.clear_faults()
                    return _answer({"cleared": True})
                if method == "POST":
                    body = await request.json()
                    if (
                        not isinstance(body, dict)
                        or len(body) != 1
                        or next(iter(body)) not in ("api_error", "latency")
                    ):
                        return _problem('send {"api_error": {...}} or {"latency": {...}}')
                    fault: ApiErrorFault | LatencyFault
                    if "api_error" in body:
                        fault = ApiErrorFault.model_validate(body["api_error"])
                    else:
                        fault = LatencyFault.model_validate(body["latency"])
                    return _answer({"index": control.add_fault(fault)}, 201)
            if (
                len(parts) == 4
                and parts[0] == "pdbs"
                and parts[3] == "block"
                and method in ("POST", "DELETE")
            ):
                control.block_pdb(parts[1], parts[2], blocked=method == "POST")
                return _answer({"pdb": f"{parts[1]}/{parts[2]}", "blocked": method == "POST"})
            if parts == ["state"] and method == "GET":
                return _answer(control.state())
        except KeyError as exc:
            return _problem(str(exc.args[0]) if exc.args else "not found", 404)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            return _problem(f"invalid {where}: {first['msg']}", 422)
        except (ValueError, json.JSONDecodeError) as exc:
            return _problem(str(exc))
        return _problem(f"no admin endpoint {method} {request.path} (see GET /_sim/state)", 404)
