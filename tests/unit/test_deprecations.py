"""The removed-API table (data from the Kubernetes Deprecated API Migration Guide)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.compat.deprecations import (
    DeprecationDataError,
    RemovedApis,
    TargetVersionError,
    kube_minor_of,
    load_removed_apis,
)

COMPAT = Path(__file__).resolve().parents[2] / "runbooks" / "compat"


@pytest.fixture(scope="module")
def table() -> RemovedApis:
    return load_removed_apis(COMPAT)


@pytest.mark.parametrize(
    ("api_version", "kind", "removed_in", "replacement"),
    [
        ("extensions/v1beta1", "Ingress", "1.22", "networking.k8s.io/v1"),
        ("policy/v1beta1", "PodDisruptionBudget", "1.25", "policy/v1"),
        ("policy/v1beta1", "PodSecurityPolicy", "1.25", ""),
        ("batch/v1beta1", "CronJob", "1.25", "batch/v1"),
        ("autoscaling/v2beta2", "HorizontalPodAutoscaler", "1.26", "autoscaling/v2"),
        ("storage.k8s.io/v1beta1", "CSIStorageCapacity", "1.27", "storage.k8s.io/v1"),
        ("flowcontrol.apiserver.k8s.io/v1beta2", "FlowSchema", "1.29", "flowcontrol.apiserver.k8s.io/v1"),
        (
            "flowcontrol.apiserver.k8s.io/v1beta3",
            "PriorityLevelConfiguration",
            "1.32",
            "flowcontrol.apiserver.k8s.io/v1",
        ),
        ("apps/v1beta2", "Deployment", "1.16", "apps/v1"),
    ],
)
def test_rows_follow_the_migration_guide(
    table: RemovedApis, api_version: str, kind: str, removed_in: str, replacement: str
) -> None:
    row = table.removed_by(api_version, kind, "v1.32.0")
    assert row is not None
    assert (row.removed_in, row.replacement) == (removed_in, replacement)
    assert row.source.startswith("https://kubernetes.io/docs/reference/using-api/deprecation-guide/#v1-")


def test_an_api_is_removed_from_its_release_on(table: RemovedApis) -> None:
    assert table.removed_by("policy/v1beta1", "PodDisruptionBudget", "v1.24.17") is None
    assert table.removed_by("policy/v1beta1", "PodDisruptionBudget", "1.25") is not None
    assert table.removed_by("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema", "v1.31.2") is None
    assert table.removed_by("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema", "v1.32.0") is not None
    # Same apiVersion, other kind; same kind, served version.
    assert table.removed_by("policy/v1beta1", "Eviction", "v1.32") is None
    assert table.removed_by("policy/v1", "PodDisruptionBudget", "v1.32") is None


def test_the_advice_names_the_replacement_or_why_there_is_none(table: RemovedApis) -> None:
    cronjob = table.removed_by("batch/v1beta1", "CronJob", "1.30")
    psp = table.removed_by("policy/v1beta1", "PodSecurityPolicy", "1.30")
    assert cronjob is not None and psp is not None
    assert cronjob.advice() == "use batch/v1"
    assert "Pod Security Admission" in psp.advice()


@pytest.mark.parametrize("text", ["latest", "1", "v1.x", ""])
def test_a_target_that_is_not_a_version_is_refused_with_the_accepted_shapes(text: str) -> None:
    with pytest.raises(
        TargetVersionError,
        match=f"target Kubernetes version '{text}' is not a version: expected v1.31, 1.31 or v1.31.2",
    ):
        kube_minor_of(text)


def test_bad_table_files_name_the_file_and_row(tmp_path: Path) -> None:
    with pytest.raises(
        DeprecationDataError, match=r"kubernetes-removed-apis.yaml: cannot read the removed-API table"
    ):
        load_removed_apis(tmp_path)
    (tmp_path / "kubernetes-removed-apis.yaml").write_text(
        "source: x\nremoved:\n  - {apiVersion: a/v1, kind: K, removed_in: 1.30, source: s}\n"
    )
    with pytest.raises(
        DeprecationDataError,
        match=r"removed\.0\.removed_in: write removed_in as a quoted string \(got 1\.3\)",
    ):
        load_removed_apis(tmp_path)
