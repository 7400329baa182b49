"""acceptance.check's arguments, layer selection, the benchmarks' METRIC lines and their Jobs'
ConfigMap mounts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from activities.kube.job import job_body
from pitstop.acceptance.bench import parse_metrics
from pitstop.acceptance.probes import select
from pitstop.contracts import ModuleCall
from pitstop.module_args.acceptance import AcceptanceArgs
from pitstop.module_args.kube import JobArgs


def test_layers_and_checks_select_in_catalogue_order() -> None:
    keys = [s.key for s in select(["network/nccl", "kubernetes"])]
    assert keys[:6] == [f"kubernetes/{n}" for n in ("api", "scheduling", "dns", "cni", "csi", "logs")]
    assert keys[6:] == ["network/nccl"]
    assert len(select([])) == 34


def test_a_misspelt_layer_names_the_nearest_one() -> None:
    with pytest.raises(
        ValueError, match=r"unknown acceptance layer or check 'netwrok'; did you mean 'network'\?"
    ):
        select(["netwrok"])


def test_baseline_keys_must_be_catalogue_checks() -> None:
    with pytest.raises(
        ValidationError, match=r"unknown acceptance layer or check 'network/ncl'; did you mean 'network/nccl'"
    ):
        AcceptanceArgs.model_validate({"baseline": {"network/ncl": 392}})


def test_daemonset_references_must_be_namespace_and_name() -> None:
    with pytest.raises(ValidationError, match=r"'calico-node' must be 'namespace/name'"):
        AcceptanceArgs.model_validate({"cni_daemonsets": ["calico-node"]})


def test_on_deviation_accepts_only_fail_or_report() -> None:
    with pytest.raises(ValidationError, match="on_deviation"):
        AcceptanceArgs.model_validate({"on_deviation": "ignore"})


def test_metric_lines_are_read_with_units_ignored_and_noise_skipped() -> None:
    log = (
        "epoch 1 step 10 loss 2.31\n"
        "METRIC samples_per_second=2391.5 samples/s\n"
        "METRIC loss_first=2.31\n"
        "  METRIC loss_last=1.2e0 loss\n"
        "not a METRIC line=3\n"
        "METRIC samples_per_second=2400 samples/s\n"
    )
    assert parse_metrics(log) == {"samples_per_second": 2400.0, "loss_first": 2.31, "loss_last": 1.2}


def test_probe_jobs_mount_configmaps_read_only_as_kubectl_would_write_them() -> None:
    args = JobArgs(
        image="vllm/vllm-openai:v0.8.5.post1",
        command=["sh", "/opt/pitstop/vllm_serve_bench.sh"],
        config_maps=[{"name": "pitstop-probe-scripts", "mount_path": "/opt/pitstop/"}],
    )
    call = ModuleCall(module="kube.job", run_id="r", task_path="t", host="h", args={})
    pod = job_body("j", "gpu-node-001", args, call)["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "config-0", "configMap": {"name": "pitstop-probe-scripts"}}]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "config-0", "mountPath": "/opt/pitstop", "readOnly": True}
    ]
    assert (
        "volumes" not in job_body("j", "n", JobArgs(image="busybox:1.36"), call)["spec"]["template"]["spec"]
    )


@pytest.mark.parametrize(
    ("mounts", "message"),
    [
        ([{"name": "Scripts", "mount_path": "/opt/pitstop"}], "not a valid ConfigMap name"),
        ([{"name": "scripts", "mount_path": "opt/pitstop"}], "must be an absolute directory"),
        ([{"name": "scripts", "mount_path": "/opt/../etc"}], "must be an absolute directory"),
        (
            [{"name": "a", "mount_path": "/opt/p"}, {"name": "b", "mount_path": "/opt/p/"}],
            "two ConfigMaps mounted at",
        ),
    ],
)
def test_bench_configmap_mounts_are_validated(mounts: list[dict[str, str]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AcceptanceArgs.model_validate({"bench": {"inference": {"image": "i:1", "config_maps": mounts}}})
