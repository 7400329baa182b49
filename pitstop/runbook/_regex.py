"""Regular expression filters and tests on RE2 (google-re2), with Ansible's signatures.

RE2 matches in time linear in the text whatever the pattern, so no pattern ('(a+)+$'
included) can stall a worker; it has no backreferences or lookaround, and a pattern using them
is refused with a message saying so. Each scan is charged to the render's budget.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2  # type: ignore[import-untyped]

from pitstop.runbook._limits import (
    MAX_LIST_LENGTH,
    MAX_REGEX_LENGTH,
    TemplateError,
    check_length,
    check_string_result,
    current,
    limit_error,
    text_of,
)


def _to_string(value: Any) -> str:
    return "" if value is None else text_of(value)


@lru_cache(maxsize=512)
def _compile_regex(pattern: str, ignorecase: bool, multiline: bool) -> Any:
    if len(pattern) > MAX_REGEX_LENGTH:
        raise limit_error(f"a pattern of {len(pattern)} characters", MAX_REGEX_LENGTH, "MAX_REGEX_LENGTH")
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignorecase
    options.one_line = not multiline
    options.never_nl = False
    flags = "(?m)" if multiline else ""
    try:
        return re2.compile(flags + pattern, options)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise TemplateError(
            f"regular expression {pattern!r} is not supported: {detail}. Patterns run on RE2 "
            "(linear time): backreferences (\\1) and lookaround ((?=, (?!, (?<=) are not available"
        ) from None


def _regex(pattern: Any, ignorecase: bool, multiline: bool, subject: Any) -> tuple[Any, str]:
    if not isinstance(pattern, str):
        raise TemplateError(f"a regular expression must be a string, got {type(pattern).__name__}")
    text = _to_string(subject)
    # RE2 is linear: charge the text (and the pattern) once per scan.
    current().charge(len(text) + len(pattern))
    return _compile_regex(pattern, bool(ignorecase), bool(multiline)), text


def _group(match: Any, ref: str) -> Any:
    # Ansible spells group references as '\\1' or '\\g<name>'.
    if ref.startswith("\\g<"):
        name = ref[3:-1]
        return match.group(int(name) if name.isdigit() else name)
    if ref.startswith("\\"):
        return match.group(int(ref[1:]))
    return match.group(ref)


def regex_search(
    value: Any, pattern: str, *groups: str, ignorecase: bool = False, multiline: bool = False
) -> Any:
    regex, text = _regex(pattern, ignorecase, multiline, value)
    match = regex.search(text)
    if match is None:
        return None
    if not groups:
        return match.group(0)
    return [_group(match, g) for g in groups]


def regex_replace(
    value: Any,
    pattern: str = "",
    replacement: str = "",
    ignorecase: bool = False,
    multiline: bool = False,
    count: int = 0,
) -> str:
    regex, text = _regex(pattern, ignorecase, multiline, value)
    if not isinstance(replacement, str):
        raise TemplateError("regex_replace: the replacement must be a string")
    budget = current()
    pieces: list[str] = []
    length = 0
    last = 0
    for done, match in enumerate(regex.finditer(text)):
        if count and done >= count:
            break
        budget.step()
        start, end = match.span()
        piece = match.expand(replacement)
        pieces.append(text[last:start])
        pieces.append(piece)
        length += (start - last) + len(piece)
        check_string_result(length, "regex_replace's result")
        last = end
    pieces.append(text[last:])
    check_string_result(length + len(text) - last, "regex_replace's result")
    return check_length("".join(pieces))  # type: ignore[no-any-return]


def regex_findall(value: Any, pattern: str, ignorecase: bool = False, multiline: bool = False) -> list[Any]:
    regex, text = _regex(pattern, ignorecase, multiline, value)
    budget = current()
    out: list[Any] = []
    for match in regex.finditer(text):
        budget.step()
        groups = match.groups()
        out.append(match.group(0) if not groups else groups[0] if len(groups) == 1 else list(groups))
        if len(out) > MAX_LIST_LENGTH:
            raise limit_error("regex_findall's matches", MAX_LIST_LENGTH, "MAX_LIST_LENGTH")
    return out


def regex_escape(value: Any) -> str:
    return str(re2.escape(_to_string(value)))


def test_match(value: Any, pattern: str, ignorecase: bool = False, multiline: bool = False) -> bool:
    regex, text = _regex(pattern, ignorecase, multiline, value)
    return regex.match(text) is not None


def test_search(value: Any, pattern: str, ignorecase: bool = False, multiline: bool = False) -> bool:
    regex, text = _regex(pattern, ignorecase, multiline, value)
    return regex.search(text) is not None
