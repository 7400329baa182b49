"""pitstop vs ansible-playbook over SSH: `python bench/ssh_vs_ansible.py [--hosts 20]`.

The same 10-command runbook on N real OpenSSH sshd hosts (one sshd per host, each on its
own loopback port with its own host key, see tests/sshd.py):

- pitstop: the runbook runs through the engine (RunbookWorkflow -> one HostWorkflow per
  host -> one `ssh.command` activity per task) on the embedded Temporal dev server, with a
  worker in this process; SSH goes through the worker's connection pool, host keys are
  checked against the generated known_hosts.
- Ansible: `ansible-playbook` with the same 10 `ansible.builtin.command` tasks, forks = N,
  pipelining on, SSH ControlPersist (Ansible's default), host_key_checking against the same
  known_hosts, no fact gathering. ansible-core comes from PyPI into its own venv in the user's
  cache (~/.cache/pitstop/ansible-venv, created on the first run): outside the project tree, so
  it never changes the project's venv and its code is never mistaken for pitstop's.

Each side runs twice: cold (no SSH connection open yet) and warm (pitstop's pool and
Ansible's ControlPersist masters already up). The cold wall-time ratio decides PASS/MISS
against the target (pitstop at least 5x faster). Both sides pay the same sshd on the same
two cores; every task must succeed on every host or the run counts as an error.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _common import BENCH_ACTIVITIES, NOOP_MODULE  # noqa: E402
from temporalio.client import Client  # noqa: E402

from activities import ACTIVITIES  # noqa: E402
from pitstop.client import connect  # noqa: E402
from pitstop.contracts import RunReport, RunRequest  # noqa: E402
from pitstop.devstack import DevStack, free_ports_config  # noqa: E402
from pitstop.settings import Settings  # noqa: E402
from pitstop.ssh import close_all  # noqa: E402
from pitstop.worker_app import WorkerKeys, build_worker  # noqa: E402
from tests.sshd import SshdUnavailable, SshServer, client_key, ensure_sshd, start_servers, write_known_hosts  # noqa: E402
from workflows import WORKFLOWS  # noqa: E402

TARGET_RATIO = 5.0
COMMANDS = [
    "uname -r",
    "cat /proc/sys/kernel/random/boot_id",
    "hostname",
    "uptime",
    "cat /proc/loadavg",
    "df -P /",
    "free -m",
    "id -un",
    "ls /etc/ssh",
    "cat /etc/os-release",
]
KEY_SECRET = "bench-ssh-key"
ANSIBLE_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pitstop" / "ansible-venv"


# --- pitstop ---------------------------------------------------------------------------
def pitstop_files(servers: list[SshServer], known_hosts: Path, module: str = "ssh.command") -> dict[str, str]:
    """The runbook and inventory; with the no-op module instead, the engine's floor."""
    if module == "ssh.command":
        tasks = [f"  - name: c{i:02d}\n    ssh.command: {cmd!r}\n" for i, cmd in enumerate(COMMANDS, 1)]
    else:
        tasks = [f"  - name: c{i:02d}\n    {module}: {{}}\n" for i in range(1, len(COMMANDS) + 1)]
    runbook = "name: ssh-bench\nhosts: nodes\ntasks:\n" + "".join(tasks)
    hosts = "".join(
        f"        node-{i:02d}: {{ansible_host: 127.0.0.1, ansible_port: {s.port}}}\n"
        for i, s in enumerate(servers)
    )
    inventory = textwrap.dedent(
        f"""\
        cluster:
          name: bench
          ssh:
            user: root
            key: {{secret: {KEY_SECRET}}}
            known_hosts: {known_hosts}
        all:
          children:
            nodes:
              hosts:
        """
    )
    return {"runbook.yaml": runbook, "inventory.yaml": inventory + hosts}


def check_report(report: RunReport, hosts: int, status: str) -> None:
    """Every task on every host must have succeeded, or the timing means nothing."""
    if report.status != "succeeded":
        raise SystemExit(f"pitstop run ended {report.status}: {report.msg}")
    results = report.stages[0].hosts
    tasks = [t for h in results for t in h.tasks]
    bad = [f"{h.host}:{t.name}:{t.status}:{t.msg}" for h in results for t in h.tasks if t.status != status]
    if len(results) != hosts or len(tasks) != hosts * len(COMMANDS) or bad:
        raise SystemExit(f"pitstop: expected {hosts}x{len(COMMANDS)} {status} tasks; problems: {bad[:5]}")


