"""`compat.check` end to end against the shipped data files (the activity called directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from activities.compat import compat_check
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.modules import get_module

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
SKEW_URL = "https://kubernetes.io/releases/version-skew-policy/"

CURRENT = {
    "kubernetes": "v1.30.6",
    "kube-controller-manager": "v1.30.6",
    "kube-scheduler": "v1.30.6",
    "kubelet": "v1.30.6",
    "gpu-operator": "v24.6.2",
    "gpu-driver": "550.90.07",
    "cuda": "12.4",
    "network-operator": "v24.7.0",
    "nic-driver": "24.07-0.6.1.0",
    "kueue": "v0.9.1",
    "jobset": "v0.7.1",
    "lws": "v0.4.0",
    "kuberay": "v1.2.2",
    "kserve": "v0.14.0",
    "vllm": "v0.6.3",
    "trainer": "not deployed",
}
TARGET_1_31 = {
    "kubernetes": "v1.31.2",
    "kubelet": "v1.31.2",
    "gpu-operator": "v24.9.2",
    "gpu-driver": "570.86.15",
    "cuda": "12.8",
    "network-operator": "v25.1.0",
    "kueue": "v0.10.1",
    "jobset": "v0.8.1",
    "lws": "v0.5.1",
    "kuberay": "v1.3.0",
    "kserve": "v0.14.1",
}
KUBELETS = {"gpu-node-001": "v1.30.6", "gpu-node-002": "v1.30.6", "cp-001": "v1.30.6"}


@pytest.fixture(autouse=True)
def shipped_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PITSTOP_COMPAT_DIR", raising=False)
    monkeypatch.setenv("PITSTOP_RUNBOOK_DIR", str(RUNBOOKS))


def run(args: dict[str, Any], *, check_mode: bool = False) -> ModuleResult:
    call = ModuleCall(
        module="compat.check",
        host="localhost",
        args=args,
        check_mode=check_mode,
        run_id="compat-test",
        task_path="preflight/compat",
    )
    return compat_check(call)


def test_module_is_registered_read_only_with_check_mode() -> None:
    spec = get_module("compat.check")
    assert spec is not None
    assert spec.supports_check_mode is True
    assert spec.disruptive is False


def test_supported_1_30_to_1_31_plan_passes_and_lists_what_was_checked() -> None:
    result = run({"current": CURRENT, "target": TARGET_1_31, "kubelets": KUBELETS})

    assert result.failed is False, result.msg
    assert result.changed is False
    assert result.data["supported"] is True
    assert result.data["violations"] == []
    checked = {(item["rule"], item["status"]) for item in result.data["checked"]}
    assert ("skew/apiserver-one-minor-at-a-time", "ok") in checked
    assert ("matrix/gpu-operator/gpu-driver", "ok") in checked
    assert ("matrix/gpu-operator/upgrade-from", "ok") in checked
    assert ("matrix/kuberay/none", "not-checked") in checked
    sources = {item["component"]: item["source"] for item in result.data["sources"]}
    assert sources["kubernetes"] == SKEW_URL
    assert sources["gpu-operator"].startswith("https://docs.nvidia.com/")
    assert "kubernetes v1.30.6 → v1.31.2" in result.msg


def test_1_30_to_1_32_is_refused_citing_the_skew_rule_and_its_url() -> None:
    target = {**TARGET_1_31, "kubernetes": "v1.32.0", "kubelet": "v1.32.0"}
    result = run({"current": CURRENT, "target": target, "kubelets": KUBELETS})

    assert result.failed is True
    assert result.data["supported"] is False
    assert (
        "kube-apiserver v1.30.6 → v1.32.0 skips 1.31: upgrade one minor at a time "
        f"(rule skew/apiserver-one-minor-at-a-time, {SKEW_URL})"
    ) in result.msg
    [step] = [v for v in result.data["violations"] if v["rule"] == "skew/apiserver-one-minor-at-a-time"]
    assert step["source"] == SKEW_URL
    assert step["component"] == "kubernetes"


def test_installable_only_combination_is_refused_as_unsupported() -> None:
    # A 1.31 cluster already on GPU Operator 24.9.2 moves to 1.32: the skew policy allows the
    # step, the operator's chart installs there, NVIDIA does not support it.
    current = {**CURRENT, **TARGET_1_31, "kube-controller-manager": "v1.31.2", "kube-scheduler": "v1.31.2"}
    target = {"kubernetes": "v1.32.0", "kubelet": "v1.32.0"}
    result = run({"current": current, "target": target, "matrices": ["gpu-operator"]})

    assert result.failed is True
    [violation] = result.data["violations"]
    assert violation["rule"] == "matrix/gpu-operator/kubernetes"
    assert (
        "installs with kubernetes v1.32.0 but the vendor does not support that combination"
        in violation["message"]
    )
    assert "matrix/gpu-operator/kubernetes" in result.msg


def test_operator_left_behind_is_judged_against_the_new_kubernetes() -> None:
    target = {key: value for key, value in TARGET_1_31.items() if key != "network-operator"}
    result = run({"current": CURRENT, "target": target})

    assert result.failed is True
    [violation] = result.data["violations"]
    assert violation["rule"] == "matrix/network-operator/kubernetes"
    assert "network-operator v24.7.0 does not support kubernetes v1.31.2" in violation["message"]
    assert "kubernetes2470/platform-support" in violation["source"]


def test_inventory_result_supplies_current_target_and_kubelets() -> None:
    inventory = {
        "changed": False,
        "failed": False,
        "msg": "versions collected",
        "current": CURRENT,
        "target": {**CURRENT, **TARGET_1_31},
        "skew": {
            "apiserver": "v1.30.6",
            "controller_manager": "v1.30.6",
            "scheduler": "v1.30.6",
            "kubelets": {"gpu-node-001": "v1.27.3", "gpu-node-002": "v1.30.6"},
        },
    }
    result = run({"inventory": inventory})

    assert result.failed is True
    [violation] = [v for v in result.data["violations"] if "before the nodes" in v["message"]]
    assert violation["rule"] == "skew/kubelet-at-most-three-minors-older"
    assert "kubelet v1.27.3 on gpu-node-001" in violation["message"]


def test_target_given_next_to_the_inventory_overrides_it() -> None:
    inventory = {"current": CURRENT, "target": CURRENT, "skew": {"apiserver": "v1.30.6"}}
    result = run({"inventory": inventory, "target": {"kubernetes": "v1.32.0"}})
    assert "skew/apiserver-one-minor-at-a-time" in result.msg


def test_check_mode_gives_the_same_verdict() -> None:
    args = {"current": CURRENT, "target": {**TARGET_1_31, "kubernetes": "v1.32.0"}}
    assert run(args, check_mode=True).model_dump() == run(args).model_dump()


def test_unknown_component_key_is_refused_with_a_suggestion_and_the_valid_keys() -> None:
    with pytest.raises(ApplicationError) as caught:
        run({"current": CURRENT, "target": {"kubernets": "v1.31.2"}})
    assert caught.value.type == "InvalidArgs"
    assert caught.value.non_retryable
    message = str(caught.value)
    assert "unknown component 'kubernets' (did you mean 'kubernetes'?)" in message
    assert "valid keys: os, kernel, gpu-firmware, kubernetes" in message


def test_unknown_matrix_name_is_refused_listing_the_available_ones() -> None:
    with pytest.raises(
        ApplicationError, match="no vendor matrix for 'gpu-operater' \\(did you mean 'gpu-operator'\\?\\)"
    ):
        run({"current": CURRENT, "target": TARGET_1_31, "matrices": ["gpu-operater"]})


def test_inventory_that_is_not_an_inventory_result_is_refused() -> None:
    with pytest.raises(ApplicationError, match=r"expected the registered result of inventory\.versions"):
        run({"inventory": {"rows": []}})


def test_missing_compat_data_is_a_precondition_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PITSTOP_COMPAT_DIR", str(tmp_path))
    with pytest.raises(ApplicationError) as caught:
        run({"current": CURRENT, "target": TARGET_1_31})
    assert caught.value.type == "PreconditionFailed"
    assert "kubernetes-skew.yaml" in str(caught.value)
    assert "PITSTOP_COMPAT_DIR" in str(caught.value)


def test_phases_refuse_an_order_that_runs_an_unsupported_stack_in_between() -> None:
    # docs/upgrade-process.md "Upgrade order": Kubernetes first, operators later. GPU Operator
    # 24.6 does not support 1.31.
    phases = [
        ["kubernetes", "kube-controller-manager", "kube-scheduler", "kubelet"],
        ["gpu-driver", "cuda"],
        ["gpu-operator", "network-operator"],
        ["kueue", "jobset", "lws", "kuberay", "kserve"],
    ]
    result = run({"current": CURRENT, "target": TARGET_1_31, "phases": phases})

    assert result.failed is True
    messages = [violation["message"] for violation in result.data["violations"]]
    assert (
        "after phase 1 (kubernetes, kube-controller-manager, kube-scheduler, kubelet): "
        "gpu-operator v24.6.2 does not support kubernetes v1.31.2"
    ) in "\n".join(messages)
    assert any(
        m.startswith("after phase 2 (gpu-driver, cuda): gpu-operator v24.6.2 does not support gpu-driver")
        for m in messages
    )
    assert len(messages) == len(set(messages))


def test_in_between_warn_accepts_the_order_and_reports_each_window_as_a_warning() -> None:
    phases = [
        ["kubernetes", "kube-controller-manager", "kube-scheduler", "kubelet"],
        ["gpu-driver", "cuda"],
        ["gpu-operator", "network-operator"],
    ]
    result = run({"current": CURRENT, "target": TARGET_1_31, "phases": phases, "in_between": "warn"})

    assert result.failed is False, result.msg
    assert result.data["violations"] == []
    warnings = [w["message"] for w in result.data["warnings"]]
    assert any("gpu-operator v24.6.2 does not support kubernetes v1.31.2" in w for w in warnings), warnings
    assert "unsupported combination(s) on the way there" in result.msg
    # The target itself is still judged strictly: a target no matrix supports fails either way.
    skipped = run(
        {
            "current": CURRENT,
            "target": {**TARGET_1_31, "network-operator": "v24.10.0"},
            "phases": phases,
            "in_between": "warn",
        }
    )
    assert skipped.failed is True


def test_unknown_component_in_phases_is_refused() -> None:
    with pytest.raises(ApplicationError, match="unknown component 'gpu-operater'"):
        run({"current": CURRENT, "target": TARGET_1_31, "phases": [["gpu-operater"]]})


def test_a_steps_skew_only_check_passes_an_accepted_window_and_still_refuses_a_kubelet_ahead() -> None:
    # The kubelets' step of the upgrade: the control plane is on v1.31 already, the old network
    # operator with it (a window preflight accepted). Only the skew policy is judged again.
    now = {
        **CURRENT,
        "kubernetes": "v1.31.2",
        "kube-controller-manager": "v1.31.2",
        "kube-scheduler": "v1.31.2",
    }
    step = {"current": now, "target": {"kubelet": "v1.31.2"}}
    assert run(step).failed is True  # the vendor matrix still says no
    judged = run({**step, "vendor_matrices": False})
    assert judged.failed is False, judged.msg
    assert judged.data["violations"] == []
    # The same step before the control plane moved: a kubelet newer than the apiserver.
    ahead = run({"current": CURRENT, "target": {"kubelet": "v1.31.2"}, "vendor_matrices": False})
    assert ahead.failed is True
    assert any("kubelet" in v["message"] and SKEW_URL in v["source"] for v in ahead.data["violations"])
