"""`dr.cert_expiry` reads the real notAfter of the simulated control-plane node's kubeadm
certificates (CAs 10 years, leaf certificates 1 year) and fails or warns within `min_days`."""

from __future__ import annotations

import json

import pytest
from temporalio.exceptions import ApplicationError

from activities.dr.certs import cert_expiry
from tests.integration.dr.conftest import GPU, DrSite

KUBEADM_CERTS = {
    "ca.crt",
    "apiserver.crt",
    "apiserver-kubelet-client.crt",
    "apiserver-etcd-client.crt",
    "front-proxy-ca.crt",
    "front-proxy-client.crt",
    "etcd/ca.crt",
    "etcd/server.crt",
    "etcd/peer.crt",
    "etcd/healthcheck-client.crt",
}


def test_reads_every_kubeadm_certificate_and_its_expiry(dr_site: DrSite) -> None:
    result = dr_site.run(cert_expiry, dr_site.call("dr.cert_expiry", {"min_days": 30}))

    certs = {c["name"]: c for c in result.data["certificates"]}
    assert set(certs) == KUBEADM_CERTS
    assert certs["ca.crt"]["ca"] and certs["ca.crt"]["subject"] == "CN=kubernetes"
    assert 3648 <= certs["ca.crt"]["days_left"] <= 3650
    assert 363 <= certs["apiserver.crt"]["days_left"] <= 365
    assert certs["apiserver.crt"]["issuer"] == "CN=kubernetes"
    assert result.data["expiring"] == []
    assert result.data["soonest"]["days_left"] <= 365
    assert "the first to expire is" in result.msg
    assert "PRIVATE KEY" not in json.dumps(result.model_dump())


def test_certificates_expiring_within_min_days_fail_the_task_naming_them(dr_site: DrSite) -> None:
    with pytest.raises(ApplicationError) as failed:
        dr_site.run(cert_expiry, dr_site.call("dr.cert_expiry", {"min_days": 400}))
    assert failed.value.type == "PreconditionFailed"
    assert "7 of 10 certificates on cp-001 expire within 400 days: " in failed.value.message
    assert "apiserver.crt on " in failed.value.message and "kubeadm certs renew all" in failed.value.message
    assert "ca.crt on" not in failed.value.message.replace("etcd/ca.crt", "").replace(
        "front-proxy-ca.crt", ""
    )


def test_warn_reports_them_without_failing(dr_site: DrSite) -> None:
    result = dr_site.run(
        cert_expiry, dr_site.call("dr.cert_expiry", {"min_days": 400, "on_expiring": "warn"})
    )
    assert not result.failed and result.msg.startswith("WARNING: 7 of 10 certificates")
    assert "apiserver.crt" in result.data["expiring"] and "ca.crt" not in result.data["expiring"]


def test_a_node_without_a_pki_says_so(dr_site: DrSite) -> None:
    with pytest.raises(ApplicationError) as failed:
        dr_site.run(cert_expiry, dr_site.call("dr.cert_expiry", {}, host=GPU))
    assert failed.value.message == f"{GPU} has no /etc/kubernetes/pki (is it a control-plane node?)"


def test_only_paths_below_etc_kubernetes_are_accepted(dr_site: DrSite) -> None:
    with pytest.raises(ApplicationError) as refused:
        dr_site.run(cert_expiry, dr_site.call("dr.cert_expiry", {"pki_dir": "../../root/.ssh"}))
    assert refused.value.type == "InvalidArgs"
    assert "must be a plain path relative to /etc/kubernetes" in refused.value.message
