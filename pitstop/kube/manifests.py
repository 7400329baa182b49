"""Kubernetes manifests read from YAML/JSON files as `kubectl apply -f` reads them: multi-document
files, directories (sorted by name), `kind: List` flattened. Every object remembers where it came
from (`file#index`) so errors name the file and the document; YAML errors name file:line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.error import MarkedYAMLError, YAMLError

from pitstop.safe_yaml import read_text_capped, safe_load

Obj = dict[str, Any]
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(ValueError):
    """A manifest cannot be read; the message names the file (and line or document)."""


@dataclass(frozen=True)
class Manifest:
    obj: Obj
    origin: str  # file path or "definition"
    index: int  # 0-based document index in the origin

    @property
    def where(self) -> str:
        return f"{self.origin} document {self.index}"

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion") or "")

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind") or "")

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name") or "")

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace") or "")


def parse_documents(text: str, origin: str) -> list[Manifest]:
    """Every non-empty document of a (multi-document) YAML or JSON text."""
    try:
        # Bounded like every YAML pitstop reads; timestamps stay text, as kubectl keeps them.
        docs = safe_load(text, all_documents=True)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark is not None else origin
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ManifestError(f"{where}: invalid YAML: {problem or exc}") from None
    except YAMLError as exc:
        raise ManifestError(f"{origin}: invalid YAML: {exc}") from None
    out: list[Manifest] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        out.extend(_objects(doc, origin, index))
    return out


def _objects(doc: Any, origin: str, index: int) -> list[Manifest]:
    where = f"{origin} document {index}"
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: a manifest is a mapping with apiVersion, kind and metadata")
    if doc.get("kind") == "List" or (str(doc.get("kind") or "").endswith("List") and "items" in doc):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise ManifestError(f"{where}: `items` of a List must be a list")
        out: list[Manifest] = []
        for item in items:
            out.extend(_objects(item, origin, index))
        return out
    missing = [key for key in ("apiVersion", "kind") if not doc.get(key)]
    if not (doc.get("metadata") or {}).get("name"):
        missing.append("metadata.name")
    if missing:
        raise ManifestError(f"{where}: missing {', '.join(missing)}")
    return [Manifest(obj=doc, origin=origin, index=index)]


def manifest_files(path: Path, *, recursive: bool = False) -> list[Path]:
    """The file itself, or the manifest files of a directory (sorted, as kubectl does)."""
    if path.is_file():
        return [path]
    if path.is_dir():
        found = path.rglob("*") if recursive else path.glob("*")
        files = sorted(p for p in found if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        if not files:
            raise ManifestError(f"{path}: no manifest files (*.yaml, *.yml, *.json) in this directory")
        return files
    raise ManifestError(f"{path}: no such file or directory")


def load_manifests(paths: Iterable[Path], *, recursive: bool = False) -> list[Manifest]:
    out: list[Manifest] = []
    for path in paths:
        for file in manifest_files(path, recursive=recursive):
            try:
                text = read_text_capped(file)
            except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or over the size limit
                raise ManifestError(f"{file}: cannot read: {exc}") from None
            out.extend(parse_documents(text, str(file)))
    return out
