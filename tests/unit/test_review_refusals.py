"""Refusals an independent review asked for: a DR export never writes Secrets in clear, a
Prometheus token never goes to an unverified server, and a TLS check only reaches the port
the policy allowed (an https URL's)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pitstop.module_args.dr import ExportObjectsArgs, HttpTarget
from pitstop.module_args.prom import PromQueryArgs


@pytest.mark.parametrize("kind", ["Secret", "ServiceAccountToken"])
def test_a_dr_export_refuses_secret_bearing_kinds(kind: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ExportObjectsArgs.model_validate(
            {"bucket": "dr", "cluster": "c", "kinds": [{"api_version": "v1", "kind": kind}]}
        )
    assert f"{kind} objects are never exported (their values would be stored in clear)" in str(refused.value)


def test_a_prometheus_token_goes_only_to_a_verified_server() -> None:
    token = {"secret": "prom-token"}
    with pytest.raises(ValidationError) as refused:
        PromQueryArgs.model_validate(
            {"url": "https://p:9090", "query": "up", "token": token, "verify_tls": False}
        )
    assert "a `token` goes only to a server whose certificate is verified" in str(refused.value)
    PromQueryArgs.model_validate({"url": "https://p:9090", "query": "up", "verify_tls": False})
    PromQueryArgs.model_validate({"url": "https://p:9090", "query": "up", "token": token})


def test_a_tls_check_needs_an_https_url() -> None:
    with pytest.raises(ValidationError) as refused:
        HttpTarget.model_validate({"name": "ingress", "url": "http://registry.internal", "kind": "tls"})
    assert "target 'ingress': a tls check needs an https:// URL" in str(refused.value)
    HttpTarget.model_validate({"name": "ingress", "url": "https://registry.internal", "kind": "tls"})
    # A template is judged once rendered (the activity parses its arguments again).
    HttpTarget.model_validate({"name": "ingress", "url": "{{ ingress_url }}", "kind": "tls"})
