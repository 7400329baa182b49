"""Validation helpers shared by runbooks and inventories: pydantic errors to positions,
inline secrets, template syntax."""

from __future__ import annotations

import re
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from pitstop.module_spec import SecretRef
from pitstop.runbook._yaml import Node
from pitstop.runbook.errors import RunbookError, suggest
from pitstop.runbook.templating import TemplateError, check_syntax, is_template

M = TypeVar("M", bound=BaseModel)

_SECRET_KEY = re.compile(
    r"(^|_)(password|passwd|token|secret|api_key|apikey|private_key|access_key|secret_key)$", re.IGNORECASE
)
SECRET_ADVICE = "use {secret: NAME} and keep the value outside the runbook"


def looks_like_secret(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def check_inline_secrets(node: Node) -> None:
    """Refuse literal values under secret-looking keys, anywhere below `node`."""
    value = node.value
    if isinstance(value, dict):
        if "secret" in value and set(value) <= {"secret", "key"}:
            return  # a secret reference: the name of a secret, not its value
        for key, item in value.items():
            child = node.child(key)
            if (
                isinstance(key, str)
                and looks_like_secret(key)
                and isinstance(item, str | int)
                and not isinstance(item, bool)
                and item != ""
                and not is_template(item)
            ):
                raise child.error(f"secret value written inline under '{key}'; {SECRET_ADVICE}")
            check_inline_secrets(child)
    elif isinstance(value, list):
        for index in range(len(value)):
            check_inline_secrets(node.child(index))


def check_template_syntax(node: Node) -> None:
    """Every templated string below `node` must compile; errors point at the string."""
    value = node.value
    if isinstance(value, str):
        if is_template(value):
            try:
                check_syntax(value)
            except TemplateError as exc:
                raise node.error(str(exc)) from None
    elif isinstance(value, dict):
        for key in value:
            check_template_syntax(node.child(key))
    elif isinstance(value, list):
        for index in range(len(value)):
            check_template_syntax(node.child(index))


def _is_secret_ref(annotation: Any) -> bool:
    if annotation is SecretRef:
        return True
    return any(_is_secret_ref(arg) for arg in get_args(annotation))


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def check_secret_ref_fields(model: type[BaseModel], node: Node) -> None:
    """A SecretRef field given a plain string would put the secret in the runbook: refuse it."""
    value = node.value
    if not isinstance(value, dict):
        return
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in value:
            continue
        raw = value[key]
        if _is_secret_ref(field.annotation) and isinstance(raw, str):
            raise node.child(key).error(f"secret value written inline under '{key}'; {SECRET_ADVICE}")
        nested = _nested_model(field.annotation)
        if nested is not None and nested is not SecretRef and isinstance(raw, dict):
            check_secret_ref_fields(nested, node.child(key))


def field_keys(model: type[BaseModel], exclude: frozenset[str] = frozenset()) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items() if n not in exclude]


def templated_at(value: Any, loc: tuple[Any, ...]) -> bool:
    """True when the input at `loc` (or above it) is a template rendered only at run time."""
    current = value
    for part in loc:
        if is_template(current):
            return True
        if (isinstance(current, dict) and part in current) or (
            isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        ):
            current = current[part]
        # anything else is a pydantic union tag (e.g. 'list[str]'): not part of the input
    return is_template(current)


def _clean(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message[:1].lower() + message[1:] if message[:2] != message[:2].upper() else message


def validate_model(
    model: type[M],
    data: Any,
    node: Node,
    what: str,
    *,
    skip_templated: bool = False,
) -> M:
    """model.model_validate(data), with the first error reported at its place in the file."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if skip_templated:
            errors = [e for e in errors if not templated_at(data, tuple(e["loc"]))]
            if not errors:
                raise
        raise error_from_pydantic(errors[0], node, model, what) from None


def error_from_pydantic(error: Any, node: Node, model: type[BaseModel], what: str) -> RunbookError:
    loc = tuple(error["loc"])
    target = node
    path: list[str] = []
    for part in loc:
        if target.has(part):
            target = target.child(part)
            path.append(str(part))
    name = ".".join(path)
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        return target.error(
            f"unknown key '{key}' in {what}",
            at_key=True,
            suggestion=suggest(key, field_keys(model)),
        )
    if kind == "missing":
        return target.error(f"missing required key '{loc[-1]}' in {what}", key=str(loc[-1]))
    message = _clean(str(error["msg"]))
    if name:
        return target.error(f"invalid value for '{name}' in {what}: {message}")
    return target.error(f"invalid {what}: {message}")


def require_mapping(node: Node, what: str) -> dict[str, Any]:
    value = node.value
    if not isinstance(value, dict):
        raise node.error(f"{what} must be a mapping, got {type_name(value)}")
    for key in value:
        if not isinstance(key, str):
            raise node.child(key).error(f"keys of {what} must be strings, got {key!r}", at_key=True)
    return value


def type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number"}.get(
        type(value), f"a {type(value).__name__}"
    )
