"""Secret values and Helm release payloads never leave a kube activity (pitstop/kube/redact.py).

The attack: `kube.get` of a Secret returned its `data` into the result and so into history,
in check mode too. Proven closed three ways: the pure redaction, every module that returns
objects or diffs on the rehearsal cluster, and a run through the embedded Temporal whose whole
history (parent, children, every payload decoded) holds neither the value nor its base64.
"""

from __future__ import annotations

import base64
import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.kube.apply import apply
from activities.kube.common import kube_module
from activities.kube.generic import get, patch
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.helm import HelmRelease, encode_payload, encode_release
from pitstop.kube.apply import LAST_APPLIED, last_applied_of
from pitstop.kube.diff import object_diff
from pitstop.kube.redact import collecting, redact_object, redact_pair, redact_tree, scrub_text
from pitstop.module_spec import ModuleArgs, ModuleSpec
from pitstop_sim import SimCluster
from tests.integration.engine.conftest import StartFn
from tests.integration.kube import conftest as kube_fixtures
from tests.integration.kube.conftest import ModuleRunner, StartSim
from tests.security.redact_history import leaks, run_history_texts

start_sim, module_runner = kube_fixtures.start_sim, kube_fixtures.module_runner
engine_worker, start_run, run = kube_fixtures.engine_worker, kube_fixtures.start_run, kube_fixtures.run

CLUSTER = """
cluster: {nodes: 1, domains: 1}
timing: {time_scale: 20}
"""


def _token() -> bytes:
    return f"tok-{uuid.uuid4().hex}".encode()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _secret(name: str, token: bytes, password: bytes) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "Opaque",
        "data": {"token": _b64(token), "password": _b64(password)},
    }
    body["metadata"]["annotations"] = {LAST_APPLIED: last_applied_of(body)}
    return body


def _assert_clean(value: Any, *secrets: bytes) -> None:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    for secret in secrets:
        assert secret.decode() not in text
        assert _b64(secret) not in text


def _helm_release(secret_text: str) -> HelmRelease:
    return HelmRelease(
        name="db",
        namespace="default",
        version=1,
        chart_name="postgres",
        chart_version="1.0.0",
        manifest=f"apiVersion: v1\nkind: Secret\nstringData: {{password: {secret_text}}}\n",
        files={"values.yaml": f"password: {secret_text}\n"},
    )


# --- the pure redaction --------------------------------------------------------------------


def test_a_secret_keeps_its_keys_and_loses_its_values_everywhere() -> None:
    token, password = _token(), _token()
    secret = _secret("db", token, password)
    secret["stringData"] = {"extra": password.decode()}
    with collecting() as seen:
        shown = redact_object(secret)
    _assert_clean(shown, token, password)
    assert shown["data"] == {
        "token": f"<redacted: {len(token)} bytes>",
        "password": f"<redacted: {len(password)} bytes>",
    }
    assert shown["stringData"] == {"extra": f"<redacted: {len(password)} bytes>"}
    applied = json.loads(shown["metadata"]["annotations"][LAST_APPLIED])
    assert set(applied["data"]) == {"token", "password"}
    assert secret["data"]["token"] == _b64(token), "the object itself is not changed"
    assert token.decode() in seen and _b64(token) in seen
    assert scrub_text(f"got {token.decode()} and {_b64(password)}", seen) == "got <redacted> and <redacted>"


def test_lists_items_without_kind_and_nested_results_are_redacted() -> None:
    token = _token()
    item = {k: v for k, v in _secret("a", token, token).items() if k not in ("kind", "apiVersion")}
    _assert_clean(redact_object({"kind": "SecretList", "items": [item]}), token)
    _assert_clean(redact_object(item, "Secret"), token)
    nested = {"found": [{"deep": {**item, "kind": "Secret"}}], "count": 1}
    _assert_clean(redact_tree(nested), token)
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n1"}}
    assert redact_object(pod) == pod and redact_tree({"x": pod}) == {"x": pod}


