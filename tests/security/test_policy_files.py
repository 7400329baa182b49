# ruff: noqa: F811  (pytest fixtures imported from the engine and kube fixtures by name)
"""Worker policy, files rule: a runbook cannot make the worker write or read a file outside the
directories its operator allows (issue #13).

Attacks tried here, each refused before any side effect: `storage.download` writing a `.pth`
into site-packages (code that would run at the next Python start), climbing out of the run's
work directory with `..` or a symlink (also one swapped in after the check), `etcd.*` writing
snapshots and scratch directories elsewhere, `kube.apply` reading another cluster's kubeconfig,
and a run request or `import_tasks` naming a worker file instead of a runbook.
"""

from __future__ import annotations

import hashlib
import site
import sysconfig
import textwrap
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.etcd import etcd_restore, etcd_snapshot_save
from activities.kube.apply import apply
from activities.storage import download_file, s3_client, storage_download
from pitstop.contracts import ModuleCall, RunReport, RunRequest
from pitstop.module_args.storage import S3Args
from pitstop.policy.files import run_work_dir, writable
from tests.integration.kube.conftest import ModuleRunner, StartSim, module_runner, start_sim  # noqa: F401
from tests.policy_site import PolicyLayer
from tests.security.policy_fixtures import (  # noqa: F401
    engine_worker,
    run,
    run_history_json,
    start_run,
    tasks,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.integration

PAYLOAD = b"import os; os.system('touch /tmp/pwned-by-a-pth')\n"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def evil_object(s3_client: S3Client, s3_endpoint: str, aws: None) -> dict[str, str]:
    """A `.pth` in a bucket the worker may use, stored as a snapshot would be (with sha256)."""
    bucket = f"pth-{uuid.uuid4().hex[:10]}"
    s3_client.create_bucket(Bucket=bucket)
    sha = hashlib.sha256(PAYLOAD).hexdigest()
    s3_client.put_object(Bucket=bucket, Key="evil.pth", Body=PAYLOAD, Metadata={"sha256": sha})
    return {"bucket": bucket, "endpoint_url": s3_endpoint, "addressing_style": "path", "key": "evil.pth"}


def _download_task(name: str, s3: dict[str, str], dest: str, register: str | None = None) -> str:
    args = ", ".join(f"{k}: {v!r}" for k, v in {**s3, "dest": dest}.items())
    return f"  - name: {name}\n    storage.download: {{{args}}}\n" + (
        f"    register: {register}\n" if register else "    ignore_errors: true\n"
    )


async def test_a_download_into_site_packages_or_out_of_the_work_directory_writes_nothing(
    start_run: Any,
    temporal_client: Client,
    evil_object: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    marker = uuid.uuid4().hex[:8]
    outside = tmp_path_factory.mktemp("outside-every-root")
    targets = {
        "user site-packages": f"{site.getusersitepackages()}/pitstop-{marker}.pth",
        "the worker's site-packages": f"{sysconfig.get_paths()['purelib']}/pitstop-{marker}.pth",
        "elsewhere": f"{outside}/pitstop-{marker}.pth",
        "climbing out": f"../../../../../../..{outside}/climbed-{marker}.pth",
    }
    runbook = "name: pth\nhosts: localhost\ntasks:\n" + "".join(
        _download_task(name, evil_object, dest) for name, dest in targets.items()
    )
    runbook += _download_task("into the run's work directory", evil_object, "fetched/evil.pth", "fetched")
    handle = await start_run(runbook)
    report: RunReport = await handle.result()

    outcome = tasks(report)
    for name in targets:
        assert outcome[name].status == "ignored", (name, outcome[name].msg)  # failed, ignore_errors
        assert outcome[name].msg.startswith("PolicyViolation: storage.download: dest: "), outcome[name].msg
    assert "which no module may write (built-in default (the worker's Python installation))" in (
        outcome["the worker's site-packages"].msg
    )
    assert (
        "is outside the directories this worker may write (policy files.write: " in outcome["elsewhere"].msg
    )
    assert "ask the worker's operator to add it to PITSTOP_WORKER_POLICY" in outcome["elsewhere"].msg
    assert f"(resolves to {outside}/climbed-{marker}.pth)" in outcome["climbing out"].msg
    # Nothing was written anywhere but the run's own work directory.
    assert (
        _written(Path(targets["user site-packages"]), Path(targets["the worker's site-packages"]), outside)
        == []
    )
    fetched = run_work_dir(handle.id) / "fetched" / "evil.pth"
    assert outcome["into the run's work directory"].status == "changed"
    assert outcome["into the run's work directory"].data["dest"] == str(fetched)
    assert _bytes(fetched) == PAYLOAD
    assert _mode(run_work_dir(handle.id)) == "0o700"


def _written(*paths: Path) -> list[Path]:
    """Which of these files exist, and what any of these directories holds."""
    found = [p for p in paths if p.is_file()]
    return found + [child for p in paths if p.is_dir() for child in p.iterdir()]


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def _mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def _download_call(s3: dict[str, str], dest: str, run_id: str = "run-symlinks") -> ModuleCall:
    args = {k: v for k, v in s3.items()}
    return ModuleCall(
        module="storage.download", host="localhost", args={**args, "dest": dest}, run_id=run_id, task_path="t"
    )


def test_a_symlink_out_of_the_work_directory_is_refused_even_when_swapped_in_after_the_check(
    evil_object: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("symlink-target")
    work = run_work_dir("run-symlinks")
    work.mkdir(parents=True, exist_ok=True)
    (work / "escape").symlink_to(outside, target_is_directory=True)

    # A symlink already there: the check sees where it leads.
    with pytest.raises(ApplicationError) as linked:
        ActivityEnvironment().run(storage_download, _download_call(evil_object, "escape/evil.pth"))
    assert linked.value.type == "PolicyViolation"
    assert f"escape/evil.pth (resolves to {outside}/evil.pth) is outside the directories" in str(linked.value)

    # Allowed when checked, a symlink swapped in before the write: the write walks the directories
    # without following links, and the file is opened O_NOFOLLOW (the `.part` too).
    allowed = writable("later/evil.pth", run_id="run-symlinks", what="test")
    (work / "later").symlink_to(outside, target_is_directory=True)
    client = s3_client(S3Args(**{k: v for k, v in evil_object.items() if k != "key"}))
    with pytest.raises(ApplicationError) as swapped:
        download_file(client, evil_object["bucket"], "evil.pth", allowed)
    assert swapped.value.type == "PolicyViolation" and "a symlink appeared there" in str(swapped.value)
    (work / "later").unlink()
    (work / "later").mkdir()
    (work / "later" / "evil.pth.part").symlink_to(outside / "planted.pth")
    with pytest.raises(ApplicationError) as planted:
        download_file(client, evil_object["bucket"], "evil.pth", allowed)
    assert planted.value.type == "PolicyViolation"
    assert list(outside.iterdir()) == []


def _etcd_call(module: str, args: dict[str, Any]) -> ModuleCall:
    return ModuleCall(module=module, host="localhost", args=args, run_id="run-etcd-paths", task_path="t")


def test_etcd_snapshots_and_scratch_directories_stay_where_the_worker_may_write(
    etcd_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("etcd-outside")
    with pytest.raises(ApplicationError) as save:
        etcd_snapshot_save(
            _etcd_call("etcd.snapshot_save", {"endpoints": [etcd_endpoint], "dest": f"{outside}/snap.db"})
        )
    assert save.value.type == "PolicyViolation" and save.value.non_retryable
    assert (
        f"etcd.snapshot_save: dest: {outside}/snap.db is outside the directories this worker may write"
        in (str(save.value))
    )
    with pytest.raises(ApplicationError) as restore:
        etcd_restore(_etcd_call("etcd.restore", {"snapshot": "snap.db", "scratch_dir": f"{outside}/scratch"}))
    assert "etcd.restore: scratch_dir: " in str(restore.value) and restore.value.type == "PolicyViolation"
    assert list(outside.iterdir()) == []
    # Where it may: a relative path lands in the run's own work directory.
    saved = etcd_snapshot_save(
        _etcd_call("etcd.snapshot_save", {"endpoints": [etcd_endpoint], "dest": "backups/snap.db"})
    )
    assert saved.data["path"] == str(run_work_dir("run-etcd-paths") / "backups" / "snap.db")


def test_kube_apply_cannot_read_another_clusters_kubeconfig_or_any_worker_file(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim("cluster: {nodes: 1, domains: 1}")
    other = sim.register("other-cluster")
    before = sim.list("configmaps")
    for src, refusal in (
        (str(other / "kubeconfig"), "which no module may read (clusters_dir (cluster credentials))"),
        ("/etc/passwd", "is outside the directories this worker may read"),
        ("../../../../../../etc", "is outside the directories this worker may read"),
    ):
        with pytest.raises(ApplicationError) as refused:
            module_runner(apply, sim, {"src": [src]})
        assert refused.value.type == "PolicyViolation", src
        assert refusal in str(refused.value)
        assert "root:x:0:0" not in str(refused.value) and "pitstop-sim-token" not in str(refused.value)
    assert sim.list("configmaps") == before


async def test_a_run_request_or_an_import_naming_a_worker_file_reads_nothing(
    temporal_client: Client, engine_worker: str, start_run: Any
) -> None:
    secret_line = _bytes(Path("/etc/passwd")).decode().splitlines()[0]
    direct = await temporal_client.start_workflow(
        "RunbookWorkflow",
        RunRequest(runbook="/etc/passwd", requested_by="attacker"),
        id=f"run-{uuid.uuid4().hex[:10]}",
        task_queue=engine_worker,
        result_type=RunReport,
    )
    refused = await direct.result()
    assert refused.status == "failed"
    assert "plan.load: runbook '/etc/passwd' is outside the runbook directory" in refused.msg
    assert secret_line not in await run_history_json(temporal_client, direct)

    imported = await start_run(
        textwrap.dedent(
            """
            name: importer
            hosts: localhost
            tasks:
              - import_tasks: ../../../../../../../../etc/passwd
            """
        )
    )
    report = await imported.result()
    assert report.status == "failed"
    assert "import_tasks: ../../../../../../../../etc/passwd is outside the runbook directory" in report.msg
    assert "runbook.yaml:5:" in report.msg
    assert secret_line not in await run_history_json(temporal_client, imported)


def test_paths_never_name_the_workers_home_with_a_tilde(worker_policy: PolicyLayer) -> None:
    with pytest.raises(ApplicationError) as refused:
        writable("~/.bashrc", run_id="r", what="storage.download: dest")
    assert refused.value.type == "PolicyViolation"
    assert "~/.bashrc starts with '~'; paths in runbooks never name the worker user's home" in str(
        refused.value
    )
