"""Where to connect: Ansible's connection variables over the inventory's cluster.ssh, and the
worker's own known_hosts for the cluster (worker policy)."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from pitstop.contracts import ModuleCall
from pitstop.modules import SecretRef
from pitstop.runbook.inventory import ClusterConfig, SSHConfig
from pitstop.ssh.target import JumpHost, target_for
from tests.policy_site import PolicyLayer


@pytest.fixture(autouse=True)
def _cluster_c(worker_policy: PolicyLayer, tmp_path: Path) -> Path:
    """Cluster `c` known to the worker with a known_hosts file; keys k, a, b granted for it."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    worker_policy.cluster("c", known_hosts=known)
    for name in ("k", "a", "b"):
        worker_policy.grant(name, "ssh_key", clusters=["c"])
    return known


def _call(host_vars: dict[str, Any], ssh: SSHConfig | None = None) -> ModuleCall:
    cluster = ClusterConfig(name="c", ssh=ssh) if ssh is not None else None
    return ModuleCall(
        module="ssh.command",
        host="gpu-01",
        args={},
        run_id="r",
        task_path="t",
        host_vars=host_vars,
        cluster=cluster,
    )


def test_ansible_connection_variables_override_the_cluster_defaults(_cluster_c: Path) -> None:
    ssh = SSHConfig(user="ops", port=2200, key=SecretRef(secret="k"), jump_host="bastion")
    target = target_for(
        _call({"ansible_host": "10.0.0.7", "ansible_port": "2222", "ansible_user": "root"}, ssh)
    )
    assert (target.host, target.port, target.user) == ("10.0.0.7", 2222, "root")
    assert target.key == SecretRef(secret="k") and target.known_hosts == str(_cluster_c)
    assert target.jump == JumpHost(host="bastion", port=22, user=None)
    assert target.known_hosts_name == "[10.0.0.7]:2222"


def test_defaults_are_the_inventory_name_the_cluster_port_and_user() -> None:
    target = target_for(_call({}, SSHConfig(user="ops", port=2200)))
    assert (target.host, target.port, target.user) == ("gpu-01", 2200, "ops")
    bare = target_for(_call({}, SSHConfig()))
    assert (bare.host, bare.port, bare.user) == ("gpu-01", 22, getpass.getuser())
    assert bare.known_hosts_name == "gpu-01"


def test_without_a_cluster_there_is_no_known_hosts_and_nothing_to_connect_with() -> None:
    with pytest.raises(ApplicationError) as err:
        target_for(_call({}))
    assert err.value.type == "PolicyViolation"
    assert "the inventory names no cluster; add `cluster: {name: NAME}`" in str(err.value)


def test_a_cluster_the_worker_does_not_know_is_refused_with_where_to_register_it() -> None:
    call = _call({}, SSHConfig()).model_copy(update={"cluster": ClusterConfig(name="elsewhere")})
    with pytest.raises(ApplicationError) as err:
        target_for(call)
    assert err.value.type == "PolicyViolation" and err.value.non_retryable
    assert "cluster 'elsewhere' is not one this worker may act on (known clusters: " in str(err.value)
    known = str(err.value).split("(known clusters: ", 1)[1].split(";", 1)[0]
    assert "c" in known.split(", ") and "elsewhere" not in known.split(", ")
    assert "clusters/elsewhere/known_hosts" in str(err.value)


def test_a_key_granted_for_another_purpose_or_cluster_is_refused(worker_policy: PolicyLayer) -> None:
    worker_policy.grant("backup-s3", "s3_credentials").grant("prod-key", "ssh_key", clusters=["prod"])
    with pytest.raises(ApplicationError) as wrong_use:
        target_for(_call({}, SSHConfig(key=SecretRef(secret="backup-s3"))))
    assert "secret 'backup-s3' may only be used as S3 credentials, not as the SSH key" in str(wrong_use.value)
    with pytest.raises(ApplicationError) as wrong_cluster:
        target_for(_call({}, SSHConfig(key=SecretRef(secret="prod-key"))))
    assert "may be used as the SSH key of a cluster's nodes of cluster(s) prod only, not of 'c'" in str(
        wrong_cluster.value
    )
    with pytest.raises(ApplicationError) as ungranted:
        target_for(_call({}, SSHConfig(key=SecretRef(secret="nobody-granted-this"))))
    assert "secret 'nobody-granted-this' is not granted to any use on this worker" in str(ungranted.value)


def test_bad_port_variable_is_invalid_args_naming_the_host() -> None:
    with pytest.raises(ApplicationError) as err:
        target_for(_call({"ansible_port": "ssh"}, SSHConfig()))
    assert err.value.type == "InvalidArgs" and "gpu-01" in str(err.value) and "'ssh'" in str(err.value)


@pytest.mark.parametrize(
    ("spec", "jump"),
    [
        ("ops@bastion.example.com:2222", JumpHost(host="bastion.example.com", port=2222, user="ops")),
        ("bastion", JumpHost(host="bastion", port=22, user=None)),
        ("root@[fd00::1]:22", JumpHost(host="fd00::1", port=22, user="root")),
    ],
)
def test_jump_host_spec(spec: str, jump: JumpHost) -> None:
    assert JumpHost.parse(spec) == jump


@pytest.mark.parametrize("spec", ["ops@", "a b", "host:99999", "host:port"])
def test_bad_jump_host_spec_shows_the_expected_form(spec: str) -> None:
    with pytest.raises(ApplicationError) as err:
        JumpHost.parse(spec)
    assert "'user@host:port'" in str(err.value)


def test_connections_are_pooled_apart_when_credentials_differ() -> None:
    a = target_for(_call({}, SSHConfig(key=SecretRef(secret="a"))))
    b = target_for(_call({}, SSHConfig(key=SecretRef(secret="b"))))
    assert a.pool_key != b.pool_key
    assert a.pool_key == target_for(_call({}, SSHConfig(key=SecretRef(secret="a")))).pool_key


def test_inventory_takes_known_hosts_from_a_secret_reference_only(tmp_path: Path) -> None:
    from pitstop.runbook import RunbookError, load_inventory

    good = tmp_path / "good.yaml"
    good.write_text(
        "cluster:\n  name: c\n  ssh:\n    known_hosts_secret: {secret: fleet-known-hosts}\nall: {}\n"
    )
    inventory = load_inventory(good)
    assert inventory.cluster is not None and inventory.cluster.ssh is not None
    assert inventory.cluster.ssh.known_hosts_secret == SecretRef(secret="fleet-known-hosts")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "cluster:\n  name: c\n  ssh:\n    known_hosts_secret: '[h]:22 ssh-ed25519 AAAA'\nall: {}\n"
    )
    with pytest.raises(RunbookError, match="secret value written inline under 'known_hosts_secret'"):
        load_inventory(bad)
