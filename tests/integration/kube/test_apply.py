"""kube.apply against the rehearsal cluster, and interop with the real kubectl: whoever applied
last, the other one sees the same manifests as "unchanged". Client-side apply here; server-side
apply (the default) in test_apply_server_side.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.exceptions import ApplicationError

from activities.kube.apply import apply
from activities.kube.client import Kube, api_client
from pitstop.kube.apply import LAST_APPLIED, apply_patch, go_json, last_applied_of
from pitstop.runbook.inventory import ClusterConfig
from pitstop_sim import SimCluster
from tests.integration.kube.conftest import ModuleRunner, StartSim
from tests.integration.sim.conftest import Kubectl, kubectl_for

__all__ = ["kubectl_for"]

Obj = dict[str, Any]
CLUSTER = """
cluster: {nodes: 2, domains: 2}
timing: {time_scale: 20}
"""
# The custom resource comes before its CRD and namespace: apply orders them.
WIDGETS = """\
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: team}
spec: {size: 3, tags: [a, b]}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: v1
kind: Namespace
metadata: {name: team}
"""
APP = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team
  annotations: {note: "a<b&c"}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: c
          image: registry.local/web:1
          env: [{name: A, value: "1"}, {name: B, value: "2"}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: fast, level: "3"}
"""


# Client-side apply (`server_side: false`), byte for byte as `kubectl apply` without --server-side.
CSA = {"server_side": False}


def kube(sim: SimCluster) -> Kube:
    sim.register("test")  # the worker holds the cluster's kubeconfig; the inventory names it
    return Kube(api_client(ClusterConfig(name="test")))