async def run_pitstop(
    servers: list[SshServer], known_hosts: Path, home: Path, repeat: int
) -> tuple[float, float, float]:
    """Best (cold, warm, floor) of `repeat` rounds: the SSH runbook with the pool emptied
    first, again with the pool warm, then the same runbook of no-op activities."""
    files = pitstop_files(servers, known_hosts)
    floor_files = pitstop_files(servers, known_hosts, module=NOOP_MODULE)
    config = free_ports_config(home, parts=("temporal",))
    with DevStack(config).running(timeout=60) as stack:
        client = await connect(Settings(temporal_address=stack.temporal_address, home=stack.home))
        queue = f"bench-ssh-{uuid.uuid4().hex[:8]}"
        keys = WorkerKeys.load(stack.home)  # the bench stack's own keys
        async with build_worker(client, queue, WORKFLOWS, [*ACTIVITIES, *BENCH_ACTIVITIES], keys=keys):
            # Warm the engine (workflow sandbox, plan loading) without touching SSH.
            check_report(await _run(client, queue, floor_files), len(servers), "ok")
            rounds: list[list[float]] = []
            for _ in range(repeat):
                close_all()  # cold: no SSH connection open
                timings = []
                for run_files, status in ((files, "changed"), (files, "changed"), (floor_files, "ok")):
                    started = time.perf_counter()
                    report = await _run(client, queue, run_files)
                    timings.append(time.perf_counter() - started)
                    check_report(report, len(servers), status)
                rounds.append(timings)
        close_all()
    cold, warm, floor = (min(column) for column in zip(*rounds, strict=True))
    return cold, warm, floor


async def _run(client: Client, queue: str, files: dict[str, str]) -> RunReport:
    request = RunRequest(
        runbook="runbook.yaml", inventory="inventory.yaml", files=files, requested_by="bench"
    )
    handle = await client.start_workflow(
        "RunbookWorkflow",
        request,
        id=f"bench-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
        result_type=RunReport,
    )
    return await handle.result()


