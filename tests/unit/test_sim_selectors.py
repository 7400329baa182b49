"""Label and field selectors as the apiserver applies them."""

from __future__ import annotations

import pytest

from pitstop.kube.selectors import labels_match, selector_requirements
from pitstop_sim.errors import ApiError
from pitstop_sim.resources import ResourceRegistry
from pitstop_sim.selectors import parse_field_selector, parse_label_selector, selector_string

PODS = ResourceRegistry().lookup("", "pods")
POD = {
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n1", "hostNetwork": False},
    "status": {"phase": "Running"},
}


def test_field_selector_equality_and_inequality() -> None:
    terms = parse_field_selector("spec.nodeName=n1,status.phase!=Succeeded,status.phase!=Failed", PODS)
    assert all(t.matches(POD) for t in terms)
    assert not parse_field_selector("spec.nodeName==n2", PODS)[0].matches(POD)
    assert parse_field_selector("spec.hostNetwork=false", PODS)[0].matches(POD)
    assert parse_field_selector("metadata.namespace=ns", PODS)[0].matches(POD)


def test_unsupported_field_label_is_refused_like_the_apiserver() -> None:
    with pytest.raises(ApiError) as caught:
        parse_field_selector("spec.containers=x", PODS)
    assert caught.value.code == 400
    assert caught.value.message.endswith("field label not supported: spec.containers")


def test_label_selector_object_with_expressions() -> None:
    selector = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["db"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    }
    requirements = selector_requirements(selector)
    assert labels_match(requirements, {"app": "web", "tier": "front"})
    assert not labels_match(requirements, {"app": "web", "tier": "db"})
    assert not labels_match(requirements, {"app": "web", "canary": "1"})
    assert labels_match(selector_requirements({}), {"anything": "x"})  # empty selects all
    assert not labels_match(selector_requirements(None), {"app": "web"})  # nil selects nothing
    assert selector_string(selector) == "app=web,tier notin (db),!canary"


def test_label_selector_syntax_error_is_a_bad_request() -> None:
    with pytest.raises(ApiError) as caught:
        parse_label_selector("app in (a")
    assert caught.value.code == 400
    assert "unable to parse requirement" in caught.value.message
