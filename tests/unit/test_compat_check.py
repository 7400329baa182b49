"""`evaluate`: how current/target maps and the inventory's skew block become skew and matrix checks."""

from __future__ import annotations

from pathlib import Path

from pitstop.compat.check import SkewFacts, evaluate
from pitstop.compat.matrix import load_matrices, load_skew_policy

SHIPPED = Path(__file__).resolve().parents[2] / "runbooks" / "compat"
POLICY = load_skew_policy(SHIPPED)
MATRICES = load_matrices(SHIPPED)


def test_unchanged_kubelet_in_the_target_keeps_each_nodes_own_version() -> None:
    # Inventories repeat unchanged components in the target (oldest version when mixed): that
    # must not flatten the per-node kubelets, or an old node would hide behind a newer one.
    current = {"kubernetes": "v1.31.2", "kubelet": "v1.28.0"}
    skew = SkewFacts(apiserver="v1.31.2", kubelets={"old": "v1.27.9", "new": "v1.31.2"})
    verdict = evaluate(
        current=current,
        target={**current, "kubernetes": "v1.32.0"},
        kubelets={},
        skew=skew,
        policy=POLICY,
        matrices={},
    )
    assert any("kubelet v1.27.9 on old" in violation.message for violation in verdict.violations)
    assert not any("on new" in violation.message for violation in verdict.violations)


def test_controller_manager_and_scheduler_follow_the_kubernetes_target() -> None:
    current = {"kubernetes": "v1.30.6", "kube-controller-manager": "v1.30.6", "kube-scheduler": "v1.30.6"}
    verdict = evaluate(
        current=current, target={"kubernetes": "v1.31.2"}, kubelets={}, skew=None, policy=POLICY, matrices={}
    )
    assert verdict.supported is True
    ok = {item.rule for item in verdict.checked if item.status == "ok"}
    assert "skew/kube-controller-manager-at-most-one-minor-older" in ok


def test_without_any_kubernetes_version_the_skew_rules_are_reported_not_checked() -> None:
    verdict = evaluate(
        current={"kueue": "v0.9.1"},
        target={"kueue": "v0.10.1"},
        kubelets={},
        skew=None,
        policy=POLICY,
        matrices=MATRICES,
    )
    assert [(item.rule, item.status) for item in verdict.checked if item.rule == "skew"] == [
        ("skew", "not-checked")
    ]
    assert verdict.supported is True


def test_components_not_deployed_are_neither_judged_nor_blocking() -> None:
    current = {"kubernetes": "v1.30.6", "network-operator": "not deployed", "trainer": "not declared"}
    verdict = evaluate(
        current=current,
        target={"kubernetes": "v1.31.2"},
        kubelets={},
        skew=None,
        policy=POLICY,
        matrices=MATRICES,
    )
    assert verdict.supported is True
    assert not any(item.component in {"network-operator", "trainer"} for item in verdict.checked)
