"""The least OpenAPI v3 that kubectl needs: `kubectl create -f` and `apply -f` look up each
kind's PATCH operation to learn whether the server validates fields itself (the
`fieldValidation` query parameter). Without it they try to download OpenAPI v2 for
client-side validation and fail. Schemas are not served (`kubectl explain` has nothing)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pitstop_sim.resources import ResourceRegistry, ResourceType

Obj = dict[str, Any]

_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def root(registry: ResourceRegistry) -> Obj:
    paths: Obj = {}
    for group, version in sorted({(rt.group, rt.version) for rt in registry.all()}):
        doc = group_version(registry, group, version)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
        paths[_gv_path(group, version)] = {
            "serverRelativeURL": f"/openapi/v3/{_gv_path(group, version)}?hash={digest}"
        }
    return {"paths": paths}


def _operation(rt: ResourceType, action: str) -> Obj:
    return {
        "operationId": f"{action}{rt.kind}",
        "parameters": [
            {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
            for name in _QUERY_PARAMS
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
    }


def group_version(registry: ResourceRegistry, group: str, version: str) -> Obj | None:
    types = [rt for rt in registry.all() if rt.group == group and rt.version == version]
    if not types:
        return None
    paths: Obj = {}
    for rt in sorted(types, key=lambda t: t.plural):
        base = f"/{_gv_path(group, version)}/" + ("namespaces/{namespace}/" if rt.namespaced else "")
        paths[f"{base}{rt.plural}"] = {"post": _operation(rt, "post")}
        paths[f"{base}{rt.plural}/{{name}}"] = {
            "put": _operation(rt, "put"),
            "patch": _operation(rt, "patch"),
        }
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.4"}, "paths": paths}
