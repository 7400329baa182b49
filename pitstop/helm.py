"""Helm 3 release records as the Secret storage driver keeps them.

Helm 3 stores each revision of a release in a Secret `sh.helm.release.v1.<name>.v<N>` of type
`helm.sh/release.v1`. Its `release` key holds what helm's `encodeRelease`
(pkg/storage/driver/util.go) produces: base64(gzip(JSON of the release)). A Secret's `data`
values are base64 again on the wire, so `data.release` as the API serves it is
base64(base64(gzip(JSON))). Chart files in the JSON are Go `[]byte`, i.e. base64 strings.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

SECRET_TYPE = "helm.sh/release.v1"
NAME_PREFIX = "sh.helm.release.v1."
GZIP_MAGIC = b"\x1f\x8b\x08"


class HelmReleaseError(ValueError):
    """A Secret that is not a readable Helm 3 release record."""


class HelmRelease(BaseModel):
    name: str
    namespace: str
    version: int = Field(ge=1)
    status: str = "deployed"
    chart_name: str
    chart_version: str
    app_version: str = ""
    manifest: str = ""
    # chart files by path inside the chart (`crds/x.yaml`, `values.yaml`): text when UTF-8
    files: dict[str, str | bytes] = Field(default_factory=dict)

    def file_text(self, name: str) -> str:
        data = self.files[name]
        return data.decode("utf-8", "replace") if isinstance(data, bytes) else data

    def crd_files(self) -> dict[str, str]:
        """The chart's `crds/` files: Helm applies them on install only, never on upgrade."""
        return {
            name: self.file_text(name)
            for name in sorted(self.files)
            if name.startswith("crds/") and name.endswith((".yaml", ".yml", ".json"))
        }


def secret_name(release: str, version: int) -> str:
    return f"{NAME_PREFIX}{release}.v{version}"


def _release_json(release: HelmRelease) -> dict[str, Any]:
    files = []
    for name, data in sorted(release.files.items()):
        raw = data.encode("utf-8") if isinstance(data, str) else data
        files.append({"name": name, "data": base64.b64encode(raw).decode("ascii")})
    return {
        "name": release.name,
        "namespace": release.namespace,
        "version": release.version,
        "info": {"status": release.status},
        "chart": {
            "metadata": {
                "name": release.chart_name,
                "version": release.chart_version,
                "appVersion": release.app_version,
                "apiVersion": "v2",
            },
            "files": files,
        },
        "manifest": release.manifest,
    }


def encode_payload(release: HelmRelease) -> str:
    """What helm's encodeRelease returns: base64 of the gzipped release JSON."""
    raw = json.dumps(_release_json(release), separators=(",", ":")).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9)).decode("ascii")


def encode_release(release: HelmRelease) -> dict[str, Any]:
    """The Secret body (apiVersion v1) that stores `release`, ready to POST."""
    payload = encode_payload(release)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(release.name, release.version),
            "namespace": release.namespace,
            "labels": {
                "owner": "helm",
                "name": release.name,
                "status": release.status,
                "version": str(release.version),
            },
        },
        "type": SECRET_TYPE,
        "data": {"release": base64.b64encode(payload.encode("ascii")).decode("ascii")},
    }


def is_release_secret(secret: Mapping[str, Any]) -> bool:
    name = str((secret.get("metadata") or {}).get("name") or "")
    return secret.get("type") == SECRET_TYPE or name.startswith(NAME_PREFIX)


def _b64decode(text: str | bytes) -> bytes:
    """Base64 as Go's `base64.StdEncoding` reads it, which helm uses: CR and LF are ignored
    (a record repaired by hand the way Helm's docs show, `... | gzip | base64`, is wrapped at
    76 columns), anything else outside the alphabet is an error."""
    raw = text.encode("ascii", "replace") if isinstance(text, str) else bytes(text)
    return base64.b64decode(raw.replace(b"\r", b"").replace(b"\n", b""), validate=True)


def decode_payload(payload: str | bytes, *, where: str = "release") -> dict[str, Any]:
    """Inverse of `encode_payload`; like helm, accepts uncompressed (pre-gzip) records."""
    try:
        raw = _b64decode(payload)
    except (binascii.Error, ValueError) as exc:
        raise HelmReleaseError(f"{where}: release payload is not base64 ({exc})") from exc
    if raw[:3] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise HelmReleaseError(f"{where}: release payload is not valid gzip ({exc})") from exc
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise HelmReleaseError(f"{where}: release payload is not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise HelmReleaseError(f"{where}: release JSON is not an object")
    return doc


def decode_release(secret: Mapping[str, Any]) -> HelmRelease:
    """Read the release stored in a Helm 3 Secret as the API serves it."""
    meta = secret.get("metadata") or {}
    where = f"secret {meta.get('namespace', '')}/{meta.get('name', '')}"
    data = secret.get("data") or {}
    if "release" not in data:
        raise HelmReleaseError(f"{where}: no data.release key; not a Helm 3 release record")
    try:
        payload = _b64decode(str(data["release"]))
    except (binascii.Error, ValueError) as exc:
        raise HelmReleaseError(f"{where}: data.release is not base64 ({exc})") from exc
    doc = decode_payload(payload, where=where)
    return release_from_json(doc, where=where, default_namespace=str(meta.get("namespace", "")))


def release_from_json(
    doc: Mapping[str, Any], *, where: str = "release", default_namespace: str = ""
) -> HelmRelease:
    chart = doc.get("chart") or {}
    metadata = chart.get("metadata") or {}
    files: dict[str, str | bytes] = {}
    for entry in chart.get("files") or []:
        if not isinstance(entry, dict) or "name" not in entry:
            continue
        try:
            raw = base64.b64decode(str(entry.get("data") or ""))
        except (binascii.Error, ValueError) as exc:
            raise HelmReleaseError(f"{where}: chart file {entry['name']} is not base64") from exc
        try:
            files[str(entry["name"])] = raw.decode("utf-8")
        except UnicodeDecodeError:
            files[str(entry["name"])] = raw
    try:
        return HelmRelease(
            name=str(doc.get("name") or ""),
            namespace=str(doc.get("namespace") or default_namespace),
            version=int(doc.get("version") or 0),
            status=str((doc.get("info") or {}).get("status") or "unknown"),
            chart_name=str(metadata.get("name") or ""),
            chart_version=str(metadata.get("version") or ""),
            app_version=str(metadata.get("appVersion") or ""),
            manifest=str(doc.get("manifest") or ""),
            files=files,
        )
    except ValueError as exc:
        raise HelmReleaseError(f"{where}: release record is incomplete ({exc})") from exc


def latest_releases(
    secrets: Iterable[Mapping[str, Any]], unreadable: list[str] | None = None
) -> list[HelmRelease]:
    """One release per (namespace, name): the newest deployed revision, else the newest one.

    Secrets that are not Helm records are ignored. An unreadable record is skipped, its reason
    appended to `unreadable` when given: one broken Secret must not hide every other release.
    """
    best: dict[tuple[str, str], HelmRelease] = {}
    for secret in secrets:
        if not is_release_secret(secret):
            continue
        try:
            release = decode_release(secret)
        except HelmReleaseError as exc:
            if unreadable is not None:
                unreadable.append(str(exc))
            continue
        key = (release.namespace, release.name)
        current = best.get(key)
        if current is None or _rank(release) > _rank(current):
            best[key] = release
    return [best[key] for key in sorted(best)]


def _rank(release: HelmRelease) -> tuple[bool, int]:
    return (release.status == "deployed", release.version)
