"""The one way pitstop reads YAML: bounded in size, depth and alias expansion, no explicit tags.

Runbooks, inventories, task files, schedules, scenarios, manifests and data files are untrusted
text. Plain YAML can still hurt the reader: aliases that expand exponentially ("billion
laughs"), nesting deep enough to exhaust Python's stack, explicit tags that construct sets,
bytes or ordered pairs no model expects. Every loader goes through `bounded_yaml` (or
`safe_load`, which uses it), so each file is refused quickly, with its line and column, before
anything is built from it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, StreamMark
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, Node, SequenceNode

# A file larger than this is refused before it is parsed. A 10,000-node inventory with a few
# vars per host is well under 2 MiB.
MAX_YAML_BYTES = 4 * 1024 * 1024
# Collections nested deeper than this are refused (runbooks nest a handful of levels).
MAX_YAML_DEPTH = 64
# Values a document may hold once every alias is expanded (each scalar, list and mapping
# counts one). Anchors and aliases stay usable for DRY vars; "billion laughs" stops here.
MAX_YAML_VALUES = 500_000

# Explicit tags that only restate a plain JSON type (`!!str 1.10` keeps a version a string).
# Everything else (`!!python/...`, `!!binary`, `!!set`, `!!omap`, `!!timestamp`, `!custom`)
# would build something no model expects, so it is refused.
ALLOWED_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")
)


class YamlLimitError(MarkedYAMLError):
    """A document is refused for its shape (size, depth, aliases, tags); the mark says where."""

    def __init__(self, problem: str, mark: StreamMark | None) -> None:
        super().__init__(None, None, problem, mark)


def size_problem(size: int) -> str:
    return (
        f"the file is {size} bytes; YAML input is limited to {MAX_YAML_BYTES} bytes "
        "(MAX_YAML_BYTES): split it (import_tasks, several inventories)"
    )


def check_flow_depth(text: str) -> None:
    """Refuse flow collections (`[`, `{`) nested deeper than MAX_YAML_DEPTH before ruamel's
    scanner sees them: it keeps a possible key per open bracket and rechecks all of them at
    every token, which is quadratic in the nesting. Brackets are counted wherever they are
    (quoted text included), so a string would need more than MAX_YAML_DEPTH unclosed
    brackets to be refused by mistake."""
    if text.count("[") + text.count("{") <= MAX_YAML_DEPTH:
        return
    depth = 0
    for match in _BRACKETS.finditer(text):
        if match.group() in "[{":
            depth += 1
            if depth > MAX_YAML_DEPTH:
                index = match.start()
                line = text.count("\n", 0, index)
                column = index - (text.rfind("\n", 0, index) + 1)
                raise YamlLimitError(
                    f"brackets nest deeper than {MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)",
                    StreamMark("<text>", index, line, column),
                )
        else:
            depth = max(0, depth - 1)


_BRACKETS = re.compile(r"[\[\]{}]")


def read_text_capped(path: str | Path) -> str:
    """The file's text, refusing (ValueError with `size_problem`) a file over MAX_YAML_BYTES
    without reading more than that."""
    with Path(path).open("rb") as handle:
        data = handle.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise ValueError(size_problem(Path(path).stat().st_size))
    return data.decode("utf-8")


class _BoundedComposer(Composer):
    """ruamel's composer, counting every value as it would be after alias expansion."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self._values = 0
        self._expanded: dict[int, int] = {}  # id(node) -> values it stands for
        self._open_anchors: list[str] = []

    def compose_document(self) -> Any:
        # Limits are per document of a multi-document stream.
        self._values = 0
        self._expanded = {}
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        if isinstance(event, AliasEvent):
            if event.anchor in self._open_anchors:
                raise YamlLimitError(
                    f"alias *{event.anchor} refers to the collection that contains it; "
                    "recursive aliases are refused",
                    event.start_mark,
                )
            target = self.anchors.get(event.anchor)
            if target is not None:
                self._count(self._size(target), event.start_mark, alias=event.anchor)
            return super().compose_node(parent, index)
        tag = event.tag
        if tag is not None and tag not in ALLOWED_TAGS:
            shown = tag.replace("tag:yaml.org,2002:", "!!")
            raise YamlLimitError(
                f"explicit tag {shown} is refused: pitstop reads plain YAML (mappings, lists, "
                "strings, numbers, booleans, null); remove the tag",
                event.start_mark,
            )
        if self.depth + 1 > MAX_YAML_DEPTH:
            raise YamlLimitError(
                f"values nest deeper than {MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)", event.start_mark
            )
        self._count(1, event.start_mark)
        anchor = event.anchor
        if anchor is not None:
            self._open_anchors.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            if anchor is not None:
                self._open_anchors.pop()

    def _count(self, values: int, mark: StreamMark, alias: str | None = None) -> None:
        self._values += values
        if self._values > MAX_YAML_VALUES:
            how = f"alias *{alias} expands to {values} values and the document" if alias else "the document"
            raise YamlLimitError(
                f"{how} holds more than {MAX_YAML_VALUES} values once aliases are expanded "
                "(MAX_YAML_VALUES); use fewer or smaller aliases",
                mark,
            )

    def _size(self, node: Node) -> int:
        """Values `node` stands for with every alias inside it expanded (shared nodes counted
        each time they appear, computed once each)."""
        key = id(node)
        if key in self._expanded:
            return self._expanded[key]
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(self._size(item) for item in node.value)
        elif isinstance(node, MappingNode):
            total += sum(self._size(k) + self._size(v) for k, v in node.value)
        self._expanded[key] = min(total, MAX_YAML_VALUES + 1)
        return self._expanded[key]


