"""The control plane of a platform scenario: kubeadm's version policy over SSH, /version and
the static pods following `kubeadm upgrade apply`, and control-plane nodes kept apart from GPU
work."""

from __future__ import annotations

import yaml

from tests.integration.sim_platform.conftest import Platform

CP = "cp-001"
GPU_SELECTOR = "nvidia.com/gpu.present=true"


def server_version(platform: Platform) -> str:
    return str(platform.kubectl_json("version")["serverVersion"]["gitVersion"])


def images(platform: Platform, namespace: str, selector: str) -> set[str]:
    pods = platform.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"]
    return {
        c["image"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        for c in p["spec"]["containers"]
    }


def test_kubeadm_upgrades_the_control_plane_one_minor_at_a_time_and_only_up_to_its_own_version(
    platform: Platform,
) -> None:
    assert server_version(platform) == "v1.30.6"
    assert platform.ssh(CP, "kubeadm version -o short").stdout == "v1.30.6\n"

    too_far = platform.ssh(CP, "sudo -n kubeadm upgrade apply v1.32.0 --yes")
    assert too_far.rc == 1
    assert (
        'Specified version to upgrade to "v1.32.0" is too high; '
        "kubeadm can upgrade only 1 minor version at a time" in too_far.stderr
    )

    old_kubeadm = platform.ssh(CP, "sudo -n kubeadm upgrade apply v1.31.2 --yes")
    assert old_kubeadm.rc == 1
    assert (
        'Specified version to upgrade to "v1.31.2" is higher than the kubeadm version "v1.30.6". '
        "Upgrade kubeadm first" in old_kubeadm.stderr
    )
    assert "too high" not in old_kubeadm.stderr
    assert server_version(platform) == "v1.30.6"

    assert platform.ssh(CP, "sudo -n apt-get install -y kubeadm=1.31.2-1.1").rc == 0
    plan = platform.ssh(CP, "sudo -n kubeadm upgrade plan")
    assert "kubeadm upgrade apply v1.31.2" in plan.stdout

    unconfirmed = platform.ssh(CP, "sudo -n kubeadm upgrade apply v1.31.2")
    assert unconfirmed.rc == 1 and "won't proceed" in unconfirmed.stderr
    assert server_version(platform) == "v1.30.6"

    applied = platform.ssh(CP, "sudo -n kubeadm upgrade apply v1.31.2 --yes")
    assert applied.rc == 0, applied.stderr
    assert '[upgrade/successful] SUCCESS! Your cluster was upgraded to "v1.31.2". Enjoy!' in applied.stdout
    version = platform.kubectl_json("version")["serverVersion"]
    assert (version["gitVersion"], version["major"], version["minor"]) == ("v1.31.2", "1", "31")
    assert platform.sim.kubernetes_version() == "v1.31.2"
    assert images(platform, "kube-system", "component=kube-apiserver") == {
        "registry.k8s.io/kube-apiserver:v1.31.2"
    }
    assert images(platform, "kube-system", "component=kube-scheduler") == {
        "registry.k8s.io/kube-scheduler:v1.31.2"
    }
    platform.wait(
        lambda: (
            images(platform, "kube-system", "k8s-app=kube-proxy") == {"registry.k8s.io/kube-proxy:v1.31.2"}
        ),
        "kube-proxy pods on the new version",
    )

    # Downgrading is refused unless forced, and never by more than one minor.
    back = platform.ssh(CP, "sudo -n kubeadm upgrade apply v1.30.6 --yes")
    assert back.rc == 1 and "Downgrades are not supported yet" in back.stderr
    assert "--force" in back.stderr
    # Kubelets are upgraded separately: the nodes still report v1.30.6.
    assert platform.node(CP)["status"]["nodeInfo"]["kubeletVersion"] == "v1.30.6"


def test_kubeadm_upgrade_apply_needs_a_control_plane_node_and_root(platform: Platform) -> None:
    on_gpu_node = platform.ssh("gpu-node-003", "sudo -n kubeadm upgrade apply v1.31.2 --yes")
    assert on_gpu_node.rc == 1
    assert "/etc/kubernetes/admin.conf: no such file or directory" in on_gpu_node.stderr
    node_upgrade = platform.ssh("gpu-node-003", "sudo -n kubeadm upgrade node")
    assert node_upgrade.rc == 0 and "successfully updated" in node_upgrade.stdout
    as_user = platform.ssh(CP, "kubeadm upgrade apply v1.31.2 --yes")
    assert as_user.rc == 1 and "user is not running as root" in as_user.stderr


def test_control_plane_nodes_are_not_gpu_nodes(platform: Platform) -> None:
    gpu_nodes = platform.kubectl("get", "nodes", "-l", GPU_SELECTOR, "-o", "name").stdout.split()
    assert gpu_nodes == [f"node/gpu-node-00{i}" for i in range(1, 6)]
    table = platform.kubectl("get", "nodes").stdout
    assert any(line.split()[:3] == [CP, "Ready", "control-plane"] for line in table.splitlines())
    node = platform.node(CP)
    assert {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    on_cp = platform.kubectl_json("get", "pods", "-A", "--field-selector", f"spec.nodeName={CP}")["items"]
    owners = {p["metadata"]["name"].rsplit("-", 1)[0] for p in on_cp}
    # Static control-plane pods and node agents only: no GPU DaemonSet, no GPU workload.
    assert not any(p["metadata"]["namespace"] in ("gpu-operator", "serving", "training") for p in on_cp)
    assert {"etcd-cp", "kube-apiserver-cp", "calico-node", "kube-proxy"} <= owners
    assert platform.ssh(CP, "nvidia-smi -L").rc == 127
    assert platform.ssh(CP, "hostname").stdout == f"{CP}\n"
    assert CP in platform.sim.node_names() and CP not in platform.sim.gpu_node_names()
    inventory = yaml.safe_load(platform.sim.inventory_path.read_text())
    assert list(inventory["all"]["children"]["control_plane"]["hosts"]) == [CP]
    assert CP not in str(inventory["all"]["children"]["gpu"])
