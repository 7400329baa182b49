"""API errors as the real apiserver reports them: an HTTP code plus a `Status` object.

Clients key their behaviour on `reason` and `details` (kubectl drain retries a 429 whose
cause is `DisruptionBudget`; the Python client raises `ApiException(status=...)`), so the
messages below copy the apiserver's wording.
"""

from __future__ import annotations

from typing import Any

from pitstop_sim.resources import ResourceType

Obj = dict[str, Any]


class ApiError(Exception):
    """An error answered as a `Status` with the given HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Obj | None = None,
        *,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def qualified(rt: ResourceType) -> str:
    """`pods`, `deployments.apps`, `poddisruptionbudgets.policy` — how the apiserver names a resource."""
    return rt.plural if not rt.group else f"{rt.plural}.{rt.group}"


def _details(rt: ResourceType, name: str) -> Obj:
    details: Obj = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(rt)} "{name}" not found', _details(rt, name))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}
    )


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{qualified(rt)} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(rt)} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        _details(rt, name),
    )


def precondition_failed(
    rt: ResourceType, namespace: str | None, name: str, field: str, wanted: Any, actual: Any
) -> ApiError:
    """409 for a DeleteOptions precondition (uid, resourceVersion) the object does not meet: the
    storage layer's invalid-object error (storage.Preconditions.Check) that the registry turns
    into a Conflict (InterpretDeleteError), with the storage key as etcd holds it."""
    key = "/".join(part for part in ("/registry", rt.storage, namespace or "", name) if part)
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(rt)} "{name}": StorageError: invalid object, '
        f"Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
        f"{field} in precondition: {wanted}, {field} in object meta: {actual}",
        _details(rt, name),
    )


PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def invalid_delete_options(causes: list[tuple[str, str, str]]) -> ApiError:
    """422 for DeleteOptions that fail validation (ValidateDeleteOptions)."""
    text = ", ".join(f"{field}: {message}" for field, _, message in causes)
    return ApiError(
        422,
        "Invalid",
        f'DeleteOptions.meta.k8s.io "" is invalid: {text}',
        {
            "group": "meta.k8s.io",
            "kind": "DeleteOptions",
            "causes": [
                {"reason": reason, "message": message, "field": field} for field, reason, message in causes
            ],
        },
    )


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; each cause is (field, reason, message), e.g. ("spec.containers", "FieldValueRequired",
    "Required value")."""
    text = ", ".join(f"{field}: {message}" for field, _, message in causes)
    details = {
        "name": name,
        "kind": rt.kind,
        "causes": [
            {"reason": reason, "message": message, "field": field} for field, reason, message in causes
        ],
    }
    if rt.group:
        details["group"] = rt.group
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}"
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def gone(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


CODE_REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def injected(code: int, message: str | None, retry_after: int | None = None) -> ApiError:
    """An error the scenario asked for; the reason is the one the apiserver uses for that code."""
    reason = CODE_REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
    text = message or f"injected fault: {reason} ({code})"
    return ApiError(
        code,
        reason,
        text,
        {"causes": [{"reason": "InjectedFault", "message": text}]},
        retry_after=retry_after,
    )
