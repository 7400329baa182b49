"""Args of the `gpu.*` validation modules: each runs as a Kubernetes Job pinned to the node
(through `kube.job`) and parses the real output format of its tool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field

from pitstop.module_spec import ArgsT, ModuleArgs, ModuleSpec, RetryDefaults


class ValidationJob(ModuleArgs):
    node: str | None = Field(default=None, description="Node; defaults to the host's node_name or name.")
    namespace: str = Field(default="default", description="Namespace of the validation Job (must exist).")
    gpus: int | None = Field(
        default=None,
        ge=0,
        description="GPUs the Job asks for (default: the node's nvidia.com/gpu.count label).",
    )
    timeout_seconds: float = Field(default=3600, gt=0, description="Give up on the Job after this.")
    poll_interval_seconds: float = Field(default=5.0, gt=0, description="How often to look at the Job.")


class DcgmDiagArgs(ValidationJob):
    level: int = Field(default=3, ge=1, le=4, description="dcgmi diag -r level: 1 quick … 4 extended.")
    image: str = Field(
        default="nvcr.io/nvidia/cloud-native/dcgm:3.3.7-1-ubuntu22.04", description="DCGM image."
    )
    hostengine: str = Field(
        default="embedded",
        pattern=r"^(embedded|[A-Za-z0-9.-]+(:[0-9]{1,5})?)$",
        description="`embedded`: start nv-hostengine in the Job (dcgmi needs one); or `host:port` of a "
        "running one, e.g. the GPU Operator's `nvidia-dcgm.gpu-operator.svc:5555` (dcgmi --host).",
    )


class BaselineCheck(ValidationJob):
    """A figure compared with a node pool's recorded baseline (`baseline.record`)."""

    baseline_product: str | None = Field(default=None, description="Compare with this product's baseline…")
    baseline_pool: str | None = Field(default=None, description="…of this node pool (baseline.record).")
    max_deviation_pct: float = Field(default=5.0, ge=0, description="Allowed drop below the baseline.")
    baseline_store: str | None = Field(default=None, description="Baseline directory (see baseline.record).")


# nccl-tests as CoreWeave builds it (github.com/coreweave/nccl-tests, Dockerfile.ubuntu22 at the
# commit the tag ends in): CUDA 12.4.1 (driver R550 and later), NCCL 2.27.5, nccl-tests built
# from NVIDIA/nccl-tests 2cbb968 (2.13.6 and one commit) into /opt/nccl-tests/build, not on PATH.
# NVIDIA publishes no nccl-tests image (runbooks/manifests/probes/README.md).
NCCL_TESTS_IMAGE = "ghcr.io/coreweave/nccl-tests:12.4.1-devel-ubuntu22.04-nccl2.27.5-1-0120901"
NCCL_TESTS_BINARY = "/opt/nccl-tests/build/all_reduce_perf"


class NcclTestArgs(BaselineCheck):
    min_busbw_gbps: float | None = Field(
        default=None, ge=0, description="Fail below this average bus bandwidth."
    )
    image: str = Field(default=NCCL_TESTS_IMAGE, description="nccl-tests image.")
    binary: str = Field(
        default=NCCL_TESTS_BINARY, description="nccl-tests binary (the default image has none on PATH)."
    )
    min_bytes: str = Field(default="1M")
    max_bytes: str = Field(default="8G")


class CudaCheckArgs(ValidationJob):
    expected_devices: int | None = Field(default=None, ge=0, description="Default: the node's GPU count.")
    image: str = Field(default="nvcr.io/nvidia/k8s/cuda-sample:devicequery", description="deviceQuery image.")


class P2PCheckArgs(BaselineCheck):
    min_peer_gbps: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Fail when any GPU pair is slower (P2P writes). Default: the floor measured for the "
            "node's GPU product and count (pitstop/data/gpu-p2p.yaml); none for other hardware."
        ),
    )
    image: str = Field(default="nvcr.io/nvidia/k8s/cuda-sample:p2pbandwidthlatencytest", description="Image.")


def _spec(name: str, model: type[ArgsT], summary: str) -> ModuleSpec[ArgsT]:
    return ModuleSpec(
        name=name,
        args_model=model,
        summary=summary,
        supports_check_mode=True,
        start_to_close=timedelta(hours=2),
        heartbeat_timeout=timedelta(seconds=60),
        retry=RetryDefaults(maximum_attempts=3),
    )


DCGM_DIAG = _spec(
    "gpu.dcgm_diag", DcgmDiagArgs, "DCGM diagnostics (levels 1-4) as a Job; failures with DCGM_FR_*."
)
NCCL_TEST = _spec(
    "gpu.nccl_test", NcclTestArgs, "nccl-tests all_reduce as a Job; bus bandwidth vs minimum and baseline."
)
CUDA_CHECK = _spec(
    "gpu.cuda_check", CudaCheckArgs, "CUDA deviceQuery as a Job: every GPU visible, Result = PASS."
)
P2P_CHECK = _spec(
    "gpu.p2p_check", P2PCheckArgs, "p2pBandwidthLatencyTest as a Job: slowest GPU pair vs minimum."
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [DCGM_DIAG, NCCL_TEST, CUDA_CHECK, P2P_CHECK]
