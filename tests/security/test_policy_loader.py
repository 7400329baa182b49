"""The worker policy file: validated with file:line errors, every default resolved and shown with
where it came from, and a worker that refuses to start on an invalid one (issue #13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pitstop.cli.app import app
from pitstop.devstack import DevStack, StackConfig
from pitstop.policy import PolicyError, WorkerPolicy, load_policy
from tests.conftest import REPO_ROOT

EXAMPLE = """\
files:
  read: [firmware]
  write: [backups]
clusters:
  prod:
    kubeconfig: prod.kubeconfig
    context: admin@prod
    known_hosts: prod.known_hosts
s3:
  endpoints:
    - url: aws
      buckets: [acme-etcd-*]
    - url: https://MinIO.internal:9000/
      buckets: ["*"]
etcd:
  endpoints: [https://10.0.0.11:2379]
secrets:
  fleet-ssh-key: {purpose: ssh_key, clusters: [prod]}
  backup-s3: {purpose: s3_credentials, endpoints: [aws]}
  etcd-client: {purpose: etcd_tls}
"""


def _env(tmp_path: Path, policy: Path | None) -> dict[str, str]:
    env = {"PITSTOP_HOME": str(tmp_path / "home"), "HOME": os.environ["HOME"]}
    if policy is not None:
        env["PITSTOP_WORKER_POLICY"] = str(policy)
    return env


def _load(tmp_path: Path, text: str) -> WorkerPolicy:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return load_policy(_env(tmp_path, path))


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(PolicyError) as err:
        _load(tmp_path, text)
    return str(err.value)


def test_every_rule_is_resolved_with_where_it_came_from(tmp_path: Path) -> None:
    policy = _load(tmp_path, EXAMPLE)
    source = tmp_path / "policy.yaml"
    assert [(r.path, r.origin) for r in policy.read] == [(tmp_path / "firmware", f"{source}:2")]
    assert [(r.path, r.origin) for r in policy.write] == [(tmp_path / "backups", f"{source}:3")]
    prod = policy.clusters["prod"]
    assert (prod.kubeconfig, prod.context, prod.known_hosts, prod.allow_exec) == (
        tmp_path / "prod.kubeconfig",
        "admin@prod",
        tmp_path / "prod.known_hosts",
        False,
    )
    assert [(r.endpoint, r.buckets, r.origin) for r in policy.s3] == [
        ("aws", ("acme-etcd-*",), f"{source}:11"),
        ("https://minio.internal:9000", ("*",), f"{source}:13"),
    ]
    assert [r.endpoint for r in policy.etcd] == ["https://10.0.0.11:2379"]
    assert policy.secrets["backup-s3"].endpoints == ("aws",)
    assert policy.secrets["fleet-ssh-key"].clusters == ("prod",)
    # Defaults: the run's work directory and registered clusters under PITSTOP_HOME.
    assert policy.work_root.path == tmp_path / "home" / "work"
    assert policy.clusters_dir.path == tmp_path / "home" / "clusters"
    # What no rule can open: the policy itself, the clusters' credentials, /proc.
    denied = {d.path for d in policy.denied}
    assert {source, tmp_path / "prod.kubeconfig", Path("/proc"), tmp_path / "home" / "clusters"} <= denied


def test_without_a_file_the_defaults_allow_nothing_but_the_runbooks_and_the_runs_own_directory(
    tmp_path: Path,
) -> None:
    policy = load_policy(_env(tmp_path, None))
    assert policy.source is None and policy.source_origin == "built-in default"
    assert (policy.read, policy.write, policy.s3, policy.etcd) == ((), (), (), ())
    assert policy.clusters == {} and policy.secrets == {}


def test_the_stack_policy_in_the_home_is_picked_up_by_default(tmp_path: Path) -> None:
    stack = DevStack(StackConfig(home=tmp_path / "home", s3_port=9911, etcd_client_port=2399))
    stack.home.mkdir()
    assert stack.write_policy() == stack.policy_file
    policy = load_policy(_env(tmp_path, None))
    assert policy.source == stack.policy_file and policy.source_origin == "$PITSTOP_HOME/worker-policy.yaml"
    assert [r.endpoint for r in policy.s3] == ["http://127.0.0.1:9911"]
    assert [r.endpoint for r in policy.etcd] == ["http://127.0.0.1:2399"]
    assert policy.secrets["sim-ssh-key"].purpose == "ssh_key"
    # An operator's edits (the mark removed) are kept.
    stack.policy_file.write_text("secrets: {}\n")
    assert stack.write_policy() is None and stack.policy_file.read_text() == "secrets: {}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "secret:\n  a: {purpose: ssh_key}\n",
            "policy.yaml:1:1: unknown key 'secret' in the worker policy (did you mean 'secrets'?)",
        ),
        (
            "secrets:\n  a: {purpose: ssh}\n",
            "policy.yaml:2:16: invalid value for 'secrets.a.purpose' in the worker policy: input should be "
            "'ssh_key', 'ssh_known_hosts', 's3_credentials', 'etcd_tls' or 'prometheus_token'",
        ),
        (
            "secrets:\n  a: {purpose: ssh_key, endpoints: [aws]}\n",
            "policy.yaml:2:6: invalid value for 'secrets.a' in the worker policy: `endpoints` scopes "
            "s3_credentials, etcd_tls and prometheus_token grants, not ssh_key",
        ),
        (
            "s3:\n  endpoints:\n    - {url: 'https://s3.example.com/bucket', buckets: ['*']}\n",
            "policy.yaml:3:13: s3.endpoints: 'https://s3.example.com/bucket' has a path or query; give only "
            "scheme://host:port",
        ),
        ("files:\n  write: [/]\n", "policy.yaml:2:11: files.write: / would let modules reach every file"),
        (
            "files:\n  read: ['~']\n",
            "files.read: {home} holds the worker user's home directory",
        ),
        (
            "s3:\n  endpoints: [{url: aws, buckets: [b]}]\nsecrets:\n  k: {purpose: s3_credentials, "
            "endpoints: ['http://127.0.0.1:9000']}\n",
            "policy.yaml:4:44: secrets.k.endpoints: http://127.0.0.1:9000 is not in s3.endpoints, so the "
            "secret could never be used there",
        ),
        (
            "clusters:\n  prod: {in_cluster: true, kubeconfig: x}\n",
            "policy.yaml:2:9: invalid value for 'clusters.prod' in the worker policy: give `kubeconfig` (and "
            "`context`) or `in_cluster: true`, not both",
        ),
        (
            "clusters:\n  prod: [a]\n",
            "policy.yaml:2:9: invalid value for 'clusters.prod' in the worker policy",
        ),
        ("s3: [\n", "policy.yaml:2:1: YAML syntax error"),
    ],
)
def test_an_invalid_policy_names_the_file_line_and_the_fix(tmp_path: Path, text: str, expected: str) -> None:
    message = _error(tmp_path, text)
    expected = expected.replace("policy.yaml", str(tmp_path / "policy.yaml"), 1).format(
        home=Path(os.environ["HOME"]).resolve()
    )
    assert expected in message, message
    assert message.endswith("; fix the worker policy")
    assert "\n" not in message


def test_a_policy_file_that_does_not_exist_says_which_variable_named_it(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(_env(tmp_path, tmp_path / "nope.yaml"))
    assert str(err.value).startswith(
        f"{tmp_path / 'nope.yaml'}:1:1: file not found (set by PITSTOP_WORKER_POLICY)"
    )


def _worker(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "worker.py", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "COLUMNS": "250", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_worker_refuses_to_start_on_an_invalid_policy_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("files:\n  writ: [/srv]\n")
    done = _worker(env={"PITSTOP_WORKER_POLICY": str(bad), "TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"pitstop worker: invalid worker policy, not starting: {bad}:2:3: unknown key 'writ' in files "
        "(did you mean 'write'?); fix the worker policy"
    )


def test_the_worker_logs_the_policy_it_runs_under_before_anything_else(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE)
    done = _worker(env={"PITSTOP_WORKER_POLICY": str(path), "TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert done.returncode == 2  # nothing listens on port 1: it stops after saying its policy
    line = next(line for line in done.stderr.splitlines() if "pitstop.worker: worker policy " in line)
    assert f"worker policy {path}" in line
    assert "S3 aws, https://MinIO.internal:9000/" in line and "etcd https://10.0.0.11:2379" in line
    assert "secrets backup-s3 (s3_credentials), etcd-client (etcd_tls), fleet-ssh-key (ssh_key)" in line


@pytest.mark.parametrize("command", [["python", "worker.py"], ["pitstop", "worker"]])
def test_show_policy_prints_the_effective_policy_with_origins(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE)
    env = {"PITSTOP_WORKER_POLICY": str(path), "PITSTOP_HOME": str(tmp_path / "home")}
    if command[0] == "python":
        done = _worker("--show-policy", env=env)
        out, code = done.stdout, done.returncode
    else:
        result = CliRunner().invoke(app, ["worker", "--show-policy"], env={**env, "COLUMNS": "250"})
        out, code = result.stdout, result.exit_code
    assert code == 0, out
    assert f"worker policy: {path}  (chosen by: PITSTOP_WORKER_POLICY)" in out
    for row in (
        f"{tmp_path / 'firmware'}",
        f"{path}:2",
        f"{tmp_path / 'home' / 'work'}/<run>",
        "the run's work directory: built-in default ($PITSTOP_HOME/work)",
        "/proc",
        "(context admin@prod); exec/auth-provider refused",
        "acme-etcd-*",
        "https://10.0.0.11:2379",
        "this run's own scratch member",
        "the SSH key of a cluster's nodes",
        f"{path}:19",
    ):
        assert row in out, row


def test_show_policy_of_an_invalid_policy_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("etcd:\n  endpoints: [etcd.internal:2379]\n")
    done = _worker("--show-policy", env={"PITSTOP_WORKER_POLICY": str(bad)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"pitstop worker: invalid worker policy: {bad}:2:15: etcd.endpoints: 'etcd.internal:2379' must start "
        "with http:// or https://; fix the worker policy"
    )
