"""The simulator's kubeadm ClusterConfiguration: uploaded to kube-system/kubeadm-config at start
(what `kubeadm init` does) and updated by `kubeadm upgrade apply`, as dr.pki_backup reads it."""

from __future__ import annotations

import paramiko

from activities.kube.client import Kube, api_client
from tests.integration.dr.conftest import CP, DrSite


def _ssh(site: DrSite, command: str) -> tuple[int, str]:
    client = paramiko.SSHClient()
    client.load_host_keys(str(site.sim.known_hosts_path))
    client.connect(
        "127.0.0.1",
        port=site.sim.ssh_port(CP),
        username="ops",
        key_filename=str(site.sim.client_key_path),
        look_for_keys=False,
        allow_agent=False,
    )
    try:
        _, out, err = client.exec_command(command, timeout=30)
        rc = out.channel.recv_exit_status()
        return rc, out.read().decode() + err.read().decode()
    finally:
        client.close()


def _version(kube: Kube) -> str:
    configmap = kube.get("/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
    for line in str(configmap["data"]["ClusterConfiguration"]).splitlines():
        if line.startswith("kubernetesVersion: "):
            return line.removeprefix("kubernetesVersion: ")
    raise AssertionError(f"no kubernetesVersion in {configmap}")


def test_kubeadm_upgrade_apply_updates_the_cluster_configuration(dr_site: DrSite) -> None:
    kube = Kube(api_client(dr_site.inventory.cluster))
    assert _version(kube) == "v1.30.6"
    assert _ssh(dr_site, "sudo -n apt-get install -y kubeadm=1.31.2-1.1")[0] == 0
    rc, output = _ssh(dr_site, "sudo -n kubeadm upgrade apply v1.31.2 --yes")
    assert rc == 0, output
    assert _version(kube) == "v1.31.2"