class _DataConstructor(SafeConstructor):
    """Plain data; timestamps stay text (as kubectl's YAML-to-JSON conversion keeps them)."""


_DataConstructor.add_constructor("tag:yaml.org,2002:timestamp", SafeConstructor.construct_yaml_str)


def bounded_yaml(typ: str = "safe") -> YAML:
    """A ruamel YAML loader ('rt' or 'safe', pure Python) with pitstop's limits."""
    yaml = YAML(typ=typ, pure=True)
    yaml.Composer = _BoundedComposer
    yaml.allow_duplicate_keys = False
    # ruamel's own depth guard, as a second line behind the composer's.
    yaml.max_depth = MAX_YAML_DEPTH + 1
    if typ == "safe":
        yaml.Constructor = _DataConstructor
    return yaml


def safe_load(text: str, *, all_documents: bool = False) -> Any:
    """Plain data (dict, list, str, int, float, bool, None) from YAML text; every document of
    the stream with `all_documents`. Raises ruamel's YAMLError (YamlLimitError, a
    MarkedYAMLError, for the limits above and for explicit tags), with line and column."""
    if len(text.encode("utf-8")) > MAX_YAML_BYTES:
        raise YamlLimitError(size_problem(len(text.encode("utf-8"))), None)
    check_flow_depth(text)
    yaml = bounded_yaml("safe")
    if all_documents:
        return list(yaml.load_all(text))
    return yaml.load(text)


def safe_load_file(path: str | Path, *, all_documents: bool = False) -> Any:
    """`safe_load` of a file, refusing one over MAX_YAML_BYTES before reading it all.
    Raises OSError/UnicodeDecodeError when it cannot be read, YAMLError when it is refused."""
    try:
        text = read_text_capped(path)
    except ValueError as exc:
        if isinstance(exc, UnicodeDecodeError):
            raise
        raise YamlLimitError(str(exc), None) from None
    return safe_load(text, all_documents=all_documents)


__all__ = [
    "ALLOWED_TAGS",
    "MAX_YAML_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_VALUES",
    "YamlLimitError",
    "bounded_yaml",
    "check_flow_depth",
    "read_text_capped",
    "safe_load",
    "safe_load_file",
]
