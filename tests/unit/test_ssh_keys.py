"""Private keys from secrets, known_hosts parsing and OpenSSH fingerprints."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest
from temporalio.exceptions import ApplicationError

from pitstop.ssh.hostkeys import parse_known_hosts
from pitstop.ssh.keys import fingerprint, load_private_key


def _keygen(path: Path, key_type: str, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", key_type, "-N", passphrase, "-C", "t", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def _openssh_fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(pub)], check=True, capture_output=True, text=True)
    return out.stdout.split()[1]


@pytest.mark.parametrize(
    ("key_type", "cls"),
    [("ed25519", paramiko.Ed25519Key), ("rsa", paramiko.RSAKey), ("ecdsa", paramiko.ECDSAKey)],
)
def test_keys_of_each_type_load_with_openssh_fingerprints(tmp_path: Path, key_type: str, cls: type) -> None:
    path = _keygen(tmp_path / key_type, key_type)
    key = load_private_key(path.read_text(), "node-key")
    assert isinstance(key, cls)
    assert fingerprint(key) == _openssh_fingerprint(Path(f"{path}.pub"))


def test_encrypted_key_is_refused_with_advice(tmp_path: Path) -> None:
    path = _keygen(tmp_path / "enc", "ed25519", passphrase="hunter22")
    with pytest.raises(ApplicationError) as err:
        load_private_key(path.read_text(), "node-key")
    assert err.value.type == "PreconditionFailed" and "'node-key'" in str(err.value)
    assert "passphrase" in str(err.value)


def test_text_that_is_not_a_key_is_refused_without_echoing_it() -> None:
    with pytest.raises(ApplicationError) as err:
        load_private_key("hunter2-not-a-key", "node-key")
    assert "does not hold a private key" in str(err.value)
    assert "hunter2" not in str(err.value)


def test_known_hosts_with_hashed_and_port_entries(tmp_path: Path) -> None:
    path = _keygen(tmp_path / "host", "ed25519")
    pub = Path(f"{path}.pub").read_text().split()
    kh = tmp_path / "known_hosts"
    kh.write_text(f"# comment\n[10.0.0.5]:2222 {pub[0]} {pub[1]}\nplain,10.0.0.6 {pub[0]} {pub[1]}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert "10.0.0.6" not in kh.read_text()
    kh.write_text(kh.read_text() + "garbage line\n@revoked * ssh-ed25519 AAAA\n")
    keys = parse_known_hosts(kh.read_text())
    for name in ("[10.0.0.5]:2222", "plain", "10.0.0.6"):
        found = keys.lookup(name)
        assert found is not None and found[pub[0]].get_base64() == pub[1]
    assert keys.lookup("10.0.0.5") is None
