"""YAML loading that keeps the line and column of every key, value and list item.

ruamel.yaml's round-trip loader records positions on its container types; we convert the
document to plain Python data (what the models validate) and keep the positions in a side
table keyed by the path of each node, so any later error can name file:line:column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from pitstop.runbook.errors import RunbookError, suggest
from pitstop.safe_yaml import (
    MAX_YAML_BYTES,
    YamlLimitError,
    bounded_yaml,
    check_flow_depth,
    read_text_capped,
    size_problem,
)

Loc = tuple[str | int, ...]
Pos = tuple[int, int]  # 1-based line, column


@dataclass(frozen=True)
class YamlDoc:
    """Plain data of one file plus the positions of its keys and values."""

    path: str
    data: Any
    key_pos: dict[Loc, Pos] = field(default_factory=dict)
    value_pos: dict[Loc, Pos] = field(default_factory=dict)

    def root(self) -> Node:
        return Node(self, ())


@dataclass(frozen=True)
class Node:
    """A place in a document: its value plus enough to report errors at it."""

    doc: YamlDoc
    loc: Loc

    @property
    def value(self) -> Any:
        value = self.doc.data
        for part in self.loc:
            value = value[part]
        return value

    @property
    def path(self) -> str:
        return self.doc.path

    def child(self, *parts: str | int) -> Node:
        return Node(self.doc, self.loc + parts)

    def has(self, key: str | int) -> bool:
        value = self.value
        if isinstance(value, dict):
            return key in value
        return isinstance(value, list) and isinstance(key, int) and 0 <= key < len(value)

    def pos(self, *, key: bool = False) -> Pos:
        """Position of this node's value (or its key); falls back to the nearest ancestor."""
        loc = self.loc
        if key and loc in self.doc.key_pos:
            return self.doc.key_pos[loc]
        while loc:
            if loc in self.doc.value_pos:
                return self.doc.value_pos[loc]
            if loc in self.doc.key_pos:
                return self.doc.key_pos[loc]
            loc = loc[:-1]
        return self.doc.value_pos.get((), (1, 1))

    def error(
        self,
        message: str,
        *,
        at_key: bool = False,
        key: str | None = None,
        suggestion: str | None = None,
    ) -> RunbookError:
        line, column = self.pos(key=at_key)
        if key is None and self.loc and isinstance(self.loc[-1], str):
            key = self.loc[-1]
        return RunbookError(message, path=self.path, line=line, column=column, key=key, suggestion=suggestion)

    def check_keys(self, allowed: list[str] | set[str] | frozenset[str], what: str) -> None:
        """Refuse keys outside `allowed`, naming the nearest valid one."""
        value = self.value
        for key in value:
            if key not in allowed:
                raise self.child(key).error(
                    f"unknown key '{key}' in {what}",
                    at_key=True,
                    suggestion=suggest(str(key), allowed),
                )


def load_yaml(path: str | Path, *, display_path: str | None = None) -> YamlDoc:
    """Parse one YAML file; syntax errors, duplicate keys and the limits of `pitstop.safe_yaml`
    (size, depth, aliases, explicit tags) become RunbookError."""
    shown = display_path or str(path)
    try:
        text = read_text_capped(path)
    except FileNotFoundError:
        raise RunbookError("file not found", path=shown, line=1, column=1) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunbookError(f"cannot read file: {exc}", path=shown, line=1, column=1) from None
    except ValueError as exc:  # over MAX_YAML_BYTES
        raise RunbookError(str(exc), path=shown, line=1, column=1) from None
    return parse_yaml(text, shown)


def parse_yaml(text: str, path: str) -> YamlDoc:
    size = len(text.encode("utf-8"))
    if size > MAX_YAML_BYTES:
        raise RunbookError(size_problem(size), path=path, line=1, column=1)
    yaml = bounded_yaml("rt")
    try:
        check_flow_depth(text)
        raw = yaml.load(text)
    except YamlLimitError as exc:
        mark = exc.problem_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise RunbookError(str(exc.problem), path=path, line=line, column=column) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        if "duplicate key" in str(exc):
            problem = _duplicate_key_message(exc)
        elif ("\t" in _line_at(text, line) and "\\t" in str(exc)) or "tab" in problem.lower():
            problem = "tab character in indentation; YAML indents with spaces"
        raise RunbookError(f"YAML syntax error: {problem}", path=path, line=line, column=column) from None
    except YAMLError as exc:
        raise RunbookError(f"YAML syntax error: {exc}", path=path, line=1, column=1) from None
    doc = YamlDoc(path=path, data=None)
    data = _convert(raw, (), doc)
    doc.value_pos.setdefault((), (1, 1))
    return YamlDoc(path=path, data=data, key_pos=doc.key_pos, value_pos=doc.value_pos)


def _line_at(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _duplicate_key_message(exc: MarkedYAMLError) -> str:
    problem = exc.problem or ""
    # ruamel says: found duplicate key "x" with value "..." (original value: "...")
    start = problem.find('"')
    end = problem.find('"', start + 1)
    name = problem[start + 1 : end] if start >= 0 and end > start else "?"
    return f"duplicate key '{name}'"


def _convert(node: Any, loc: Loc, doc: YamlDoc) -> Any:
    if isinstance(node, CommentedMap):
        out: dict[Any, Any] = {}
        for key, value in node.items():
            child: Loc = (*loc, key)
            lc = node.lc.data.get(key)
            if lc is not None:
                doc.key_pos[child] = (lc[0] + 1, lc[1] + 1)
                doc.value_pos[child] = (lc[2] + 1, lc[3] + 1)
            out[_plain_key(key)] = _convert(value, child, doc)
        return out
    if isinstance(node, CommentedSeq):
        items: list[Any] = []
        for index, value in enumerate(node):
            child = (*loc, index)
            lc = node.lc.data.get(index) if isinstance(node.lc.data, dict) else node.lc.data[index]
            if lc is not None:
                doc.value_pos[child] = (lc[0] + 1, lc[1] + 1)
            items.append(_convert(value, child, doc))
        return items
    return _plain_scalar(node)


def _plain_key(key: Any) -> Any:
    return _plain_scalar(key)


def _plain_scalar(value: Any) -> Any:
    # ruamel's scalar subclasses (ScalarFloat, TaggedScalar, ...) become builtins so that
    # models and the JSON Schema see ordinary types.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if hasattr(value, "value"):  # TaggedScalar
        return str(value.value)
    return value
