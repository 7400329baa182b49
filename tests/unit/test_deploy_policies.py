"""The worker policies shipped in deploy/ are read by the worker's own loader, so a policy the
compose stack or the in-cluster Deployment mounts can never stop the worker at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.policy import load_policy
from pitstop.policy.errors import POLICY_ENV
from pitstop.safe_yaml import safe_load_file

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, home: Path) -> object:
    return load_policy({POLICY_ENV: str(path), "PITSTOP_HOME": str(home)})


def test_the_compose_stacks_policy_loads_with_its_cluster_s3_etcd_and_grants(tmp_path: Path) -> None:
    policy = _load(ROOT / "deploy" / "worker-policy.yaml", tmp_path)
    shown = repr(policy)
    assert "production" in shown and "http://minio:9000" in shown and "fleet-ssh-key" in shown


def test_the_in_cluster_policy_in_its_configmap_loads(tmp_path: Path) -> None:
    configmap = safe_load_file(ROOT / "deploy" / "kubernetes" / "worker-policy.yaml")
    assert isinstance(configmap, dict)
    text = configmap["data"]["worker-policy.yaml"]
    path = tmp_path / "worker-policy.yaml"
    path.write_text(text, encoding="utf-8")
    policy = _load(path, tmp_path)
    assert "this-cluster" in repr(policy)


def test_a_policy_with_a_misspelt_key_stops_the_loader_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "worker-policy.yaml"
    text = (ROOT / "deploy" / "worker-policy.yaml").read_text(encoding="utf-8")
    path.write_text(text.replace("\nsecrets:", "\nsecretz:"), encoding="utf-8")
    with pytest.raises(Exception, match=r"worker-policy\.yaml:\d+:\d+"):
        _load(path, tmp_path)