def test_helm_release_payloads_are_redacted_as_secrets_and_as_configmaps() -> None:
    secret_text = f"pw-{uuid.uuid4().hex}"
    release = _helm_release(secret_text)
    payload = encode_payload(release)
    as_secret = redact_object(encode_release(release))
    as_configmap = redact_object(
        {
            "kind": "ConfigMap",
            "metadata": {"name": "sh.helm.release.v1.db.v1", "labels": {"owner": "helm"}},
            "data": {"release": payload},
        }
    )
    for shown in (as_secret, as_configmap):
        text = json.dumps(shown)
        assert payload not in text and secret_text not in text
        assert shown["data"]["release"].startswith("<redacted: ")
    plain = {"kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"level": "debug"}}
    assert redact_object(plain) == plain


def test_a_diff_says_which_secret_value_changed_without_showing_either() -> None:
    old, new = _token(), _token()
    before = _secret("db", old, old)
    after = _secret("db", new, old)
    diff = object_diff(before, after, "Secret default/db")
    _assert_clean(diff, old, new)
    assert f"<redacted: {len(new)} bytes, changed>" in diff
    same_before, same_after = redact_pair(before, before)
    assert same_before == same_after


# --- every kube module on the rehearsal cluster ----------------------------------------------


def _seed(sim: SimCluster, token: bytes, password: bytes) -> None:
    sim.create("secrets", _secret("db-creds", token, password), namespace="default")
    release = _helm_release(password.decode())
    sim.create("secrets", encode_release(release), namespace="default")
    sim.create(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "sh.helm.release.v1.cache.v1", "labels": {"owner": "helm", "name": "cache"}},
            "data": {"release": encode_payload(release)},
        },
        namespace="default",
    )


@pytest.mark.parametrize("check_mode", [False, True])
def test_kube_get_returns_keys_but_never_values(
    start_sim: StartSim, module_runner: ModuleRunner, check_mode: bool
) -> None:
    sim = start_sim(CLUSTER)
    token, password = _token(), _token()
    _seed(sim, token, password)
    one = module_runner(
        get, sim, {"kind": "Secret", "namespace": "default", "name": "db-creds"}, check_mode=check_mode
    )
    assert one.data["exists"] is True
    assert sorted(one.data["resource"]["data"]) == ["password", "token"]
    assert one.data["resource"]["data"]["token"] == f"<redacted: {len(token)} bytes>"
    listed = module_runner(get, sim, {"kind": "Secret", "namespace": "default"}, check_mode=check_mode)
    assert listed.data["count"] == 2
    helm_cm = module_runner(get, sim, {"kind": "ConfigMap", "namespace": "default"}, check_mode=check_mode)
    for result in (one, listed, helm_cm):
        _assert_clean(result.model_dump(), token, password)
        assert encode_payload(_helm_release(password.decode())) not in result.model_dump_json()


@pytest.mark.parametrize("check_mode", [True, False])
def test_kube_patch_of_a_secret_shows_the_change_not_the_values(
    start_sim: StartSim, module_runner: ModuleRunner, check_mode: bool
) -> None:
    sim = start_sim(CLUSTER)
    token, password, rotated = _token(), _token(), _token()
    _seed(sim, token, password)
    args = {
        "kind": "Secret",
        "namespace": "default",
        "name": "db-creds",
        "patch": {"data": {"token": _b64(rotated)}, "metadata": {"labels": {"rotated": "yes"}}},
    }
    result = module_runner(patch, sim, args, check_mode=check_mode)
    assert result.changed and result.diff is not None
    assert f"<redacted: {len(rotated)} bytes, changed>" in result.diff and '"rotated": "yes"' in result.diff
    _assert_clean(result.model_dump(), token, password, rotated)
    stored = (sim.get("secrets", "db-creds", "default") or {})["data"]["token"]
    assert stored == _b64(token if check_mode else rotated)


def test_kube_apply_of_a_secret_manifest_diffs_without_values(
    start_sim: StartSim, module_runner: ModuleRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = start_sim(CLUSTER)
    token, rotated = _token(), _token()
    # The manifest lives with the runbook, as the worker policy wants it: `src` is relative to
    # the runbook directory.
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(tmp_path))
    manifest = tmp_path / "secret.yaml"

    def write(value: bytes) -> None:
        manifest.write_text(
            textwrap.dedent(
                f"""\
                apiVersion: v1
                kind: Secret
                metadata: {{name: applied, namespace: default}}
                data: {{token: {_b64(value)}}}
                """
            )
        )

    write(token)
    planned = module_runner(apply, sim, {"src": ["secret.yaml"]}, check_mode=True)
    created = module_runner(apply, sim, {"src": ["secret.yaml"]})
    write(rotated)
    changed = module_runner(apply, sim, {"src": ["secret.yaml"]})
    again = module_runner(apply, sim, {"src": ["secret.yaml"]})
    assert planned.changed and created.changed and changed.changed and not again.changed
    for result in (planned, created, changed, again):
        _assert_clean(result.model_dump(), token, rotated)
    assert changed.diff is not None and "changed>" in changed.diff
    live = sim.get("secrets", "applied", "default") or {}
    assert base64.b64decode(live["data"]["token"]) == rotated, "the cluster got the real value"


class _LeakyArgs(ModuleArgs):
    secret: dict[str, Any]
    fail: bool = False