# --- Ansible ---------------------------------------------------------------------------
def ansible_playbook() -> Path:
    found = shutil.which("ansible-playbook")
    if found:
        return Path(found)
    local = ANSIBLE_VENV / "bin" / "ansible-playbook"
    if not local.exists():
        print(f"installing ansible-core from PyPI into {ANSIBLE_VENV} (first run only)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True)
        pip = [str(ANSIBLE_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "ansible-core"], check=True)
    return local


def ansible_files(work: Path, servers: list[SshServer], known_hosts: Path, key: Path) -> Path:
    control = Path(tempfile.mkdtemp(prefix="pa-cp-", dir="/tmp"))  # short: unix socket paths are limited
    hosts = "".join(
        f"node-{i:02d} ansible_host=127.0.0.1 ansible_port={s.port} ansible_user=root\n"
        for i, s in enumerate(servers)
    )
    (work / "inventory.ini").write_text(f"[nodes]\n{hosts}")
    tasks = "".join(
        f"    - name: c{i:02d}\n      ansible.builtin.command: {cmd!r}\n" for i, cmd in enumerate(COMMANDS, 1)
    )
    (work / "playbook.yml").write_text(f"- hosts: nodes\n  gather_facts: false\n  tasks:\n{tasks}")
    ssh_known = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    cfg = work / "ansible.cfg"
    cfg.write_text(
        textwrap.dedent(
            f"""\
            [defaults]
            inventory = {work / "inventory.ini"}
            forks = {len(servers)}
            host_key_checking = True
            gathering = explicit
            interpreter_python = /usr/bin/python3
            private_key_file = {key}
            local_tmp = {work / "ansible-local"}
            remote_tmp = /tmp/.ansible-bench
            retry_files_enabled = False

            [ssh_connection]
            pipelining = True
            control_path_dir = {control}
            ssh_args = -o ControlMaster=auto -o ControlPersist=120s {ssh_known}
            """
        )
    )
    return cfg


def run_ansible(playbook: Path, cfg: Path, hosts: int) -> float:
    env = {**os.environ, "ANSIBLE_CONFIG": str(cfg), "ANSIBLE_NOCOLOR": "1"}
    started = time.perf_counter()
    proc = subprocess.run(
        [str(playbook), str(cfg.parent / "playbook.yml")],
        env=env,
        capture_output=True,
        text=True,
        cwd=cfg.parent,
    )
    elapsed = time.perf_counter() - started
    recap = [line for line in proc.stdout.splitlines() if line.startswith("node-") and "changed=" in line]
    ok = (
        proc.returncode == 0
        and len(recap) == hosts
        and all(f"changed={len(COMMANDS)}" in r and "failed=0" in r for r in recap)
    )
    if not ok:
        raise SystemExit(
            f"ansible-playbook failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        )
    return elapsed


def control_dir(cfg: Path) -> Path:
    line = next(x for x in cfg.read_text().splitlines() if x.startswith("control_path_dir"))
    return Path(line.split("=", 1)[1].strip())


def stop_controlmasters(cfg: Path) -> None:
    """Ansible's persistent SSH masters exit: the next run starts cold."""
    for sock in control_dir(cfg).glob("*"):
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={sock}", "x"], capture_output=True)
        sock.unlink(missing_ok=True)


def run_ansible_rounds(playbook: Path, cfg: Path, hosts: int, repeat: int) -> tuple[float, float]:
    """Best (cold, warm) of `repeat` rounds."""
    cold, warm = [], []
    for _ in range(repeat):
        stop_controlmasters(cfg)
        cold.append(run_ansible(playbook, cfg, hosts))
        warm.append(run_ansible(playbook, cfg, hosts))
    stop_controlmasters(cfg)
    return min(cold), min(warm)


# --- main --------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=20, help="sshd hosts on loopback (default 20)")
    parser.add_argument(
        "--repeat", type=int, default=2, help="rounds per side; the best is kept (the machine is shared)"
    )
    opts = parser.parse_args()
    try:
        ensure_sshd()
    except SshdUnavailable as exc:
        print(f"SKIP: {exc}")
        return 0
    playbook = ansible_playbook()
    version = subprocess.run(
        [str(playbook), "--version"], capture_output=True, text=True
    ).stdout.splitlines()[0]
    with tempfile.TemporaryDirectory(prefix="pitstop-bench-ssh-") as tmp:
        work = Path(tmp)
        key = client_key(work / "client")
        os.environ[f"PITSTOP_SECRET_{KEY_SECRET.upper().replace('-', '_')}"] = key.private_text
        print(f"starting {opts.hosts} sshd hosts on loopback...", flush=True)
        servers = start_servers(work / "hosts", opts.hosts, [key.public_line])
        known = write_known_hosts(work / "known_hosts", servers)
        cfg = ansible_files(work, servers, known, key.path)
        try:
            ansible_cold, ansible_warm = run_ansible_rounds(playbook, cfg, opts.hosts, opts.repeat)
            pitstop_cold, pitstop_warm, floor = asyncio.run(
                run_pitstop(servers, known, work / "pitstop-home", opts.repeat)
            )
        finally:
            stop_controlmasters(cfg)
            shutil.rmtree(control_dir(cfg), ignore_errors=True)
            for server in servers:
                server.stop()
    n = opts.hosts * len(COMMANDS)
    print(f"\n{len(COMMANDS)} commands x {opts.hosts} hosts = {n} remote commands ({version})")
    print(f"best of {opts.repeat} rounds; cold = no SSH connection open at the start")
    print(f"{'':22}{'cold':>10}{'warm':>10}")
    print(f"{'ansible-playbook':22}{ansible_cold:>9.2f}s{ansible_warm:>9.2f}s")
    print(f"{'pitstop (engine)':22}{pitstop_cold:>9.2f}s{pitstop_warm:>9.2f}s")
    print(f"{'engine floor (no-op)':22}{floor:>9.2f}s   (same runbook, no-op activities: Temporal's share)")
    ratio_cold, ratio_warm = ansible_cold / pitstop_cold, ansible_warm / pitstop_warm
    print(f"{'ratio ansible/pitstop':22}{ratio_cold:>9.1f}x{ratio_warm:>9.1f}x")
    verdict = "PASS" if ratio_cold >= TARGET_RATIO else "MISS"
    target = f"target >= {TARGET_RATIO:g}x"
    print(f"{verdict}: pitstop is {ratio_cold:.1f}x faster than ansible-playbook cold ({target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
