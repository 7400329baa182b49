"""Skew between clusters (pitstop/fleet/skew.py): which clusters run a version other than the
newest any cluster runs, or other than the majority's; equal versions written differently are
equal; values that are no version are never the newest."""

from __future__ import annotations

from datetime import UTC, datetime

from pitstop.fleet.models import ClusterInventory, ComponentVersion
from pitstop.fleet.skew import component_skew, fleet_skew

WHEN = datetime(2026, 12, 1, tzinfo=UTC)


def inventory(**versions: str) -> ClusterInventory:
    return ClusterInventory(
        run_id="r",
        runbook="fleet-inventory",
        taken_at=WHEN,
        components=[
            ComponentVersion(component=k.replace("_", "-"), row="", current=v) for k, v in versions.items()
        ],
    )


def test_one_cluster_behind_the_newest_and_off_the_majority() -> None:
    row = component_skew(
        "kubernetes",
        {"lab": "v1.31.2", "prod-a": "v1.30.6", "prod-b": "v1.30.6", "stg": "v1.31.2", "x": "v1.30.6"},
    )
    assert row is not None
    assert (row.newest, row.majority) == ("v1.31.2", "v1.30.6")
    assert row.behind_newest == ["prod-a", "prod-b", "x"]
    assert row.off_majority == ["lab", "stg"]
    assert row.row == "Kubernetes and containerd/CRI-O"
    assert row.highlighted == ["lab", "prod-a", "prod-b", "stg", "x"]


def test_the_same_version_written_differently_is_no_skew() -> None:
    assert component_skew("kubernetes", {"a": "v1.30.6", "b": "1.30.6"}) is None
    assert component_skew("container-runtime", {"a": "containerd://1.7.20", "b": "1.7.20"}) is None
    assert component_skew("gpu-driver", {"a": "550.90.07"}) is None


def test_newest_orders_versions_numerically_and_never_picks_a_non_version() -> None:
    row = component_skew("kueue", {"a": "v0.9.1", "b": "v0.10.1", "c": "not deployed"})
    assert row is not None
    assert row.newest == "v0.10.1"
    assert row.behind_newest == ["a", "c"]
    # No version is run by more than half of the clusters.
    assert row.majority is None and row.off_majority == []


def test_no_value_reads_as_a_version_compares_by_majority_only() -> None:
    row = component_skew(
        "model-formats", {"a": "onnx, safetensors", "b": "onnx, safetensors", "c": "safetensors"}
    )
    assert row is not None
    assert row.newest is None and row.behind_newest == []
    assert (row.majority, row.off_majority) == ("onnx, safetensors", ["c"])


def test_fleet_skew_lists_only_differing_components_in_inventory_order() -> None:
    rows = fleet_skew(
        {
            "lab": inventory(kubernetes="v1.31.2", gpu_driver="570.86.15", kueue="v0.9.1"),
            "prod": inventory(kubernetes="v1.30.6", gpu_driver="550.90.07", kueue="v0.9.1"),
        }
    )
    assert [(r.component, r.newest, r.behind_newest) for r in rows] == [
        ("kubernetes", "v1.31.2", ["prod"]),
        ("gpu-driver", "570.86.15", ["prod"]),
    ]
    # A two-cluster split has no majority.
    assert all(r.majority is None for r in rows)


def test_a_component_one_inventory_lacks_is_compared_among_those_reporting_it() -> None:
    rows = fleet_skew(
        {
            "old": inventory(kubernetes="v1.30.6"),
            "a": inventory(kubernetes="v1.30.6", kserve="v0.14.0"),
            "b": inventory(kubernetes="v1.30.6", kserve="v0.13.0"),
        }
    )
    assert [(r.component, sorted(r.by_cluster)) for r in rows] == [("kserve", ["a", "b"])]
    assert fleet_skew({"only": inventory(kubernetes="v1.30.6")}) == []


def test_the_fleet_view_queries_the_search_attributes_the_runs_keep() -> None:
    from pitstop.fleet import source
    from workflows import run_status

    for mine, theirs in (
        (source.CLUSTER_KEY, run_status.CLUSTER_KEY),
        (source.RUNBOOK_KEY, run_status.RUNBOOK_KEY),
        (source.STAGE_KEY, run_status.STAGE_KEY),
        (source.STATUS_KEY, run_status.STATUS_KEY),
    ):
        assert mine == theirs