def write(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def actions(result: Any) -> dict[str, str]:
    return {f"{o['kind']}/{o['name']}": o["action"] for o in result.data["objects"]}


def test_client_side_apply_creates_in_order_then_is_idempotent_and_kubectl_agrees(
    start_sim: StartSim,
    module_runner: ModuleRunner,
    kubectl_for: Callable[[SimCluster], Kubectl],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = start_sim(CLUSTER)
    kubectl = kubectl_for(sim)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    write(tmp_path / "manifests", {"a-widgets.yaml": WIDGETS, "b-app.yaml": APP})

    first = module_runner(apply, sim, {**CSA, "src": "manifests", "namespace": "team"})
    assert first.changed is True
    assert [o["kind"] for o in first.data["objects"]] == [
        "Namespace",
        "CustomResourceDefinition",
        "Widget",
        "Deployment",
        "ConfigMap",
    ]
    assert set(actions(first).values()) == {"created"}
    assert first.data["objects"][2]["source"] == f"{tmp_path}/manifests/a-widgets.yaml document 0"
    assert first.msg == "applied 5 objects: 5 created"
    assert kube(sim).get("/api/v1/namespaces/team/configmaps/settings")["data"] == {
        "mode": "fast",
        "level": "3",
    }

    again = module_runner(apply, sim, {**CSA, "src": "manifests", "namespace": "team"})
    assert (again.changed, set(actions(again).values())) == (False, {"unchanged"})

    # kubectl reads pitstop's last-applied annotation as its own.
    out = kubectl("apply", "-n", "team", "-f", str(tmp_path / "manifests"))
    assert sorted(out.splitlines()) == [
        "configmap/settings unchanged",
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com unchanged",
        "deployment.apps/web unchanged",
        "namespace/team unchanged",
        "widget.example.com/w1 unchanged",
    ]

    # A changed manifest: fields it drops are removed (three-way), others' fields stay.
    kube(sim).patch("/api/v1/namespaces/team/configmaps/settings", {"metadata": {"labels": {"owner": "ops"}}})
    write(
        tmp_path / "manifests",
        {
            "a-widgets.yaml": WIDGETS.replace("spec: {size: 3, tags: [a, b]}", "spec: {tags: [c]}"),
            "b-app.yaml": APP.replace('{name: A, value: "1"}, ', "")
            .replace("web:1", "web:2")
            .replace('level: "3"', 'speed: "9"'),
        },
    )
    changed = module_runner(apply, sim, {**CSA, "src": "manifests", "namespace": "team"})
    assert changed.changed is True
    assert actions(changed) == {
        "Namespace/team": "unchanged",
        "CustomResourceDefinition/widgets.example.com": "unchanged",
        "Widget/w1": "configured",
        "Deployment/web": "configured",
        "ConfigMap/settings": "configured",
    }
    api = kube(sim)
    assert api.get("/apis/example.com/v1/namespaces/team/widgets/w1")["spec"] == {"tags": ["c"]}
    container = api.get("/apis/apps/v1/namespaces/team/deployments/web")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert (container["image"], container["env"]) == ("registry.local/web:2", [{"name": "B", "value": "2"}])
    settings = api.get("/api/v1/namespaces/team/configmaps/settings")
    assert settings["data"] == {"mode": "fast", "speed": "9"}
    assert settings["metadata"]["labels"] == {"owner": "ops"}
    assert "unchanged" in kubectl("apply", "-n", "team", "-f", str(tmp_path / "manifests" / "b-app.yaml"))
    assert "configured" not in kubectl("apply", "-n", "team", "-f", str(tmp_path / "manifests"))

    # And the other way round: after kubectl applies a change, pitstop has nothing to do.
    write(tmp_path / "manifests", {"b-app.yaml": APP})
    kubectl("apply", "-n", "team", "-f", str(tmp_path / "manifests" / "b-app.yaml"))
    after_kubectl = module_runner(apply, sim, {**CSA, "src": "manifests/b-app.yaml", "namespace": "team"})
    assert (after_kubectl.changed, set(actions(after_kubectl).values())) == (False, {"unchanged"})


def test_check_mode_dry_runs_shows_the_diff_and_changes_nothing(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = start_sim(CLUSTER)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    write(tmp_path, {"widgets.yaml": WIDGETS})
    planned = module_runner(apply, sim, {"src": "widgets.yaml"}, check_mode=True)
    assert planned.changed is True and planned.msg == "would apply 3 objects: 3 created"
    assert (
        planned.diff is not None
        and "+++ CustomResourceDefinition widgets.example.com (after)" in planned.diff
    )
    api = kube(sim)
    assert api.get_or_none("/api/v1/namespaces/team") is None
    assert (
        api.get_or_none("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com") is None
    )

    # Inline definitions, then a dry-run change of one field.
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "1"}}
    module_runner(apply, sim, {"definition": config_map})
    edited = {**config_map, "data": {"k": "2"}}
    preview = module_runner(apply, sim, {"definition": [edited]}, check_mode=True)
    assert actions(preview) == {"ConfigMap/c": "configured"}
    assert preview.diff is not None and '-    "k": "1"' in preview.diff and '+    "k": "2"' in preview.diff
    assert api.get("/api/v1/namespaces/default/configmaps/c")["data"] == {"k": "1"}


def test_bad_manifests_and_arguments_are_explained(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = start_sim(CLUSTER)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    unknown = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"
        "---\napiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: x}\n"
    )
    write(
        tmp_path,
        {
            "unknown.yaml": unknown,
            "group.yaml": "apiVersion: example.org/v9\nkind: Thing\nmetadata: {name: t}\n",
        },
    )
    write(tmp_path, {"broken.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [x\n"})
    write(tmp_path / "empty", {})
    cases: list[tuple[Obj, str]] = [
        (
            {"src": "unknown.yaml"},
            f"kube.apply: {tmp_path}/unknown.yaml document 1: rehearsal serves no kind 'Deploymnet' "
            "in apps/v1 (kinds: ",
        ),
        (
            {"src": "group.yaml"},
            f"kube.apply: {tmp_path}/group.yaml document 0: rehearsal does not serve apiVersion "
            "'example.org/v9' (kind Thing); is its CRD installed?",
        ),
        (
            {"src": "broken.yaml"},
            f"kube.apply: {tmp_path}/broken.yaml:5:1: invalid YAML: while parsing a flow sequence",
        ),
        ({"src": "missing.yaml"}, f"kube.apply: {tmp_path}/missing.yaml: no such file or directory"),
        (
            {"src": "empty"},
            f"kube.apply: {tmp_path}/empty: no manifest files (*.yaml, *.yml, *.json) in this directory",
        ),
        (
            {},
            "kube.apply: args: Value error, give exactly one of `src` (files or directories) or "
            "`definition` (inline)",
        ),
        ({"src": "unknown.yaml", "prune": True}, "kube.apply: prune: Input should be False"),
    ]
    for args, message in cases:
        with pytest.raises(ApplicationError) as error:
            module_runner(apply, sim, args)
        assert (error.value.type, error.value.message[: len(message)]) == ("InvalidArgs", message)
    # Kinds are resolved before anything is written: the valid first document was not applied.
    assert kube(sim).get_or_none("/api/v1/namespaces/default/configmaps/ok") is None


@dataclass
class Interop:
    """The rehearsal cluster with namespace `team`, the real kubectl on it, and a runbook
    directory for pitstop's manifests."""

    sim: SimCluster
    kubectl: Kubectl
    root: Path

    def write(self, name: str, text: str) -> Path:
        write(self.root, {name: text})
        return self.root / name


@pytest.fixture
def interop(
    start_sim: StartSim,
    kubectl_for: Callable[[SimCluster], Kubectl],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Interop:
    sim = start_sim(CLUSTER)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    setup = Interop(sim, kubectl_for(sim), tmp_path)
    setup.kubectl(
        "apply",
        "-f",
        str(setup.write("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n")),
    )
    return setup


def test_numbers_in_the_annotation_are_written_as_kubectl_writes_them(
    start_sim: StartSim,
    module_runner: ModuleRunner,
    kubectl_for: Callable[[SimCluster], Kubectl],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kubectl (Go) writes float64 100.0 as `100`, 1e-05 as `0.00001` and 1e-07 as `1e-7`;
    # Python's repr wrote `100.0`, `1e-05`, `1e-07`, so each tool saw the other's apply as a change.
    sim = start_sim(CLUSTER)
    kubectl = kubectl_for(sim)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    numbers = "spec: {ratio: 100.0, small: 0.00001, tiny: 1.0e-7, big: 1.5e+17, half: 0.5, count: 3}"
    widget = WIDGETS.replace("spec: {size: 3, tags: [a, b]}", numbers)
    crd_and_namespace = widget.split("---\n", 1)[1]
    write(
        tmp_path / "manifests", {"a-crd.yaml": crd_and_namespace, "b-widget.yaml": widget.split("---\n")[0]}
    )
    module_runner(apply, sim, {**CSA, "src": "manifests/a-crd.yaml"})
    kubectl("apply", "-f", str(tmp_path / "manifests" / "b-widget.yaml"))
    path = "/apis/example.com/v1/namespaces/team/widgets/w1"
    by_kubectl = kube(sim).get(path)["metadata"]["annotations"][LAST_APPLIED]
    for written in ('"ratio":100,', '"small":0.00001', '"tiny":1e-7', '"big":150000000000000000,'):
        assert written in by_kubectl, by_kubectl

    again = module_runner(apply, sim, {**CSA, "src": "manifests/b-widget.yaml"})
    assert (again.changed, actions(again)) == (False, {"Widget/w1": "unchanged"})
    assert kube(sim).get(path)["metadata"]["annotations"][LAST_APPLIED] == by_kubectl
    manifest = yaml.safe_load(widget.split("---\n", 1)[0])
    assert last_applied_of(manifest) == by_kubectl


ROLLING = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: team}
spec:
  replicas: 1
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: c
          image: registry.local/web:1
          env: [{name: A, value: "1"}, {name: B, value: "2"}, {name: C, value: "$(A)"}]
"""
# Recreate drops the rollingUpdate member of the union; B now comes first (C refers to A).
RECREATE = (
    ROLLING.replace("type: RollingUpdate", "type: Recreate")
    .replace("    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}\n", "")
    .replace('[{name: A, value: "1"}, {name: B, value: "2"}', '[{name: B, value: "2"}, {name: A, value: "1"}')
)


def kubectl_patch_body(stderr: str) -> str:
    """The PATCH body in `kubectl -v=9` output (klog quotes it like a Go string)."""
    bodies = [line.split(' body="', 1)[1] for line in stderr.splitlines() if '"Request Body" body="{' in line]
    assert bodies, stderr[-2000:]
    quoted = bodies[-1].rstrip()
    return str(json.loads('"' + quoted[:-1] + '"'))


def test_the_patch_is_the_one_kubectl_sends_with_retain_keys_and_element_order(
    interop: Interop, module_runner: ModuleRunner
) -> None:
    sim, kubectl = interop.sim, interop.kubectl
    kubectl("apply", "-f", str(interop.write("a.yaml", ROLLING)))
    recreate = interop.write("b.yaml", RECREATE)
    # What the real kubectl sends for this change (a server-side dry run changes nothing).
    sent = kubectl.run("apply", "--dry-run=server", "-v=9", "-f", str(recreate)).stderr
    path = "/apis/apps/v1/namespaces/team/deployments/web"
    live = kube(sim).get(path)
    patch, kind = apply_patch(yaml.safe_load(RECREATE), live)
    assert kind == "strategic"
    assert go_json(patch) == kubectl_patch_body(sent)
    assert patch["spec"]["strategy"] == {"$retainKeys": ["type"], "rollingUpdate": None, "type": "Recreate"}

    applied = module_runner(apply, sim, {**CSA, "src": "b.yaml"})
    assert actions(applied) == {"Deployment/web": "configured"}
    after = kube(sim).get(path)["spec"]
    assert after["strategy"] == {"type": "Recreate"}
    assert [e["name"] for e in after["template"]["spec"]["containers"][0]["env"]] == ["B", "A", "C"]
    assert "deployment.apps/web unchanged" in kubectl("apply", "-f", str(recreate))
    again = module_runner(apply, sim, {**CSA, "src": "b.yaml"})
    assert (again.changed, actions(again)) == (False, {"Deployment/web": "unchanged"})


DNS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: dns, namespace: team}
spec:
  selector: {matchLabels: {app: dns}}
  template:
    metadata: {labels: {app: dns}}
    spec:
      containers:
        - name: c
          image: registry.local/dns:1
          ports: [{containerPort: 53, protocol: UDP}, {containerPort: 53, protocol: TCP}]
"""


def test_list_items_sharing_a_merge_key_are_paired_in_order_as_kubectl_does(
    interop: Interop, module_runner: ModuleRunner
) -> None:
    # Container ports merge on containerPort alone, so DNS's 53/UDP and 53/TCP share a key; a
    # lookup by key compared UDP with TCP and patched an unchanged object on every apply.
    sim, kubectl, dns = interop.sim, interop.kubectl, interop.write("dns.yaml", DNS)
    assert "deployment.apps/dns created" in kubectl("apply", "-f", str(dns))
    assert "deployment.apps/dns unchanged" in kubectl("apply", "-f", str(dns))
    live = kube(sim).get("/apis/apps/v1/namespaces/team/deployments/dns")
    assert apply_patch(yaml.safe_load(DNS), live)[0] == {}
    again = module_runner(apply, sim, {**CSA, "src": "dns.yaml"})
    assert (again.changed, actions(again)) == (False, {"Deployment/dns": "unchanged"})
