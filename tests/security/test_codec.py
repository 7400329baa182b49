"""Payload encryption on the embedded stack, end to end, with real processes.

`pitstop dev up --codec` (a real dev server and codec server), a real worker (`python
worker.py`) reaching a simulated node over SSH, the real `pitstop` CLI, and Temporal's own
CLI. A runbook puts markers into vars (`-e`), a command's stdout (`ssh.command: echo`),
facts (`set_fact`) and a `debug` message. Proven here:

- what Temporal stores holds none of them (`temporal workflow show --output json` and the
  raw history, for the run and every host workflow), while every marker is in it encrypted;
- `pitstop status` with the keys shows them; so does the codec server when asked as the UI
  asks (its origin, real HTTP), and Temporal's CLI through `--codec-endpoint`; another
  origin gets 403 and no CORS allowance; the dev UI is configured with the codec endpoint;
- the replayer reads the encrypted history with pitstop's converter (and not without it);
- rotation: a run started under key A finishes on a worker restarted with B (active) + A;
  a process with only B gets the clear unknown-key error for what A wrote, and decodes
  nothing;
- schedules keep working with encrypted arguments and memo.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from pitstop.client import data_converter, tracing_interceptor
from pitstop.codec import AesGcmCodec
from pitstop.codec_keys import generate_key, parse_keyring
from pitstop.devstack import POLICY_FILE, DevStack, StackConfig, free_ports_config
from pitstop.policy import load_policy
from pitstop.policy.errors import POLICY_ENV
from pitstop.sandbox import workflow_runner
from pitstop.schedules import apply_schedules, load_schedules
from pitstop.secrets import DIR_ENV
from pitstop.settings import Settings
from pitstop_sim import SimCluster, SimConfig, parse_scenario
from workflows import WORKFLOWS
from workflows.run_hosts import LAUNCH_IN_BACKGROUND, LAUNCH_LIMITS, PATCHES_AT_START

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PITSTOP = BIN / "pitstop"
TEMPORAL = BIN / "temporal"
NODE = "gpu-node-001"
ENCRYPTED_B64 = base64.b64encode(b"binary/encrypted").decode()

SCENARIO = """
cluster:
  nodes: 1
  domains: 1
  gpus_per_node: 1
"""

RUNBOOK = """
name: codec-markers
hosts: {node}
tasks:
  - name: print a token
    ssh.command: {{cmd: "echo out-{marker}"}}
    register: printed
  - name: keep it
    set_fact:
      kept: "{{{{ printed.stdout | trim | replace('out-', 'fact-') }}}}"
  - name: show it
    debug: {{msg: "debug-{marker} {{{{ token }}}}"}}
"""

ROTATION = """
name: codec-rotation
approvers:
  sre: [bob]
stages:
  - name: only
    hosts: lab
    {gate}
    tasks:
      - set_fact: {{kept: "fact-{marker}"}}
      - debug: {{msg: "debug-{marker} {{{{ token }}}}"}}
"""
GATE = "gate: {before: true, approvers: sre}"

LAB_INVENTORY = "all:\n  children:\n    lab:\n      hosts:\n        h00: {}\n"


# -- processes -----------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any codec or home setting, plus `extra`. Given a
    home, a process also reads that home's worker policy (what `pitstop dev up` wrote there), as
    a user's would; otherwise it keeps the session's test policy (never a developer's own)."""
    drop = {"PITSTOP_CODEC_KEY", "PITSTOP_CODEC_KEY_FILE", "PITSTOP_HOME", "TEMPORAL_ADDRESS"}
    if "PITSTOP_HOME" in extra:
        drop.add(POLICY_ENV)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"COLUMNS": "400", **extra})
    return env


def run_cli(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=180)


