"""Make the secrets the compose stack needs, for a development or evaluation install.

    python3 deploy/dev_secrets.py                 # into deploy/secrets/ (git- and docker-ignored)
    python3 deploy/dev_secrets.py --force         # replace everything (new CA, new keys)

Writes, and never overwrites without --force (so `docker compose up` again keeps the keys):

  tls/ca.pem, tls/ca.key          a development CA (its key, 0600, is used only here, never mounted)
  tls/temporal-frontend.pem/.key  Temporal's frontend: serverAuth for temporal, localhost, 127.0.0.1
  tls/temporal-internode.pem/.key Temporal's internode traffic: serverAuth + clientAuth
  tls/<client>.pem/.key           clientAuth certificates for admin-tools, temporal-ui, worker,
                                  slack-bridge and cli (the `pitstop`/`temporal` CLIs on the host)
  worker.key                      PITSTOP_WORKER_KEY_FILE (workers only): 32 random bytes, hex
  vote.key                        PITSTOP_VOTE_KEY_FILE (workers and the Slack bridge), hex
  codec.keys                      PITSTOP_CODEC_KEY_FILE: `<key id>:<base64 of 32 bytes>`
  ui-users                        the Temporal UI's login (Caddy basic_auth: `<user> <bcrypt>`);
                                  the password is printed once and not stored
  runbooks/                       the worker's PITSTOP_SECRETS_DIR (mounted read-only): put the
                                  files runbooks name as `{secret: NAME}` here (fleet-ssh-key...)

Needs Python 3.11 with `cryptography` and `bcrypt` (both in pitstop's image and its venv). In
production, use your own CA and a secret manager; docs/deployment.md says what goes where.
Files are 0644 in a 0700 directory: the directory keeps other users of the host out, and the
containers (which run as their own users) can read the files compose mounts into them.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import functools
import ipaddress
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_OUT = Path(__file__).resolve().parent / "secrets"
VALID_DAYS = 397
# The names clients use to reach Temporal's frontend: the compose service, and the published
# port on the host.
FRONTEND_NAMES = ("temporal", "localhost")
FRONTEND_IPS = ("127.0.0.1",)
INTERNODE_NAME = "temporal-internode"
CLIENTS = ("admin-tools", "temporal-ui", "worker", "slack-bridge", "cli")
UI_USER = "admin"


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pitstop development"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # tolerate clock skew


def make_ca() -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("pitstop development CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + dt.timedelta(days=VALID_DAYS * 3))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    ca: Issued,
    common_name: str,
    *,
    server: bool = False,
    client: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def _pem_cert(issued: Issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(issued: Issued) -> bytes:
    return issued.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, written: list[Path], mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    tmp.replace(path)
    written.append(path)


def _load_ca(tls: Path) -> Issued:
    cert = x509.load_pem_x509_certificate((tls / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((tls / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SystemExit(f"{tls / 'ca.key'} is not an EC key as this script writes; --force starts over")
    return Issued(cert, key)


def _pair(tls: Path, name: str, make: Callable[[], Issued], written: list[Path], force: bool) -> None:
    cert, key = tls / f"{name}.pem", tls / f"{name}.key"
    if cert.exists() and key.exists() and not force:
        return
    issued = make()
    _write(key, _pem_key(issued), written)
    _write(cert, _pem_cert(issued), written)


def codec_key_line() -> str:
    key_id = f"k{dt.datetime.now(dt.UTC):%Y%m%d}-{secrets.token_hex(3)}"
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"


def ui_user_line(user: str, password: str) -> str:
    import bcrypt  # only here: a dependency of paramiko, present wherever pitstop is installed

    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=12)).decode()
    return f"{user} {hashed}\n"


def make_all(
    out: Path, *, force: bool = False, ui_password: str | None = None
) -> tuple[list[Path], str | None]:
    """Write what is missing (everything with force); returns the files written and the UI
    password when this call made one up (None when it was given or already there)."""
    written: list[Path] = []
    tls = out / "tls"
    if force or not (tls / "ca.pem").exists() or not (tls / "ca.key").exists():
        ca = make_ca()
        _write(tls / "ca.key", _pem_key(ca), written, mode=0o600)  # never mounted anywhere
        _write(tls / "ca.pem", _pem_cert(ca), written)
        force = True  # every certificate must come from the new CA
    else:
        ca = _load_ca(tls)
    _pair(
        tls,
        "temporal-frontend",
        lambda: issue(ca, "temporal", server=True, dns=FRONTEND_NAMES, ips=FRONTEND_IPS),
        written,
        force,
    )
    _pair(
        tls,
        "temporal-internode",
        lambda: issue(ca, INTERNODE_NAME, server=True, client=True, dns=(INTERNODE_NAME,)),
        written,
        force,
    )
    for client in CLIENTS:
        _pair(tls, client, functools.partial(issue, ca, client, client=True), written, force)
    for name in ("worker.key", "vote.key"):
        if force or not (out / name).exists():
            _write(out / name, (secrets.token_hex(32) + "\n").encode(), written)
    if force or not (out / "codec.keys").exists():
        _write(out / "codec.keys", codec_key_line().encode(), written)
    runbook_secrets = out / "runbooks"
    runbook_secrets.mkdir(exist_ok=True)
    # Mounted as a directory: the worker's user must be able to list it (the parent stays 0700).
    os.chmod(runbook_secrets, 0o755)
    made_up = None
    if force or not (out / "ui-users").exists():
        if ui_password is None:
            made_up = ui_password = secrets.token_urlsafe(18)
        _write(out / "ui-users", ui_user_line(UI_USER, ui_password).encode(), written)
    return written, made_up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "out", nargs="?", type=Path, default=DEFAULT_OUT, help="directory (default: deploy/secrets)"
    )
    parser.add_argument("--force", action="store_true", help="replace every file (new CA and keys)")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    written, password = make_all(out, force=args.force)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{out}: everything is there already (--force replaces it)")
    if password is not None:
        print(f"\nTemporal UI login (shown once, not stored): {UI_USER} / {password}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
