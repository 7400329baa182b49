"""kube.apply's default, server-side apply, against the rehearsal cluster, with the real
`kubectl apply --server-side` as the reference client: the same manifests sent by either give
the same object and the same field ownership; conflicts are refused with the apiserver's words
and nothing changed; a client-side applied object is adopted without conflicts."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from temporalio.exceptions import ApplicationError

from activities.kube.apply import apply
from activities.kube.client import ApiStatus, Kube
from tests.integration.kube.conftest import ModuleRunner
from tests.integration.kube.test_apply import (
    APP,
    CSA,
    RECREATE,
    ROLLING,
    Interop,
    actions,
    interop,
    kube,
)
from tests.integration.sim.conftest import kubectl_for

__all__ = ["interop", "kubectl_for"]

Obj = dict[str, Any]
DEPLOY = "/apis/apps/v1/namespaces/team/deployments/{}"


def owners(obj: Obj) -> dict[tuple[str, str, str], Obj]:
    return {
        (e["manager"], e["operation"], e.get("subresource", "")): e["fieldsV1"]
        for e in obj["metadata"].get("managedFields") or []
    }


def spec_of(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k in ("spec", "data")} | {
        "labels": obj["metadata"].get("labels"),
        "annotations": obj["metadata"].get("annotations"),
    }


def test_pitstop_and_kubectl_server_side_apply_give_the_same_object_and_ownership(
    interop: Interop, module_runner: ModuleRunner
) -> None:
    sim, kubectl = interop.sim, interop.kubectl
    ours = APP
    theirs = APP.replace("name: web", "name: web2").replace("name: settings", "name: settings2")
    interop.write("ours.yaml", ours)
    first = module_runner(apply, sim, {"src": "ours.yaml", "namespace": "team"})
    assert actions(first) == {"Deployment/web": "created", "ConfigMap/settings": "created"}
    kubectl(
        "apply",
        "--server-side",
        "--field-manager=pitstop",
        "-n",
        "team",
        "-f",
        str(interop.write("t.yaml", theirs)),
    )
    api = kube(sim)
    mine, reference = api.get(DEPLOY.format("web")), api.get(DEPLOY.format("web2"))
    assert spec_of(mine) == spec_of(reference)
    assert owners(mine) == owners(reference)
    assert list(owners(mine)) == [("pitstop", "Apply", "")]
    # No last-applied annotation: ownership is the server's record.
    assert "kubectl.kubernetes.io/last-applied-configuration" not in (
        mine["metadata"].get("annotations") or {}
    )
    again = module_runner(apply, sim, {"src": "ours.yaml", "namespace": "team"})
    assert (again.changed, set(actions(again).values())) == (False, {"unchanged"})

    # Someone labels the ConfigMap; the manifest then drops env A and data `level`: what pitstop
    # applied before and no longer does goes, the label (another manager's) stays.
    kubectl("label", "configmap", "settings", "settings2", "-n", "team", "owner=ops")
    changed_ours = APP.replace('{name: A, value: "1"}, ', "").replace('level: "3"', 'speed: "9"')
    interop.write("ours.yaml", changed_ours)
    changed = module_runner(apply, sim, {"src": "ours.yaml", "namespace": "team"})
    assert actions(changed) == {"Deployment/web": "configured", "ConfigMap/settings": "configured"}
    assert changed.diff is not None and '-    "level": "3"' in changed.diff
    changed_theirs = changed_ours.replace("name: web", "name: web2").replace(
        "name: settings", "name: settings2"
    )
    kubectl(
        "apply",
        "--server-side",
        "--field-manager=pitstop",
        "-n",
        "team",
        "-f",
        str(interop.write("t.yaml", changed_theirs)),
    )
    settings = api.get("/api/v1/namespaces/team/configmaps/settings")
    assert settings["data"] == {"mode": "fast", "speed": "9"}
    assert settings["metadata"]["labels"] == {"owner": "ops"}
    assert spec_of(settings) == spec_of(api.get("/api/v1/namespaces/team/configmaps/settings2"))
    env = api.get(DEPLOY.format("web"))["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "B", "value": "2"}]
    assert owners(api.get(DEPLOY.format("web"))) == owners(api.get(DEPLOY.format("web2")))


def test_a_field_another_manager_owns_is_refused_with_the_apiservers_words_and_force_takes_it(
    interop: Interop, module_runner: ModuleRunner
) -> None:
    sim, kubectl = interop.sim, interop.kubectl
    interop.write("app.yaml", APP)
    module_runner(apply, sim, {"src": "app.yaml", "namespace": "team"})
    kubectl("scale", "deployment", "web", "-n", "team", "--replicas=3")
    before = kube(sim).get(DEPLOY.format("web"))
    three = APP.replace("replicas: 1", "replicas: 2").replace("web:1", "web:2")
    interop.write("app.yaml", three)
    with pytest.raises(ApplicationError) as refused:
        module_runner(apply, sim, {"src": "app.yaml", "namespace": "team"})
    message = refused.value.message
    assert refused.value.type == "PreconditionFailed" and refused.value.non_retryable
    server_says = (
        'Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" using apps/v1: '
        ".spec.replicas"
    )
    assert server_says in message and "force_conflicts: true" in message
    # kubectl --server-side is told the same by the same server.
    by_kubectl = kubectl.run(
        "apply",
        "--server-side",
        "--field-manager=pitstop",
        "-n",
        "team",
        "-f",
        str(interop.root / "app.yaml"),
        check=False,
    )
    assert by_kubectl.returncode == 1 and server_says in by_kubectl.stderr
    # Nothing changed: not the image either (the apply is one request, refused whole).
    after = kube(sim).get(DEPLOY.format("web"))
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["metadata"]["managedFields"] == before["metadata"]["managedFields"]
    assert after["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/web:1"

    forced = module_runner(apply, sim, {"src": "app.yaml", "namespace": "team", "force_conflicts": True})
    assert actions(forced) == {"Deployment/web": "configured", "ConfigMap/settings": "unchanged"}
    taken = kube(sim).get(DEPLOY.format("web"))
    assert taken["spec"]["replicas"] == 2
    assert ("kubectl", "Update", "scale") not in owners(taken)
    assert "f:replicas" in owners(taken)[("pitstop", "Apply", "")]["f:spec"]


def test_switching_to_recreate_prunes_rolling_update_and_keeps_the_env_order(
    interop: Interop, module_runner: ModuleRunner
) -> None:
    sim = interop.sim
    interop.write("d.yaml", ROLLING)
    module_runner(apply, sim, {"src": "d.yaml"})
    interop.write("d.yaml", RECREATE)
    switched = module_runner(apply, sim, {"src": "d.yaml"})
    assert actions(switched) == {"Deployment/web": "configured"}
    spec = kube(sim).get(DEPLOY.format("web"))["spec"]
    assert spec["strategy"] == {"type": "Recreate"}
    assert [e["name"] for e in spec["template"]["spec"]["containers"][0]["env"]] == ["B", "A", "C"]


@pytest.mark.parametrize("client_side_by", ["kubectl", "pitstop"])
def test_an_object_applied_client_side_is_adopted_without_conflicts(
    interop: Interop, module_runner: ModuleRunner, client_side_by: str
) -> None:
    sim, kubectl = interop.sim, interop.kubectl
    path = interop.write("app.yaml", APP)
    if client_side_by == "kubectl":
        kubectl("apply", "-n", "team", "-f", str(path))
        previous = "kubectl-client-side-apply"
    else:
        module_runner(apply, sim, {**CSA, "src": "app.yaml", "namespace": "team"})
        previous = "pitstop-client-side-apply"
    assert (previous, "Update", "") in owners(kube(sim).get(DEPLOY.format("web")))
    interop.write("app.yaml", APP.replace('{name: A, value: "1"}, ', "").replace("web:1", "web:2"))
    adopted = module_runner(apply, sim, {"src": "app.yaml", "namespace": "team"})
    assert actions(adopted)["Deployment/web"] == "configured"
    live = kube(sim).get(DEPLOY.format("web"))
    assert (previous, "Update", "") not in owners(live) and ("pitstop", "Apply", "") in owners(live)
    container = live["spec"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["env"]) == ("registry.local/web:2", [{"name": "B", "value": "2"}])


def test_an_adoption_raced_by_another_writer_reads_the_object_again(
    interop: Interop, module_runner: ModuleRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Deployment controller writes status between pitstop's read and its managedFields move
    # (as on a real cluster): the move's resourceVersion precondition fails, and pitstop reads
    # the object again and moves what is there now, instead of failing the apply.
    sim, kubectl = interop.sim, interop.kubectl
    path = interop.write("app.yaml", APP)
    kubectl("apply", "-n", "team", "-f", str(path))
    interop.write("app.yaml", APP.replace("web:1", "web:2"))
    original = Kube.patch
    raced: list[str] = []

    def patch_after_another_writer(self: Kube, target: str, body: Any, kind: str = "merge") -> Any:
        if kind == "json" and not raced:
            raced.append(target)
            writer = kube(sim)
            writer.patch(target, {"metadata": {"annotations": {"raced": "yes"}}}, "merge")
        return original(self, target, body, kind)

    monkeypatch.setattr(Kube, "patch", patch_after_another_writer)
    adopted = module_runner(apply, sim, {"src": "app.yaml", "namespace": "team"})
    assert raced, "the adoption never patched managedFields"
    assert actions(adopted)["Deployment/web"] == "configured"
    live = kube(sim).get(DEPLOY.format("web"))
    assert ("kubectl-client-side-apply", "Update", "") not in owners(live)
    assert live["metadata"]["annotations"]["raced"] == "yes"
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/web:2"


def test_bad_apply_requests_are_refused_by_the_server_as_the_apiserver_does(interop: Interop) -> None:
    api = kube(interop.sim)
    body = yaml.safe_load(APP.split("---\n")[1])
    body["metadata"]["namespace"] = "team"
    path = "/api/v1/namespaces/team/configmaps/settings"
    with pytest.raises(ApiStatus, match=r"400 .*fieldManager is required for apply requests"):
        api.request("PATCH", path, body=json.dumps(body), content_type="application/apply-patch+yaml")
    with_fields = {**body, "metadata": {**body["metadata"], "managedFields": [{"manager": "x"}]}}
    with pytest.raises(ApiStatus, match=r"400 .*metadata\.managedFields must be nil"):
        api.server_side_apply(path, with_fields, field_manager="pitstop", force=False)
    assert api.get_or_none(path) is None


def test_check_mode_on_a_client_side_applied_object_previews_the_adoption_and_writes_nothing(
    interop: Interop, module_runner: ModuleRunner
) -> None:
    sim = interop.sim
    interop.write("app.yaml", APP)
    module_runner(apply, sim, {**CSA, "src": "app.yaml", "namespace": "team"})
    before = kube(sim).get(DEPLOY.format("web"))
    interop.write("app.yaml", APP.replace("web:1", "web:2"))
    preview = module_runner(apply, sim, {"src": "app.yaml", "namespace": "team"}, check_mode=True)
    assert actions(preview)["Deployment/web"] == "configured"
    assert preview.diff is not None and '+            "image": "registry.local/web:2",' in preview.diff
    after = kube(sim).get(DEPLOY.format("web"))
    # Not the resourceVersion: the Deployment controller keeps writing status while the first
    # rollout settles. What a preview must not touch is the spec, metadata and ownership.
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert spec_of(after) == spec_of(before)
    assert owners(after) == owners(before)
    # A conflict with anyone but client-side apply is not previewed away.
    interop.kubectl("scale", "deployment", "web", "-n", "team", "--replicas=3")
    interop.write("app.yaml", APP.replace("replicas: 1", "replicas: 2"))
    with pytest.raises(ApplicationError, match='conflict with "kubectl" with subresource "scale"'):
        module_runner(apply, sim, {"src": "app.yaml", "namespace": "team"}, check_mode=True)
