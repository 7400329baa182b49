"""The worker policy's rules on their own: what stays out of reach however broad a rule is,
how endpoints compare, and what a run's work directory is called (issue #13)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from pitstop.policy import WorkerPolicy, load_policy
from pitstop.policy.files import check_path, run_dir_name, run_work_dir
from pitstop.policy.urls import normalize_endpoint


def _policy(tmp_path: Path, text: str, **env: str) -> WorkerPolicy:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return load_policy(
        {
            "PITSTOP_WORKER_POLICY": str(path),
            "PITSTOP_HOME": str(tmp_path / "home"),
            "HOME": os.environ["HOME"],
            **env,
        }
    )


def test_a_broad_write_rule_still_never_reaches_secrets_clusters_or_the_policy_itself(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    policy = _policy(tmp_path, f"files:\n  write: [{tmp_path}]\n", PITSTOP_SECRETS_DIR=str(secrets))
    for target, why in (
        (secrets / "fleet-ssh-key", "PITSTOP_SECRETS_DIR (secrets)"),
        (tmp_path / "home" / "clusters" / "prod" / "kubeconfig", "clusters_dir (cluster credentials)"),
        (tmp_path / "policy.yaml", "the policy file itself"),
    ):
        with pytest.raises(ApplicationError) as refused:
            check_path(str(target), run_id="r", what="w", access="write", relative_to="work", policy=policy)
        assert f"which no module may write ({why})" in str(refused.value)
    allowed = check_path(
        str(tmp_path / "backups" / "x.db"),
        run_id="r",
        what="w",
        access="write",
        relative_to="work",
        policy=policy,
    )
    assert allowed.path == tmp_path / "backups" / "x.db" and allowed.root == tmp_path


def test_what_a_run_writes_lands_in_its_own_directory_and_nobody_elses(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "")
    mine = check_path(
        "snap.db", run_id="nightly", what="w", access="write", relative_to="work", policy=policy
    )
    assert mine.path == run_work_dir("nightly", policy) / "snap.db"
    other = run_work_dir("someone-else", policy) / "snap.db"
    with pytest.raises(ApplicationError):
        check_path(str(other), run_id="nightly", what="w", access="write", relative_to="work", policy=policy)


@pytest.mark.parametrize("run_id", ["../../etc", "a/b", "..", ".", "", "x" * 300, "run-1"])
def test_a_run_directory_name_is_one_safe_component(run_id: str) -> None:
    name = run_dir_name(run_id)
    assert "/" not in name and name not in (".", "..") and not name.startswith(".") and len(name) <= 80
    assert run_dir_name(run_id) == name and run_dir_name(run_id + "!") != name


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("http://MinIO.internal:9000/", "http://minio.internal:9000"),
        ("https://s3.amazonaws.com", "https://s3.amazonaws.com:443"),
        ("AWS", "aws"),
    ],
)
def test_endpoints_compare_by_scheme_host_and_port(a: str, b: str) -> None:
    assert normalize_endpoint(a) == normalize_endpoint(b)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://x", "must start with http:// or https://"),
        ("https://user:pw@s3.example.com", "carries user information"),
        ("https://s3.example.com/bucket", "has a path or query"),
        ("https://", "names no host"),
    ],
)
def test_endpoints_that_could_hide_a_difference_are_refused(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        normalize_endpoint(url)
