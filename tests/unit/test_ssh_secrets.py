"""Secret references resolved from the environment or files, only for the purpose the worker
policy grants them; values never in messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from pitstop.modules import SecretRef
from pitstop.policy import WorkerPolicy, load_policy
from pitstop.secrets import SecretNotFound, env_var_name, resolve_secret


def _policy(tmp_path: Path, text: str = "secrets:\n  lab-key: {purpose: ssh_key}\n") -> WorkerPolicy:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    env = {
        "PITSTOP_WORKER_POLICY": str(path),
        "PITSTOP_HOME": str(tmp_path / "home"),
        "HOME": os.environ["HOME"],
    }
    return load_policy(env)


def test_environment_variable_name_is_upper_cased_with_underscores() -> None:
    assert env_var_name(SecretRef(secret="lab-ssh.key")) == "PITSTOP_SECRET_LAB_SSH_KEY"
    assert (
        env_var_name(SecretRef(secret="etcd-client", key="tls.crt")) == "PITSTOP_SECRET_ETCD_CLIENT_TLS_CRT"
    )


def _resolve(ref: SecretRef, env: dict[str, str], policy: WorkerPolicy, purpose: str = "ssh_key") -> str:
    return resolve_secret(ref, purpose, what="test", environ=env, policy=policy)  # type: ignore[arg-type]


def test_environment_wins_over_files(tmp_path: Path) -> None:
    (tmp_path / "lab-key").write_text("from-file")
    env = {"PITSTOP_SECRET_LAB_KEY": "from-env", "PITSTOP_SECRETS_DIR": str(tmp_path)}
    assert _resolve(SecretRef(secret="lab-key"), env, _policy(tmp_path)) == "from-env"


def test_files_hold_secrets_and_their_keys(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "secrets:\n  lab-key: {purpose: ssh_key}\n  etcd: {purpose: etcd_tls}\n")
    (tmp_path / "lab-key").write_text("whole")
    (tmp_path / "etcd").mkdir()
    (tmp_path / "etcd" / "ca.crt").write_text("ca-pem")
    env = {"PITSTOP_SECRETS_DIR": str(tmp_path)}
    assert _resolve(SecretRef(secret="lab-key"), env, policy) == "whole"
    assert _resolve(SecretRef(secret="etcd", key="ca.crt"), env, policy, "etcd_tls") == "ca-pem"


def test_missing_secret_lists_every_place_looked_at(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "secrets:\n  fleet-key: {purpose: ssh_key}\n")
    with pytest.raises(SecretNotFound) as err:
        _resolve(SecretRef(secret="fleet-key"), {"PITSTOP_SECRETS_DIR": str(tmp_path)}, policy)
    assert "PITSTOP_SECRET_FLEET_KEY" in str(err.value) and str(tmp_path / "fleet-key") in str(err.value)
    with pytest.raises(SecretNotFound, match=r"PITSTOP_SECRETS_DIR \(not set\)"):
        _resolve(SecretRef(secret="fleet-key"), {}, policy)


def test_names_that_escape_the_secrets_directory_are_refused(tmp_path: Path) -> None:
    (tmp_path / "outside").write_text("not a secret")
    env = {"PITSTOP_SECRETS_DIR": str(tmp_path / "secrets")}
    policy = _policy(tmp_path, "secrets:\n  ok: {purpose: ssh_key}\n")
    for ref in (SecretRef(secret="../outside"), SecretRef(secret="ok", key="../../outside")):
        with pytest.raises(SecretNotFound, match="invalid secret"):
            _resolve(ref, env, policy)


def test_values_never_appear_in_errors(tmp_path: Path) -> None:
    (tmp_path / "wrong").write_text("s3cr3t-value")
    env = {"PITSTOP_SECRET_OTHER": "s3cr3t-value", "PITSTOP_SECRETS_DIR": str(tmp_path)}
    with pytest.raises(SecretNotFound) as err:
        _resolve(SecretRef(secret="right"), env, _policy(tmp_path, "secrets:\n  right: {purpose: ssh_key}\n"))
    assert "s3cr3t-value" not in str(err.value)


def test_a_secret_is_refused_for_any_purpose_but_its_own_before_it_is_read(tmp_path: Path) -> None:
    env = {"PITSTOP_SECRET_LAB_KEY": "-----BEGIN OPENSSH PRIVATE KEY-----"}
    with pytest.raises(ApplicationError) as err:
        resolve_secret(
            SecretRef(secret="lab-key"),
            "s3_credentials",
            what="storage.upload: access_key_id",
            endpoints=["http://127.0.0.1:9000"],
            environ=env,
            policy=_policy(tmp_path),
        )
    assert err.value.type == "PolicyViolation" and err.value.non_retryable
    assert str(err.value) == (
        "PolicyViolation: storage.upload: access_key_id: secret 'lab-key' may only be used as the SSH key "
        f"of a cluster's nodes, not as S3 credentials (policy secrets.lab-key.purpose: ssh_key, "
        f"{tmp_path / 'policy.yaml'}:2)"
    )
    assert "BEGIN OPENSSH" not in str(err.value)
