"""The etcd.* activities called directly against real etcd processes: idempotency, the
live-data-directory guard, corrupt snapshots, and TLS material from secret references."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.exceptions import ApplicationError

from activities.etcd import (
    etcd_restore,
    etcd_scratch_member,
    etcd_snapshot_save,
    etcd_snapshot_status,
    etcd_verify,
)
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.devstack import etcd_tool, free_port, process_alive
from tests.integration.etcd.conftest import put_nodes, settled_digest
from tests.policy_site import PolicyLayer


@pytest.fixture(autouse=True)
def _site_directories(worker_policy: PolicyLayer, tmp_path: Path) -> None:
    # Snapshots and scratch directories go where the operator lets modules write.
    worker_policy.allow_write(tmp_path)


def call(module: str, args: dict[str, Any], check_mode: bool = False) -> ModuleCall:
    return ModuleCall(
        module=module, host="localhost", args=args, check_mode=check_mode, run_id="run-t", task_path="t"
    )


def save(endpoint: str, dest: Path, **extra: Any) -> ModuleResult:
    return etcd_snapshot_save(
        call("etcd.snapshot_save", {"endpoints": [endpoint], "dest": str(dest), **extra})
    )


def test_save_restore_start_verify_stop_each_report_no_change_the_second_time(
    etcd_endpoint: str, cluster: str, tmp_path: Path, live_data_dir: Path
) -> None:
    put_nodes(etcd_endpoint, cluster, 2)
    snap = tmp_path / "backups" / "snap.db"
    first = save(etcd_endpoint, snap, count_prefixes=[f"/registry/minions/{cluster}"])
    again = save(etcd_endpoint, snap, count_prefixes=[f"/registry/minions/{cluster}"])
    assert first.changed and not again.changed
    assert again.data == first.data, "a retried save reports the snapshot it already took"
    assert first.data["prefix_counts"] == {f"/registry/minions/{cluster}": 2}
    assert snap.stat().st_mode & 0o777 == 0o600

    scratch = tmp_path / "drill"
    guard = {"scratch_dir": str(scratch), "live_data_dirs": [str(live_data_dir)]}
    restored = etcd_restore(call("etcd.restore", {"snapshot": str(snap), **guard}))
    restored_again = etcd_restore(call("etcd.restore", {"snapshot": str(snap), **guard}))
    assert restored.changed and not restored_again.changed
    assert restored.data["cluster_token"].startswith("pitstop-drill-"), "a new cluster, never the live one's"

    started = etcd_scratch_member(call("etcd.scratch_member", {"action": "start", **guard}))
    try:
        again_started = etcd_scratch_member(call("etcd.scratch_member", {"action": "start", **guard}))
        assert started.changed and not again_started.changed
        assert again_started.data["pid"] == started.data["pid"]
        verified = etcd_verify(
            call(
                "etcd.verify",
                {
                    "endpoints": started.data["endpoints"],
                    "revision": first.data["revision"],
                    "expected_keys": first.data["live_keys"],
                    "expected_counts": first.data["prefix_counts"],
                    "prefixes": {f"/registry/minions/{cluster}": {"min": 2, "max": 2}},
                },
            )
        )
        assert not verified.failed, verified.msg
        assert {c["check"] for c in verified.data["checks"]} >= {"revision", "live keys"}
        assert any(c["check"].startswith("read /registry/minions/") for c in verified.data["checks"])
    finally:
        stopped = etcd_scratch_member(call("etcd.scratch_member", {"action": "stop", **guard}))
    assert stopped.changed and stopped.data["stopped"] and stopped.data["removed"]
    assert not process_alive(started.data["pid"]) and not scratch.exists()
    assert not etcd_scratch_member(call("etcd.scratch_member", {"action": "stop", **guard})).changed


def test_verify_fails_with_each_difference_named(etcd_endpoint: str, cluster: str, tmp_path: Path) -> None:
    put_nodes(etcd_endpoint, cluster, 1)
    result = etcd_verify(
        call(
            "etcd.verify",
            {
                "endpoints": [etcd_endpoint],
                "revision": 1,
                "prefixes": {f"/registry/minions/{cluster}": {"min": 5}},
                "expected_counts": {f"/registry/minions/{cluster}": 7},
            },
        )
    )
    assert result.failed and result.data["passed"] is False
    assert "revision: expected 1, got" in result.msg
    assert f"keys under /registry/minions/{cluster}: expected >= 5, got 1" in result.msg
    assert f"count of /registry/minions/{cluster}: expected 7, got 1" in result.msg


@pytest.mark.parametrize("where", ["inside", "equal", "containing"])
def test_a_scratch_directory_overlapping_the_live_data_directory_is_refused(
    where: str, etcd_endpoint: str, tmp_path: Path, live_data_dir: Path, worker_policy: PolicyLayer
) -> None:
    snap = tmp_path / "snap.db"
    save(etcd_endpoint, snap)
    # Even where the operator lets modules write (say all of /var/lib), a live member's data
    # directory stays out of reach of a drill.
    worker_policy.allow_write(live_data_dir.parent)
    scratch = {"inside": live_data_dir / "drill", "equal": live_data_dir, "containing": live_data_dir.parent}[
        where
    ]
    guard = {"scratch_dir": str(scratch), "live_data_dirs": [str(live_data_dir)]}
    before = settled_digest(live_data_dir)

    for attempt in (
        lambda: etcd_restore(call("etcd.restore", {"snapshot": str(snap), **guard})),
        lambda: etcd_restore(call("etcd.restore", {"snapshot": str(snap), **guard}, check_mode=True)),
        lambda: etcd_scratch_member(call("etcd.scratch_member", {"action": "start", **guard})),
        lambda: etcd_scratch_member(call("etcd.scratch_member", {"action": "stop", **guard})),
    ):
        with pytest.raises(ApplicationError) as refused:
            attempt()
        assert refused.value.type == "PolicyViolation" and refused.value.non_retryable
        assert "the live etcd data directory" in refused.value.message
        assert "A drill must never touch a live member's data" in refused.value.message

    assert settled_digest(live_data_dir) == before
    assert not (live_data_dir / "drill").exists()


def test_a_directory_not_made_by_pitstop_is_neither_claimed_nor_removed(
    etcd_endpoint: str, tmp_path: Path
) -> None:
    snap = tmp_path / "snap.db"
    save(etcd_endpoint, snap)
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    guard = {"scratch_dir": str(precious), "live_data_dirs": []}
    with pytest.raises(ApplicationError, match=r"already holds notes.txt and was not made by pitstop"):
        etcd_restore(call("etcd.restore", {"snapshot": str(snap), **guard}))
    with pytest.raises(ApplicationError, match=r"not made by pitstop .* not removing it"):
        etcd_scratch_member(call("etcd.scratch_member", {"action": "stop", **guard}))
    assert (precious / "notes.txt").read_text() == "keep me"


def test_restoring_a_snapshot_with_a_damaged_integrity_hash_names_both_digests(
    etcd_endpoint: str, tmp_path: Path
) -> None:
    snap = tmp_path / "snap.db"
    save(etcd_endpoint, snap)
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the sha256 etcd appends to every snapshot
    snap.write_bytes(bytes(data))
    scratch = tmp_path / "drill"

    with pytest.raises(ApplicationError) as failed:
        etcd_restore(call("etcd.restore", {"snapshot": str(snap), "scratch_dir": str(scratch)}))

    assert failed.value.type == "SnapshotCorrupt" and failed.value.non_retryable
    message = failed.value.message
    assert message.startswith(f"snapshot integrity check failed for {snap}: etcdutl found sha256 ")
    assert "the file is corrupt or truncated" in message
    recorded = bytes(data[-32:]).hex()
    assert f"where the snapshot records {recorded}" in message
    assert not (scratch / "data").exists() and not (scratch / "data.partial").exists()


def test_status_of_a_missing_file_is_a_precondition_and_skipped_in_check_mode(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(ApplicationError, match=f"snapshot file {missing} does not exist"):
        etcd_snapshot_status(call("etcd.snapshot_status", {"path": str(missing)}))
    planned = etcd_snapshot_status(call("etcd.snapshot_status", {"path": str(missing)}, check_mode=True))
    assert planned.skipped and planned.data["revision"] is None


# ------------------------------------------------------------------ TLS from secrets


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, signer = issuer if issuer else (name, key)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@pytest.fixture
def tls_etcd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An etcd requiring client certificates; the client's material is in PITSTOP_SECRET_* vars."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("pitstop-test-ca", ca_key, None)
    server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    server = _cert("etcd", server_key, (ca.subject, ca_key))
    client = _cert("root", client_key, (ca.subject, ca_key))
    pki = tmp_path / "pki"
    pki.mkdir()
    for name, text in {
        "ca.crt": _pem(ca),
        "server.crt": _pem(server),
        "server.key": _key_pem(server_key),
    }.items():
        (pki / name).write_text(text)
    monkeypatch.setenv("PITSTOP_SECRET_ETCD_CLIENT_CA_CRT", _pem(ca))
    monkeypatch.setenv("PITSTOP_SECRET_ETCD_CLIENT_TLS_CRT", _pem(client))
    monkeypatch.setenv("PITSTOP_SECRET_ETCD_CLIENT_TLS_KEY", _key_pem(client_key))
    client_url, peer_url = f"https://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [
            str(etcd_tool("etcd")),
            "--name=tls",
            f"--data-dir={tmp_path / 'data'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=tls={peer_url}",
            f"--cert-file={pki / 'server.crt'}",
            f"--key-file={pki / 'server.key'}",
            f"--trusted-ca-file={pki / 'ca.crt'}",
            "--client-cert-auth",
            "--log-level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        (pki / "client.crt").write_text(_pem(client))
        (pki / "client.key").write_text(_key_pem(client_key))
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
        for _ in range(100):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{client_url}/health", verify=context, timeout=1.0).status_code == 200:
                    break
            time.sleep(0.1)
        tls = [f"--cacert={pki / 'ca.crt'}", f"--cert={pki / 'client.crt'}", f"--key={pki / 'client.key'}"]
        subprocess.run(
            [str(etcd_tool("etcdctl")), f"--endpoints={client_url}", *tls, "put", "/tls/probe", "yes"],
            check=True,
            capture_output=True,
        )
        yield client_url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_snapshot_over_tls_uses_material_from_secrets_and_leaves_none_behind(
    tls_etcd: str, tmp_path: Path, worker_policy: PolicyLayer
) -> None:
    worker_policy.allow_etcd(tls_etcd).grant("etcd-client", "etcd_tls", endpoints=[tls_etcd])
    refs = {
        "cacert": {"secret": "etcd-client", "key": "ca.crt"},
        "cert": {"secret": "etcd-client", "key": "tls.crt"},
        "key": {"secret": "etcd-client", "key": "tls.key"},
    }
    tls_dirs = lambda: set(Path(tempfile.gettempdir()).glob("pitstop-etcd-tls-*"))  # noqa: E731
    before = tls_dirs()

    result = save(tls_etcd, tmp_path / "tls.db", **refs)

    assert result.changed and result.data["tls"] is True
    assert result.data["live_keys"] == 1 and result.data["revision"] == 2
    assert tls_dirs() == before, "the TLS material is removed after each command"
    assert "PRIVATE KEY" not in result.model_dump_json()

    without_client_cert = {"cacert": refs["cacert"], "dial_timeout_s": 1}
    with pytest.raises(ApplicationError, match="no etcd endpoint answered"):
        save(tls_etcd, tmp_path / "refused.db", **without_client_cert)


def test_a_missing_tls_secret_names_where_it_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker_policy: PolicyLayer
) -> None:
    worker_policy.allow_etcd("https://127.0.0.1:1").grant("nope", "etcd_tls")
    monkeypatch.delenv("PITSTOP_SECRETS_DIR", raising=False)
    with pytest.raises(ApplicationError) as missing:
        save("https://127.0.0.1:1", tmp_path / "x.db", cacert={"secret": "nope", "key": "ca.crt"})
    assert missing.value.type == "PreconditionFailed"
    assert "etcd TLS cacert: secret 'nope' (key 'ca.crt') not found" in missing.value.message
    assert "PITSTOP_SECRET_NOPE_CA_CRT" in missing.value.message
