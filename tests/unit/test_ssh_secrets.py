"""Secret references resolved from the environment or files; values never in messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.modules import SecretRef
from pitstop.secrets import SecretNotFound, env_var_name, resolve_secret


def test_environment_variable_name_is_upper_cased_with_underscores() -> None:
    assert env_var_name(SecretRef(secret="lab-ssh.key")) == "PITSTOP_SECRET_LAB_SSH_KEY"
    assert (
        env_var_name(SecretRef(secret="etcd-client", key="tls.crt")) == "PITSTOP_SECRET_ETCD_CLIENT_TLS_CRT"
    )


def test_environment_wins_over_files(tmp_path: Path) -> None:
    (tmp_path / "lab-key").write_text("from-file")
    env = {"PITSTOP_SECRET_LAB_KEY": "from-env", "PITSTOP_SECRETS_DIR": str(tmp_path)}
    assert resolve_secret(SecretRef(secret="lab-key"), env) == "from-env"


def test_files_hold_secrets_and_their_keys(tmp_path: Path) -> None:
    (tmp_path / "lab-key").write_text("whole")
    (tmp_path / "etcd").mkdir()
    (tmp_path / "etcd" / "ca.crt").write_text("ca-pem")
    env = {"PITSTOP_SECRETS_DIR": str(tmp_path)}
    assert resolve_secret(SecretRef(secret="lab-key"), env) == "whole"
    assert resolve_secret(SecretRef(secret="etcd", key="ca.crt"), env) == "ca-pem"


def test_missing_secret_lists_every_place_looked_at(tmp_path: Path) -> None:
    with pytest.raises(SecretNotFound) as err:
        resolve_secret(SecretRef(secret="fleet-key"), {"PITSTOP_SECRETS_DIR": str(tmp_path)})
    assert "PITSTOP_SECRET_FLEET_KEY" in str(err.value) and str(tmp_path / "fleet-key") in str(err.value)
    with pytest.raises(SecretNotFound, match=r"PITSTOP_SECRETS_DIR \(not set\)"):
        resolve_secret(SecretRef(secret="fleet-key"), {})


def test_names_that_escape_the_secrets_directory_are_refused(tmp_path: Path) -> None:
    (tmp_path / "outside").write_text("not a secret")
    env = {"PITSTOP_SECRETS_DIR": str(tmp_path / "secrets")}
    for ref in (SecretRef(secret="../outside"), SecretRef(secret="ok", key="../../outside")):
        with pytest.raises(SecretNotFound, match="invalid secret"):
            resolve_secret(ref, env)


def test_values_never_appear_in_errors(tmp_path: Path) -> None:
    (tmp_path / "wrong").write_text("s3cr3t-value")
    env = {"PITSTOP_SECRET_OTHER": "s3cr3t-value", "PITSTOP_SECRETS_DIR": str(tmp_path)}
    with pytest.raises(SecretNotFound) as err:
        resolve_secret(SecretRef(secret="right"), env)
    assert "s3cr3t-value" not in str(err.value)
