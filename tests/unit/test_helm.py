"""Helm 3 release records: the Secret layout helm's storage driver writes, read back."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from pitstop.helm import (
    SECRET_TYPE,
    HelmRelease,
    HelmReleaseError,
    decode_payload,
    decode_release,
    encode_payload,
    encode_release,
    latest_releases,
)

CRD = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: a.b.c}\n"


def release(version: int = 1, status: str = "deployed", name: str = "gpu-operator") -> HelmRelease:
    return HelmRelease(
        name=name,
        namespace="gpu-operator",
        version=version,
        status=status,
        chart_name="gpu-operator",
        chart_version=f"v24.{version}.0",
        app_version=f"v24.{version}.0",
        manifest="---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        files={
            "crds/nvidia.com_clusterpolicies.yaml": CRD,
            "values.yaml": "a: 1\n",
            "logo.png": b"\x89PNG\xff",
        },
    )


def test_the_secret_is_named_labelled_and_typed_as_helm_writes_it() -> None:
    secret = encode_release(release(3, "superseded"))
    assert secret["metadata"]["name"] == "sh.helm.release.v1.gpu-operator.v3"
    assert secret["metadata"]["namespace"] == "gpu-operator"
    assert secret["type"] == SECRET_TYPE == "helm.sh/release.v1"
    assert secret["metadata"]["labels"] == {
        "owner": "helm",
        "name": "gpu-operator",
        "status": "superseded",
        "version": "3",
    }


def test_data_release_is_base64_of_helms_base64_gzip_json() -> None:
    secret = encode_release(release())
    helm_payload = base64.b64decode(secret["data"]["release"])  # the Secret's own layer
    gzipped = base64.b64decode(helm_payload)  # helm's encodeRelease layer
    assert gzipped[:3] == b"\x1f\x8b\x08"
    doc = json.loads(gzip.decompress(gzipped))
    assert doc["info"]["status"] == "deployed"
    assert doc["chart"]["metadata"] == {
        "name": "gpu-operator",
        "version": "v24.1.0",
        "appVersion": "v24.1.0",
        "apiVersion": "v2",
    }
    files = {f["name"]: base64.b64decode(f["data"]) for f in doc["chart"]["files"]}
    assert files["crds/nvidia.com_clusterpolicies.yaml"] == CRD.encode()


def test_decode_reads_back_what_encode_wrote_including_binary_files() -> None:
    original = release(2)
    decoded = decode_release(encode_release(original))
    assert decoded == original
    assert decoded.crd_files() == {"crds/nvidia.com_clusterpolicies.yaml": CRD}


def test_decode_accepts_records_stored_before_helm_compressed_them() -> None:
    doc = {"name": "old", "namespace": "ns", "version": 1, "info": {"status": "deployed"}, "chart": {}}
    payload = base64.b64encode(json.dumps(doc).encode())
    secret = {
        "metadata": {"name": "sh.helm.release.v1.old.v1"},
        "data": {"release": base64.b64encode(payload).decode()},
    }
    assert decode_release(secret).name == "old"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "secret ns/sh.helm.release.v1.x.v1: no data.release key; not a Helm 3 release record"),
        ({"release": "%%%"}, "secret ns/sh.helm.release.v1.x.v1: data.release is not base64"),
        (
            {"release": base64.b64encode(base64.b64encode(b"not json")).decode()},
            "secret ns/sh.helm.release.v1.x.v1: release payload is not JSON",
        ),
    ],
)
def test_unreadable_records_name_the_secret(data: dict[str, str], message: str) -> None:
    secret = {"metadata": {"name": "sh.helm.release.v1.x.v1", "namespace": "ns"}, "data": data}
    with pytest.raises(HelmReleaseError, match="^" + message.replace(".", r"\.")):
        decode_release(secret)


def test_latest_releases_prefers_the_newest_deployed_revision() -> None:
    secrets = [
        encode_release(release(1, "superseded")),
        encode_release(release(2, "deployed")),
        encode_release(release(3, "failed")),  # a failed upgrade: revision 2 is still what runs
        encode_release(release(1, "pending-install", name="kueue")),
        {"metadata": {"name": "tls", "namespace": "gpu-operator"}, "type": "kubernetes.io/tls", "data": {}},
    ]
    latest = {(r.name, r.version, r.status) for r in latest_releases(secrets)}
    assert latest == {("gpu-operator", 2, "deployed"), ("kueue", 1, "pending-install")}


def test_payloads_wrapped_by_hand_repair_are_read_as_helm_reads_them() -> None:
    # Helm's decoder is Go's base64.StdEncoding, which skips CR and LF. A record repaired by
    # hand (`kubectl get secret ... | base64 -d | base64 -d | gunzip`, edit, `gzip | base64`)
    # is wrapped at 76 columns by coreutils' base64, and on Windows with CR LF.
    payload = encode_payload(release(4, "deployed"))
    for newline in ("\n", "\r\n"):
        wrapped = newline.join(payload[i : i + 76] for i in range(0, len(payload), 76)) + newline
        secret = encode_release(release(4, "deployed"))
        secret["data"]["release"] = base64.b64encode(wrapped.encode()).decode()
        decoded = decode_release(secret)
        assert (decoded.name, decoded.version, decoded.chart_version) == ("gpu-operator", 4, "v24.4.0")
    # Anything else outside the alphabet stays an error, as in Go.
    with pytest.raises(HelmReleaseError, match="is not base64"):
        decode_payload(payload[:40] + " " + payload[40:])


def test_one_unreadable_release_is_reported_without_hiding_the_others() -> None:
    broken = encode_release(release(1, "deployed", name="broken"))
    broken["data"]["release"] = base64.b64encode(b"H4sI-not-a-payload").decode()
    secrets = [encode_release(release(2, "deployed")), broken]
    unreadable: list[str] = []
    assert [(r.name, r.version) for r in latest_releases(secrets, unreadable)] == [("gpu-operator", 2)]
    [reason] = unreadable
    # fmt: off
    assert reason.startswith(
        "secret gpu-operator/sh.helm.release.v1.broken.v1: release payload is not base64"
    )
