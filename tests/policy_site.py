"""The worker policy the tests' workers run under, written the way an operator would write it.

The session has one PITSTOP_HOME (tests/conftest.py). The embedded stack writes its policy
there when it starts (`pitstop dev up` does the same); tests and fixtures that need more — a
secret granted, a directory to read, an endpoint — add a *layer* for as long as they run. The
file every worker reads (`PITSTOP_WORKER_POLICY`) is the stack's policy plus the layers, in the
policy file's own YAML, rewritten whenever one of them changes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from pitstop.devstack import POLICY_FILE
from pitstop.policy.errors import POLICY_ENV

TEST_POLICY_FILE = "test-worker-policy.yaml"
_yaml = YAML(typ="safe", pure=True)
_yaml.default_flow_style = False


class PolicyLayer:
    """Additions to the policy while a test or fixture runs."""

    def __init__(self, site: TestSite) -> None:
        self.site = site
        self.doc: dict[str, Any] = {}

    def _changed(self) -> PolicyLayer:
        self.site.write()
        return self

    def grant(self, secret: str, purpose: str, **scope: list[str]) -> PolicyLayer:
        self.doc.setdefault("secrets", {})[secret] = {"purpose": purpose, **scope}
        return self._changed()

    def allow_s3(self, url: str, buckets: list[str] | None = None) -> PolicyLayer:
        endpoints = self.doc.setdefault("s3", {}).setdefault("endpoints", [])
        endpoints.append({"url": url, "buckets": buckets or ["*"]})
        return self._changed()

    def allow_etcd(self, url: str) -> PolicyLayer:
        self.doc.setdefault("etcd", {}).setdefault("endpoints", []).append(url)
        return self._changed()

    def allow_read(self, path: Path | str) -> PolicyLayer:
        self.doc.setdefault("files", {}).setdefault("read", []).append(str(path))
        return self._changed()

    def allow_write(self, path: Path | str) -> PolicyLayer:
        self.doc.setdefault("files", {}).setdefault("write", []).append(str(path))
        return self._changed()

    def runbooks_from_requests(self, allowed: bool) -> PolicyLayer:
        self.doc["runbooks"] = {"from_requests": allowed}
        return self._changed()

    def cluster(self, name: str, **fields: Any) -> PolicyLayer:
        self.doc.setdefault("clusters", {})[name] = {
            k: str(v) if isinstance(v, Path) else v for k, v in fields.items()
        }
        return self._changed()


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = [*out[key], *value]
        else:
            out[key] = value
    return out


class TestSite:
    """The session's PITSTOP_HOME and the policy file its workers read."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / TEST_POLICY_FILE
        self.layers: dict[int, PolicyLayer] = {}
        self._ids = itertools.count()

    def document(self) -> dict[str, Any]:
        stack = self.home / POLICY_FILE
        doc: dict[str, Any] = (_yaml.load(stack.read_text()) or {}) if stack.is_file() else {}
        for layer in self.layers.values():
            doc = _merge(doc, layer.doc)
        return doc

    def write(self) -> Path:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w", encoding="utf-8") as out:
            out.write("# The tests' worker policy: the embedded stack's, plus what running tests added.\n")
            _yaml.dump(self.document(), out)
        tmp.replace(self.path)
        os.environ[POLICY_ENV] = str(self.path)
        return self.path

    @contextmanager
    def layer(self) -> Iterator[PolicyLayer]:
        key = next(self._ids)
        self.layers[key] = layer = PolicyLayer(self)
        try:
            yield layer
        finally:
            del self.layers[key]
            self.write()


_site: TestSite | None = None


def start_site(home: Path) -> TestSite:
    global _site
    _site = TestSite(home)
    _site.write()
    return _site


def site() -> TestSite:
    assert _site is not None, "the session's worker home is set up by tests/conftest.py"
    return _site
