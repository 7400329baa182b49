"""acceptance.check with the inference probe at the engine under test, on the rehearsal cluster:
the baseline with vLLM v0.6.3's image (the release running before the upgrade), the check after
it with v0.6.6's (`targets.vllm`), as platform-upgrade.yaml's acceptance calls give them
(`acceptance_bench` with the inference image replaced). Neither image has `vllm bench serve`,
so the shipped script measures with pitstop's own client; each figure's detail names the engine
it came from, and vLLM 0.6's log has no load time to compare."""

from __future__ import annotations

from typing import Any

from activities.acceptance import acceptance_check
from pitstop_sim import SimCluster
from pitstop_sim.models import NodeHealth, ProfileUpdate
from tests.integration.kube.conftest import ModuleRunner, StartSim, module_runner, start_sim
from tests.integration.test_acceptance_module import PLATFORM, checks_of, probe_scripts, shipped_bench

__all__ = ["module_runner", "start_sim"]

FAST = {"poll_interval_seconds": 0.2, "job_timeout_seconds": 60}
LAYERS = ["inference/ttft", "inference/tpot", "inference/model_load"]


def _bench_at(release: str) -> dict[str, Any]:
    """The runbook's `acceptance_bench`, its inference image at `release` (what the acceptance
    calls' `combine` gives)."""
    bench = shipped_bench()
    return {**bench, "inference": {**bench["inference"], "image": f"vllm/vllm-openai:{release}"}}


def _accept(runner: ModuleRunner, sim: SimCluster, **args: Any) -> Any:
    return runner(
        acceptance_check, sim, {**FAST, "layers": LAYERS, "nodes": ["gpu-node-003"], **args},
        host="localhost", timeout=120,
    )  # fmt: skip


def test_the_baseline_and_the_check_after_measure_the_engine_before_and_after(
    start_sim: StartSim, module_runner: ModuleRunner
) -> None:
    sim = start_sim(PLATFORM)
    sim.create("configmaps", probe_scripts(), namespace="default")
    before = _accept(module_runner, sim, bench=_bench_at("v0.6.3"))
    checks = checks_of(before.data)
    assert checks["inference/ttft"]["value"] == 180 and checks["inference/tpot"]["value"] == 22
    recorded = "ttft_ms_p50=180 on gpu-node-003 (vllm 0.6.3) (no baseline: recorded)"
    assert checks["inference/ttft"]["detail"] == recorded
    # vLLM 0.6 logs no model load time: not measured, and said so, rather than another figure.
    assert checks["inference/model_load"]["status"] == "n/a"
    assert "model_load_seconds" in checks["inference/model_load"]["detail"]

    sim.set_node_profile("gpu-node-003", ProfileUpdate(health=NodeHealth(inference_ttft_ms=260)))
    after = _accept(
        module_runner, sim, bench=_bench_at("v0.6.6"), baseline=before.data["measured"], on_deviation="report"
    )
    checks = checks_of(after.data)
    assert checks["inference/ttft"]["detail"] == "ttft_ms_p50=260 on gpu-node-003 (vllm 0.6.6)"
    assert [d["check"] for d in after.data["deviations"]] == ["inference/ttft"]
    assert "inference/ttft: 260 ms vs baseline 180 (+44.4%, limit 10%)" in after.msg