LEAKY: ModuleSpec[_LeakyArgs] = ModuleSpec(
    name="test.leaky_secret_reader", args_model=_LeakyArgs, summary="every mistake at once"
)


@kube_module(LEAKY)
def _leaky(call: ModuleCall, args: _LeakyArgs) -> ModuleResult:
    """A module that makes every mistake at once: returns an object, echoes a value it
    redacted into its text, then fails with it in the message."""
    secret = args.secret
    shown = redact_object(secret)
    value = base64.b64decode(secret["data"]["token"]).decode()
    if args.fail:
        fail(ErrorType.PRECONDITION_FAILED, f"token {value} rejected ({secret['data']['token']})")
    return ModuleResult(
        msg=f"read {value}", stdout=value, data={"shown": shown, "raw": secret, "copied": [f"value={value}"]}
    )


def test_the_kube_module_wrapper_redacts_results_and_scrubs_text_and_errors(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(CLUSTER)
    token = _token()
    secret = _secret("db", token, token)
    call = module_runner.call(sim, "test.leaky_secret_reader", {"secret": secret})
    result: ModuleResult = module_runner.env().run(_leaky, call)
    _assert_clean(result.model_dump(), token)
    assert result.msg == "read <redacted>" and result.data["copied"] == ["value=<redacted>"]
    failing = module_runner.call(sim, "test.leaky_secret_reader", {"secret": secret, "fail": True})
    with pytest.raises(ApplicationError) as err:
        module_runner.env().run(_leaky, failing)
    assert err.value.type == "PreconditionFailed" and err.value.non_retryable
    assert err.value.message == "token <redacted> rejected (<redacted>)"


# --- through Temporal: the whole history -----------------------------------------------------

RUNBOOK = """
name: read-a-secret
hosts: localhost
tasks:
  - name: read it
    kube.get: {kind: Secret, namespace: default, name: db-creds}
    register: creds
  - name: its keys are there, its values are not
    assert:
      that:
        - creds.resource.data.token is defined
        - "'<redacted: ' in creds.resource.data.token"
  - name: show what was read
    debug: {var: creds}
  - name: every Secret and Helm record
    kube.get: {kind: Secret, namespace: default}
    register: all_secrets
  - name: Helm records in ConfigMaps
    kube.get: {kind: ConfigMap, namespace: default}
  - name: label it
    kube.patch:
      kind: Secret
      namespace: default
      name: db-creds
      patch: {metadata: {labels: {audited: "yes"}}}
  - name: keep it as a fact
    set_fact: {secret_seen: "{{ creds.resource }}"}
"""


def _inventory(sim: SimCluster) -> str:
    """The inventory names the cluster; the worker holds its kubeconfig (registered)."""
    sim.register("rehearsal")
    return """
    cluster: {name: rehearsal}
    all:
      hosts: {}
    """


@pytest.mark.parametrize("check_mode", [False, True])
async def test_a_run_reading_a_secret_leaves_no_value_in_history(
    start_sim: StartSim, start_run: StartFn, temporal_client: Client, check_mode: bool
) -> None:
    sim = start_sim(CLUSTER)
    token, password = _token(), _token()
    _seed(sim, token, password)
    handle = await start_run(RUNBOOK, _inventory(sim), check_mode=check_mode)
    report = await handle.result()
    texts = await run_history_texts(temporal_client, handle.id)
    assert len(texts) > 3
    assert leaks(texts, token) == [] and leaks(texts, password) == []
    assert encode_payload(_helm_release(password.decode())) not in "".join(texts)
    assert sim.counters().requests.get("get secrets", 0) >= 1, "the Secret was really read"
    assert report.status == "succeeded", report.msg
    outcomes = {t.name: t for h in report.stages[0].hosts for t in h.tasks}
    assert outcomes["its keys are there, its values are not"].status == "ok"


def test_a_secret_written_inline_in_kube_apply_is_refused_before_it_reaches_history(tmp_path: Path) -> None:
    """Module arguments are the activity's input, in history: a Secret's values never belong there."""
    from typer.testing import CliRunner

    from pitstop.cli.app import app

    token = _token()
    runbook = tmp_path / "apply.yaml"
    runbook.write_text(
        textwrap.dedent(
            f"""\
            name: apply
            hosts: localhost
            tasks:
              - kube.apply:
                  definition:
                    apiVersion: v1
                    kind: Secret
                    metadata: {{name: db}}
                    data: {{blob: {_b64(token)}}}
            """
        )
    )
    result = CliRunner().invoke(app, ["validate", str(runbook)])
    assert result.exit_code == 1
    shown = " ".join(result.output.split())
    assert (
        f"{runbook}:6:9:" in shown
        and "a Secret with data written inline would be stored in the run's history" in shown
    )
    assert _b64(token) not in result.output