async def acli(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(run_cli, argv, env)


class WorkerProcess:
    """`python worker.py` as an operator runs it, stopped with SIGTERM."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "worker.py", "--grace-seconds", "1", "--log-level", "INFO"],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def start(self) -> None:
        self.spawn()
        await until("the worker to serve", lambda: "worker serving task queue" in self.output(), 90)

    def output(self) -> str:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"worker exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
            )
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


async def until(what: str, check: Any, seconds: float = 120.0) -> Any:
    try:
        async with asyncio.timeout(seconds):
            while True:
                value = check()
                if asyncio.iscoroutine(value):
                    value = await value
                if value:
                    return value
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def codec_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """`pitstop dev up --codec` (Temporal and the codec server) in its own home and ports."""
    config = free_ports_config(tmp_path_factory.mktemp("codec-home"))
    ports = [
        "--temporal-port",
        str(config.temporal_port),
        "--ui-port",
        str(config.ui_port),
        "--codec-port",
        str(config.codec_port),
    ]
    home = ["--home", str(config.home)]
    up = run_cli([str(PITSTOP), "dev", "up", "--codec", "--parts", "temporal", *home, *ports], clean_env())
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        saved = StackConfig.saved(config.home)
        assert saved is not None
        yield DevStack(saved)
    finally:
        run_cli([str(PITSTOP), "dev", "down", *home, "--grace", "2"], clean_env())


@pytest.fixture(scope="module")
async def raw_client(codec_stack: DevStack) -> Client:
    """A client with no keys: what anyone reading the server (or its database) gets."""
    return await Client.connect(codec_stack.temporal_address, data_converter=pydantic_data_converter)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimCluster]:
    cluster = SimCluster(
        SimConfig(
            scenario=parse_scenario(SCENARIO, "scenario.yaml"), kubeconfig=tmp_path / "kubeconfig", ssh=True
        )
    )
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
async def workers(tmp_path: Path) -> AsyncIterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


# -- reading history -------------------------------------------------------------------------------


# Left readable by design: search attributes (the server indexes them: runbook, cluster,
# stage, status) and headers (trace context). Neither carries a run's data.
UNENCRYPTED_FIELDS = ("searchAttributes", "header")
# A local activity's marker: Temporal's Core SDK writes its own bookkeeping (seq, attempt,
# activity id and type, schedule times) under `details.data` as json/plain, outside the data
# converter; the activity's result (`details.result`) goes through the codec like any payload.
LOCAL_ACTIVITY_MARKER = "core_local_activity"
PATCH_MARKER = "core_patch"
# The engine's `workflow.patched` ids: public names of code changes, never a run's data.
ENGINE_PATCHES = {LAUNCH_LIMITS, LAUNCH_IN_BACKGROUND, PATCHES_AT_START}
LOCAL_ACTIVITY_BOOKKEEPING = {
    "seq",
    "attempt",
    "activity_id",
    "activity_type",
    "complete_time",
    "backoff",
    "original_schedule_time",
    "activation_index",
}


def _local_activity_bookkeeping(payloads: Any) -> None:
    """The marker's own record holds only the SDK's bookkeeping fields, never a run's data."""
    for entry in payloads.get("payloads", []):
        payload = json_format.ParseDict(entry, Payload(), ignore_unknown_fields=True)
        assert payload.metadata["encoding"] == b"json/plain"
        assert set(json.loads(payload.data)) <= LOCAL_ACTIVITY_BOOKKEEPING, payload.data


def _patch_ids_only(details: Any) -> None:
    """A patch marker (`workflow.patched`) holds the engine's patch id and nothing else."""
    for entry in details.get("patch_data", {}).get("payloads", []):
        payload = json_format.ParseDict(entry, Payload(), ignore_unknown_fields=True)
        assert payload.metadata["encoding"] == b"json/plain"
        record = json.loads(payload.data)
        assert set(record) <= {"id", "deprecated"} and record["id"] in ENGINE_PATCHES, payload.data


def payloads_in(node: Any) -> list[Payload]:
    """Every payload in a history's JSON (dicts with `data` and `metadata.encoding`), except
    the search attributes and headers, which Temporal keeps readable, and the SDK's own records
    of a local activity and of a patch (checked to hold bookkeeping and patch ids only)."""
    found: list[Payload] = []
    if isinstance(node, dict) and node.get("markerName") == LOCAL_ACTIVITY_MARKER:
        details = dict(node.get("details", {}))
        _local_activity_bookkeeping(details.pop("data", {}))
        node = {**node, "details": details}
    if isinstance(node, dict) and node.get("markerName") == PATCH_MARKER:
        _patch_ids_only(node.get("details", {}))
        node = {**node, "details": {}}
    if isinstance(node, dict):
        if "data" in node and isinstance(node.get("metadata"), dict) and "encoding" in node["metadata"]:
            found.append(json_format.ParseDict(node, Payload(), ignore_unknown_fields=True))
        for key, value in node.items():
            if key not in UNENCRYPTED_FIELDS:
                found.extend(payloads_in(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(payloads_in(value))
    return found


async def histories(client: Client, run_id: str, hosts: int) -> dict[str, WorkflowHistory]:
    """The run's history and its host workflows' (ids `<run id>/<stage>/<host>`)."""

    async def children() -> list[str]:
        ids = [w.id async for w in client.list_workflows(f'WorkflowId STARTS_WITH "{run_id}/"')]
        return ids if len(ids) == hosts else []

    ids = [run_id, *await until(f"{hosts} host workflow(s) of {run_id} to be listed", children, 30)]
    return {wid: await client.get_workflow_handle(wid).fetch_history() for wid in ids}


def decrypted_text(payloads: list[Payload], codec: AesGcmCodec) -> str:
    return "\n".join(codec.decrypt(p).data.decode(errors="replace") for p in payloads)


def ui_body(payloads: list[Payload]) -> str:
    return json_format.MessageToJson(Payloads(payloads=payloads))


def markers(marker: str) -> list[str]:
    return [f"var-{marker}", f"out-{marker}", f"fact-{marker}", f"debug-{marker}"]


async def start_run(
    runbook: Path, inventory: Path, run_id: str, marker: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`pitstop run` of `runbook` as `run_id`, with the marker in a var (`-e token=var-<marker>`)."""
    argv = [str(PITSTOP), "run", str(runbook), "-i", str(inventory), "--id", run_id]
    return await acli([*argv, "-e", f"token=var-{marker}"], env)


async def status_json(run_id: str, env: dict[str, str]) -> dict[str, Any] | None:
    """`pitstop status --json` of the run, None when the command fails."""
    out = await acli([str(PITSTOP), "status", run_id, "--json"], env)
    return json.loads(out.stdout) if out.returncode == 0 else None


async def temporal_show(
    address: str, workflow_id: str, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """Temporal's own CLI: `temporal workflow show --output json`."""
    argv = [str(TEMPORAL), "workflow", "show", "--address", address, "-w", workflow_id]
    return await acli([*argv, "--output", "json", *extra], env)


# -- the run on the embedded stack ------------------------------------------------------------------


@pytest.mark.timeout(600)
async def test_history_holds_ciphertext_and_pitstop_the_ui_and_the_replayer_read_it(
    codec_stack: DevStack,
    raw_client: Client,
    sim: SimCluster,
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    # The marker is only in what the run carries; ids and names get their own.
    marker, tag = uuid.uuid4().hex[:12], uuid.uuid4().hex[:8]
    queue = f"codec-{tag}"
    home = str(codec_stack.home)
    # Every pitstop process started against the stack's home finds its key file.
    env = clean_env(
        TEMPORAL_ADDRESS=codec_stack.temporal_address, PITSTOP_HOME=home, PITSTOP_TASK_QUEUE=queue
    )
    await assert_the_stack_says_payloads_are_encrypted(codec_stack, env)

    # As `pitstop sim serve` does: the rehearsal cluster is registered with the workers of the
    # stack's home (the inventory only names it), whose policy grants its nodes' SSH key.
    registered = sim.register(policy=load_policy(env))
    assert registered.is_relative_to(codec_stack.home) and (codec_stack.home / POLICY_FILE).is_file()
    worker = WorkerProcess({**env, DIR_ENV: str(sim.ssh_secrets_dir)}, tmp_path / "worker.log")
    workers.append(worker)
    await worker.start()
    assert "payload encryption: on, active key id dev-" in worker.output()

    runbook = tmp_path / "runbook.yaml"
    runbook.write_text(textwrap.dedent(RUNBOOK.format(node=NODE, marker=marker)))
    run_id = f"codec-run-{tag}"
    started = await start_run(runbook, sim.inventory_path, run_id, marker, env)
    assert started.returncode == 0, started.stdout + started.stderr

    async def finished() -> dict[str, Any] | None:
        report = await status_json(run_id, env)
        if report is None:
            return None
        return report if report["status"] in {"succeeded", "failed", "completed_with_failures"} else None

    report = await until("the run to finish", finished, 240)
    assert report["status"] == "succeeded", json.dumps(report)[:3000]
    # `pitstop status` (with the key from the home) shows all of it.
    shown = json.dumps(report)
    for text in markers(marker):
        assert text in shown, f"{text} missing from pitstop status"
    host = report["stages"][0]["hosts"][0]
    assert host["facts"]["kept"] == f"fact-{marker}"

    runs = await assert_temporal_holds_only_ciphertext(codec_stack, raw_client, run_id, marker, env)
    await assert_the_codec_server_decodes_for_the_ui_only(codec_stack, runs, run_id, marker)

    # Temporal's own CLI through the codec server shows the plaintext too.
    through_codec = await temporal_show(
        codec_stack.temporal_address, run_id, env, "--codec-endpoint", codec_stack.codec_endpoint
    )
    assert through_codec.returncode == 0, through_codec.stderr
    decoded_by_temporal = payloads_in(json.loads(through_codec.stdout))
    assert not any(p.metadata["encoding"] == b"binary/encrypted" for p in decoded_by_temporal)
    assert f"var-{marker}" in "\n".join(p.data.decode(errors="replace") for p in decoded_by_temporal)

    await assert_the_replayer_needs_the_key(codec_stack, runs)


async def assert_the_stack_says_payloads_are_encrypted(codec_stack: DevStack, env: dict[str, str]) -> None:
    """`pitstop dev status` says encryption is on, and the dev UI decodes through the codec server."""
    status = await acli([str(PITSTOP), "dev", "status", "--home", str(codec_stack.home)], env)
    assert status.returncode == 0, status.stdout
    assert "payload encryption: on, active key id dev-" in status.stdout
    assert f"the Temporal UI decodes through {codec_stack.codec_endpoint}" in status.stdout
    async with httpx.AsyncClient(timeout=10) as http:
        settings = (await http.get(f"{codec_stack.ui_url}/api/v1/settings")).json()
    assert settings["Codec"]["Endpoint"] == codec_stack.codec_endpoint


async def assert_temporal_holds_only_ciphertext(
    codec_stack: DevStack, raw_client: Client, run_id: str, marker: str, env: dict[str, str]
) -> dict[str, WorkflowHistory]:
    """Temporal's CLI, without a codec: no marker anywhere, in any workflow of the run; while
    every marker is in there, encrypted. The run's histories, by workflow id."""
    runs = await histories(raw_client, run_id, hosts=1)
    codec = AesGcmCodec(parse_keyring((codec_stack.home / "codec.keys").read_text(), "home"))
    every_payload: list[Payload] = []
    for workflow_id, history in runs.items():
        shown_by_temporal = await temporal_show(codec_stack.temporal_address, workflow_id, env)
        assert shown_by_temporal.returncode == 0, shown_by_temporal.stderr
        raw = history.to_json()
        for text in (shown_by_temporal.stdout, raw):
            assert marker not in text, f"plaintext of {workflow_id} in history"
            assert ENCRYPTED_B64 in text
        payloads = payloads_in(json.loads(raw))
        assert payloads and all(p.metadata["encoding"] == b"binary/encrypted" for p in payloads)
        every_payload += payloads
    # ... while every marker is in there, encrypted (so the absence above means something).
    opened = decrypted_text(every_payload, codec)
    for text in markers(marker):
        assert text in opened
    return runs


async def assert_the_codec_server_decodes_for_the_ui_only(
    codec_stack: DevStack, runs: dict[str, WorkflowHistory], run_id: str, marker: str
) -> None:
    """The codec server, asked as the UI asks: preflight, then POST /decode from the UI's
    origin; another origin gets 403 and no CORS allowance."""
    ui_origin = codec_stack.ui_url
    host_history = next(h for wid, h in runs.items() if wid != run_id)
    host_payloads = payloads_in(json.loads(host_history.to_json()))
    headers = {"Origin": ui_origin, "Content-Type": "application/json", "X-Namespace": "default"}
    async with httpx.AsyncClient(timeout=30) as http:
        preflight = await http.options(
            f"{codec_stack.codec_endpoint}/decode",
            headers={
                "Origin": ui_origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        decoded = await http.post(
            f"{codec_stack.codec_endpoint}/decode", content=ui_body(host_payloads), headers=headers
        )
        stranger = await http.post(
            f"{codec_stack.codec_endpoint}/decode",
            content=ui_body(host_payloads),
            headers={**headers, "Origin": "http://attacker.example"},
        )
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == ui_origin
    assert decoded.status_code == 200 and decoded.headers["access-control-allow-origin"] == ui_origin
    plain = "\n".join(
        p.data.decode(errors="replace") for p in json_format.Parse(decoded.text, Payloads()).payloads
    )
    assert f"out-{marker}" in plain and f"fact-{marker}" in plain
    assert stranger.status_code == 403
    assert "access-control-allow-origin" not in stranger.headers and marker not in stranger.text


async def assert_the_replayer_needs_the_key(codec_stack: DevStack, runs: dict[str, WorkflowHistory]) -> None:
    """The replayer reads the histories with pitstop's converter, and cannot without the key."""
    for converter, should_replay in (
        (data_converter(Settings(home=codec_stack.home)), True),
        (pydantic_data_converter, False),
    ):
        replayer = Replayer(
            workflows=WORKFLOWS,
            data_converter=converter,
            workflow_runner=workflow_runner(),
            interceptors=[tracing_interceptor()],
        )
        for history in runs.values():
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            assert (result.replay_failure is None) is should_replay, result.replay_failure


# -- rotation -----------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
async def test_rotation_old_runs_finish_under_the_new_key_and_a_process_without_the_old_key_says_so(
    codec_stack: DevStack, raw_client: Client, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    marker, tag = uuid.uuid4().hex[:12], uuid.uuid4().hex[:8]
    queue = f"rotation-{tag}"
    key_a, key_b = generate_key(f"a-{tag}"), generate_key(f"b-{tag}")
    id_a, id_b = key_a.split(":")[0], key_b.split(":")[0]
    base = clean_env(TEMPORAL_ADDRESS=codec_stack.temporal_address, PITSTOP_TASK_QUEUE=queue)
    under_a = {**base, "PITSTOP_CODEC_KEY": key_a}
    rotated = {**base, "PITSTOP_CODEC_KEY": f"{key_b},{key_a}"}
    only_b = {**base, "PITSTOP_CODEC_KEY": key_b}

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(LAB_INVENTORY)
    gated, finished_early = tmp_path / "gated.yaml", tmp_path / "early.yaml"
    gated.write_text(textwrap.dedent(ROTATION.format(marker=marker, gate=GATE)))
    finished_early.write_text(textwrap.dedent(ROTATION.format(marker=marker, gate="")))
    run_gated, run_early = f"rot-gated-{tag}", f"rot-early-{tag}"

    first = WorkerProcess(under_a, tmp_path / "worker-a.log")
    workers.append(first)
    await first.start()
    for path, run_id in ((gated, run_gated), (finished_early, run_early)):
        out = await start_run(path, inventory, run_id, marker, under_a)
        assert out.returncode == 0, out.stderr

    async def reached(run_id: str, env: dict[str, str], wanted: str) -> bool:
        status = await status_json(run_id, env)
        return status is not None and status["status"] == wanted

    await until("the early run to finish under key A", lambda: reached(run_early, under_a, "succeeded"))
    await until("the gated run to wait", lambda: reached(run_gated, under_a, "waiting_gate"))

    # Rotate: the worker restarts with B first (encrypts) and A after it (still decrypts).
    first.stop()
    second = WorkerProcess(rotated, tmp_path / "worker-b.log")
    workers.append(second)
    await second.start()
    assert f"active key id {id_b}, also decrypting with {id_a}" in second.output()
    approved = await acli([str(PITSTOP), "approve", run_gated, "--as", "bob"], rotated)
    assert approved.returncode == 0, approved.stderr
    await until("the gated run to finish after rotation", lambda: reached(run_gated, rotated, "succeeded"))

    report = await status_json(run_gated, rotated)
    assert report is not None
    assert f"debug-{marker} var-{marker}" in json.dumps(report)
    # Its history holds both keys' payloads: A before the rotation, B after.
    history = await raw_client.get_workflow_handle(run_gated).fetch_history()
    key_ids = {p.metadata["encryption-key-id"].decode() for p in payloads_in(json.loads(history.to_json()))}
    assert key_ids == {id_a, id_b}
    assert marker not in history.to_json()
    await assert_a_process_without_key_a_says_so(codec_stack, raw_client, run_early, id_a, marker, only_b)


async def assert_a_process_without_key_a_says_so(
    codec_stack: DevStack, raw_client: Client, run_early: str, id_a: str, marker: str, only_b: dict[str, str]
) -> None:
    """A process with only B: the clear error for what A wrote, and nothing decoded; the stack's
    codec server (the dev key only) says the same to the UI."""
    refused = await acli([str(PITSTOP), "status", run_early, "--json"], only_b)
    assert refused.returncode == 1
    message = " ".join(refused.stderr.split())
    assert (
        f"payload was encrypted with key id '{id_a}' which this process does not have; add it to "
        "PITSTOP_CODEC_KEY or PITSTOP_CODEC_KEY_FILE after the active key" in message
    ), refused.stderr
    assert "Traceback" not in refused.stderr and marker not in refused.stdout + refused.stderr
    # The stack's codec server (the dev key only) says the same to the UI.
    early_history = await raw_client.get_workflow_handle(run_early).fetch_history()
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            f"{codec_stack.codec_endpoint}/decode",
            content=ui_body(payloads_in(json.loads(early_history.to_json()))),
            headers={
                "Origin": codec_stack.ui_url,
                "Content-Type": "application/json",
                "X-Namespace": "default",
            },
        )
    assert answer.status_code == 400
    assert answer.json()["error"].startswith(f"payload was encrypted with key id '{id_a}' which this process")
    assert marker not in answer.text


# -- schedules ----------------------------------------------------------------------------------------


async def test_schedules_store_encrypted_arguments_and_apply_stays_idempotent(
    codec_stack: DevStack, raw_client: Client, tmp_path: Path
) -> None:
    from pitstop.client import connect

    marker, tag = uuid.uuid4().hex[:12], uuid.uuid4().hex[:8]
    client = await connect(Settings(temporal_address=codec_stack.temporal_address, home=codec_stack.home))
    path = tmp_path / "schedules.yaml"
    schedule_id = f"codec-schedule-{tag}"
    path.write_text(
        textwrap.dedent(
            f"""
            schedules:
              - id: {schedule_id}
                runbook: examples/hello.yaml
                cron: "7 * * * *"
                paused: true
                note: never runs in this test
                vars: {{token: "var-{marker}"}}
            """
        )
    )
    desired = load_schedules(path, check_runbooks=False)
    try:
        assert [o.action for o in await apply_schedules(client, desired, "codec-schedules")] == ["created"]
        assert [o.action for o in await apply_schedules(client, desired, "codec-schedules")] == ["unchanged"]
        described = await raw_client.get_schedule_handle(schedule_id).describe()
        action = described.schedule.action
        stored = [*getattr(action, "args", []), *(getattr(action, "memo", None) or {}).values()]
        assert stored and all(
            isinstance(p, Payload) and p.metadata["encoding"] == b"binary/encrypted" for p in stored
        )
        assert all(marker.encode() not in p.SerializeToString() for p in stored)
    finally:
        await client.get_schedule_handle(schedule_id).delete()


# -- unusable keys ----------------------------------------------------------------------------------


async def test_unusable_keys_stop_every_process_before_it_touches_temporal(
    codec_stack: DevStack, raw_client: Client, tmp_path: Path
) -> None:
    short = "k1:" + base64.b64encode(b"too short").decode()
    env = clean_env(TEMPORAL_ADDRESS=codec_stack.temporal_address, PITSTOP_CODEC_KEY=short)
    runbook = tmp_path / "runbook.yaml"
    runbook.write_text(textwrap.dedent(ROTATION.format(marker="x", gate="")))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(LAB_INVENTORY)
    run_id = f"bad-key-{uuid.uuid4().hex[:8]}"
    expected = (
        "payload encryption keys: PITSTOP_CODEC_KEY, key id 'k1': the key is 9 bytes; AES-256-GCM needs "
        "exactly 32 (generate one with `pitstop codec keygen`)"
    )
    for argv, code in (
        ([str(PITSTOP), "run", str(runbook), "-i", str(inventory), "--id", run_id], 1),
        ([sys.executable, "worker.py"], 2),
        ([sys.executable, "-m", "pitstop.cli.codec", "serve", "--port", "0"], 2),
    ):
        done = await acli(argv, env)
        assert done.returncode == code, done.stdout + done.stderr
        shown = " ".join(done.stderr.split())
        assert expected.removeprefix("payload encryption keys: ") in shown, done.stderr
        assert "Traceback" not in done.stderr
        assert short.split(":")[1] not in done.stdout + done.stderr
    # Nothing was started (describe reads the execution itself, not eventually-consistent visibility).
    with pytest.raises(RPCError) as missing:
        await raw_client.get_workflow_handle(run_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND


# -- the Slack bridge ---------------------------------------------------------------------------------

SLACK_GATED = """
name: codec-slack
approvers:
  sre: [bob]
stages:
  - name: only
    hosts: lab
    gate: {{before: true, approvers: sre, slack_channel: "#ops", prompt: "Go ahead?"}}
    tasks:
      - debug: {{msg: "debug-{marker} {{{{ token }}}}"}}
"""


@pytest.mark.timeout(600)
async def test_votes_from_the_slack_bridge_are_encrypted_with_the_same_keys(
    codec_stack: DevStack, raw_client: Client, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    from tests.integration.slack.slackfake import BOT_TOKEN, SIGNING_SECRET, Clicker, FakeSlack

    marker, tag = uuid.uuid4().hex[:12], uuid.uuid4().hex[:8]
    slack = FakeSlack()
    await slack.start()
    approvers = tmp_path / "slack-approvers.yaml"
    approvers.write_text("users:\n  U0BOB: bob\n")
    port = free_port()
    env = clean_env(
        TEMPORAL_ADDRESS=codec_stack.temporal_address,
        PITSTOP_HOME=str(codec_stack.home),
        PITSTOP_TASK_QUEUE=f"codec-slack-{tag}",
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
        SLACK_DEFAULT_CHANNEL="#runs",
        PITSTOP_SLACK_APPROVERS=str(approvers),
        OTEL_TRACES_EXPORTER="none",
    )
    bridge = spawn_bridge(env, port)
    try:
        worker = WorkerProcess(env, tmp_path / "worker.log")
        workers.append(worker)
        await worker.start()

        async def bridge_up() -> bool:
            assert bridge.poll() is None, f"the bridge exited with {bridge.returncode}"
            try:
                async with httpx.AsyncClient(timeout=2) as http:
                    return (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await until("the Slack bridge to serve", bridge_up, 90)
        runbook, inventory = tmp_path / "runbook.yaml", tmp_path / "inventory.yaml"
        runbook.write_text(textwrap.dedent(SLACK_GATED.format(marker=marker)))
        inventory.write_text(LAB_INVENTORY)
        run_id = f"codec-slack-{tag}"
        started = await start_run(runbook, inventory, run_id, marker, env)
        assert started.returncode == 0, started.stderr
        posted = await slack.wait_for("chat.postMessage", lambda c: "Approval needed" in c.args["text"])
        assert (
            await Clicker(url=f"http://127.0.0.1:{port}/slack/events").click(posted, "U0BOB")
        ).status_code == 200

        async def finished() -> dict[str, Any] | None:
            report = await status_json(run_id, env)
            return report if report is not None and report["status"] == "succeeded" else None

        report = await until("the run to finish after the Slack vote", finished, 180)
        assert [v["approver"] for v in report["gates"][0]["votes"]] == ["bob"]
        assert f"debug-{marker} var-{marker}" in json.dumps(report)
        await assert_the_vote_is_ciphertext_under_the_home_key(codec_stack, raw_client, run_id, marker)
    finally:
        bridge.send_signal(signal.SIGTERM)
        try:
            bridge.wait(timeout=30)
        except subprocess.TimeoutExpired:
            bridge.kill()
            bridge.wait(timeout=10)
        await slack.stop()


async def assert_the_vote_is_ciphertext_under_the_home_key(
    codec_stack: DevStack, raw_client: Client, run_id: str, marker: str
) -> None:
    """The vote the bridge sent is in history as ciphertext under the home's key."""
    raw = (await raw_client.get_workflow_handle(run_id).fetch_history()).to_json()
    assert marker not in raw
    accepted = [
        e["workflowExecutionUpdateAcceptedEventAttributes"]["acceptedRequest"]["input"]["args"]["payloads"]
        for e in json.loads(raw)["events"]
        if "workflowExecutionUpdateAcceptedEventAttributes" in e
    ]
    assert len(accepted) == 1
    [vote] = payloads_in(accepted[0])
    keyring = parse_keyring((codec_stack.home / "codec.keys").read_text(), "home")
    assert vote.metadata["encoding"] == b"binary/encrypted"
    assert vote.metadata["encryption-key-id"].decode() == keyring.active.key_id
    assert b'"approver":"bob"' in AesGcmCodec(keyring).decrypt(vote).data


def spawn_bridge(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """`pitstop slack serve` as the compose service runs it."""
    argv = [
        str(PITSTOP),
        "slack",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
    ]
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
