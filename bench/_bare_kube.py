"""The fleet bench's module work done the way a hand-written Temporal worker would do it:
for `bench/_bare_fleet.py` when it runs with `BARE_KUBECONFIG` and `BARE_NODES` set.

Each task is what the engine's `kube.annotate` does for one node on the wire: GET the node,
then a JSON merge PATCH of one annotation when its value differs (the GET is what lets a task
report `changed`, as the module does). One official `kubernetes` ApiClient per process, raw
JSON (no model deserialization), a sync activity on the worker's thread pool like the
engine's kube modules. Everything pitstop adds on top (policy, per-call checks, templating,
the run's bookkeeping) is what the comparison measures.

Kept out of `_bare_fleet.py`: the sandbox re-imports a workflow's module per workflow
instance, and this one imports the Kubernetes client.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from _bare_fleet import AnnotateWork
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from temporalio import activity

MERGE_PATCH = "application/merge-patch+json"
_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


def _api() -> tuple[k8s.ApiClient, list[str]]:
    with _LOCK:
        if not _STATE:
            configuration = k8s.Configuration()
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=os.environ["BARE_KUBECONFIG"], client_configuration=configuration
            )
            _STATE["api"] = k8s.ApiClient(configuration)
            with open(os.environ["BARE_NODES"], encoding="utf-8") as names:
                _STATE["nodes"] = names.read().split()
        return _STATE["api"], _STATE["nodes"]


def _call(api: k8s.ApiClient, method: str, path: str, body: Any = None) -> Any:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = MERGE_PATCH
    method_, url, header_params, body_, _ = api.param_serialize(
        method=method, resource_path=path, header_params=headers, body=body, auth_settings=["BearerToken"]
    )
    response = api.call_api(method_, url, header_params, body_, _request_timeout=(10.0, 60.0))
    data = response.read()
    if not 200 <= response.status <= 299:
        raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
    return json.loads(data)


@activity.defn(name="bench.bare_annotate")
def bare_annotate(work: AnnotateWork) -> bool:
    api, nodes = _api()
    path = f"/api/v1/nodes/{nodes[work.index]}"
    node = _call(api, "GET", path)
    if (node["metadata"].get("annotations") or {}).get(work.key) == work.value:
        return False
    _call(api, "PATCH", path, {"metadata": {"annotations": {work.key: work.value}}})
    return True
