"""deploy/dev_secrets.py: the compose stack's development CA, certificates, keys and UI login.

The certificates are checked the way the parties will use them: a real TLS handshake (Python's
OpenSSL, which checks extended key usage as Go's crypto/tls does) between the frontend
certificate and each client certificate, with client certificates required.
"""

from __future__ import annotations

import base64
import importlib.util
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "dev_secrets.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_secrets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dev_secrets = _load()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("secrets")
    written, password = dev_secrets.make_all(out, ui_password="correct horse")
    assert password is None  # given, so not echoed
    assert len(written) == 2 + 2 * (2 + len(dev_secrets.CLIENTS)) + 4
    return out


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_every_certificate_is_issued_by_the_ca_and_matches_its_key(made: Path) -> None:
    ca = _cert(made / "tls" / "ca.pem")
    names = ["temporal-frontend", "temporal-internode", *dev_secrets.CLIENTS]
    for name in names:
        cert = _cert(made / "tls" / f"{name}.pem")
        cert.verify_directly_issued_by(ca)
        key = serialization.load_pem_private_key((made / "tls" / f"{name}.key").read_bytes(), None)
        assert key.public_key().public_numbers() == cert.public_key().public_numbers(), name  # type: ignore[union-attr]


def test_the_certificates_say_what_each_may_do(made: Path) -> None:
    frontend = _cert(made / "tls" / "temporal-frontend.pem")
    assert _usages(frontend) == {ExtendedKeyUsageOID.SERVER_AUTH}
    sans = frontend.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"temporal", "localhost"}
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    internode = _cert(made / "tls" / "temporal-internode.pem")
    assert _usages(internode) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    for client in dev_secrets.CLIENTS:
        assert _usages(_cert(made / "tls" / f"{client}.pem")) == {ExtendedKeyUsageOID.CLIENT_AUTH}, client


def test_keys_are_in_the_formats_pitstop_reads(made: Path) -> None:
    for name in ("worker.key", "vote.key"):
        text = (made / name).read_text().strip()
        assert len(bytes.fromhex(text)) == 32, name  # hexadecimal, 32 bytes (pitstop.keys)
    key_id, _, secret = (made / "codec.keys").read_text().strip().partition(":")
    assert key_id and len(base64.b64decode(secret)) == 32  # `<id>:<base64 of 32 bytes>`
    assert (made / "worker.key").read_text() != (made / "vote.key").read_text()
    user, hashed = (made / "ui-users").read_text().split()
    assert user == "admin" and bcrypt.checkpw(b"correct horse", hashed.encode())
    assert b"correct horse" not in (made / "ui-users").read_bytes()


def test_the_directory_is_private_and_the_ca_key_is_the_owners(made: Path) -> None:
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert stat.S_IMODE((made / "tls").stat().st_mode) == 0o700
    assert stat.S_IMODE((made / "tls" / "ca.key").stat().st_mode) == 0o600


def test_a_second_run_keeps_everything_and_force_replaces_everything(tmp_path: Path) -> None:
    first, password = dev_secrets.make_all(tmp_path)
    assert password  # made up, returned once
    before = {p: p.read_bytes() for p in first}
    again, password = dev_secrets.make_all(tmp_path)
    assert again == [] and password is None
    assert all(p.read_bytes() == data for p, data in before.items())
    # A missing client certificate is issued again by the same CA.
    (tmp_path / "tls" / "worker.pem").unlink()
    redone, _ = dev_secrets.make_all(tmp_path)
    assert {p.name for p in redone} == {"worker.key", "worker.pem"}
    _cert(tmp_path / "tls" / "worker.pem").verify_directly_issued_by(_cert(tmp_path / "tls" / "ca.pem"))
    forced, _ = dev_secrets.make_all(tmp_path, force=True)
    assert set(forced) >= set(first)
    assert all(p.read_bytes() != data for p, data in before.items() if p.suffix in (".pem", ".key"))


# --- a real mutual-TLS handshake ----------------------------------------------------------------


@pytest.fixture
def frontend(made: Path) -> Iterator[tuple[int, list[str]]]:
    """A TLS server with the frontend certificate that requires a client certificate from the CA;
    yields its port and the outcome of each connection."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(made / "tls" / "temporal-frontend.pem", made / "tls" / "temporal-frontend.key")
    context.load_verify_locations(made / "tls" / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    outcomes: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    peer = tls.getpeercert()
                    outcomes.append(dict(x[0] for x in peer["subject"])["commonName"] if peer else "?")
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as exc:
                outcomes.append(f"refused: {type(exc).__name__}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], outcomes
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the server to record the connection"
        time.sleep(0.01)


def _connect(port: int, ca: Path, cert: Path | None, key: Path | None, server_name: str) -> bytes:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        context.load_cert_chain(cert, key)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        return tls.recv(2)


@pytest.mark.parametrize("client", ["worker", "slack-bridge", "temporal-ui", "admin-tools", "cli"])
def test_each_client_certificate_passes_a_handshake_that_requires_one(
    made: Path, frontend: tuple[int, list[str]], client: str
) -> None:
    port, outcomes = frontend
    tls = made / "tls"
    for name in ("temporal", "localhost"):  # the names the compose services and the host use
        assert _connect(port, tls / "ca.pem", tls / f"{client}.pem", tls / f"{client}.key", name) == b"ok"
    _wait_for(lambda: len(outcomes) >= 2)
    assert outcomes == [client, client]


def _served(port: int, ca: Path, cert: Path | None, key: Path | None, server_name: str) -> bool:
    """Whether the server answered. With TLS 1.3 a refused client certificate shows on the
    client's first read (an alert, a reset or end of file), not in its handshake."""
    try:
        return _connect(port, ca, cert, key, server_name) == b"ok"
    except (ssl.SSLError, ConnectionError):
        return False


def test_no_client_certificate_or_one_from_another_ca_is_refused(
    made: Path, frontend: tuple[int, list[str]], tmp_path: Path
) -> None:
    port, outcomes = frontend
    tls = made / "tls"
    assert not _served(port, tls / "ca.pem", None, None, "temporal")
    dev_secrets.make_all(tmp_path / "other")
    other = tmp_path / "other" / "tls"
    assert not _served(port, tls / "ca.pem", other / "worker.pem", other / "worker.key", "temporal")
    # The frontend's own certificate is not a client certificate.
    assert not _served(
        port, tls / "ca.pem", tls / "temporal-frontend.pem", tls / "temporal-frontend.key", "temporal"
    )
    _wait_for(lambda: len(outcomes) >= 3)  # the server thread records after the client gave up
    assert len(outcomes) == 3 and all(o.startswith("refused") for o in outcomes), outcomes
    # And the client refuses a server whose certificate does not name the host it asked for.
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(port, tls / "ca.pem", tls / "worker.pem", tls / "worker.key", "minio")
