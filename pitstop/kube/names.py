"""Names: deterministic names for objects pitstop creates (so a retried activity finds its own),
and the apiserver's own rules for names, checked before a name goes into an API path."""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63  # a Job's name becomes its pods' `job-name` label value


def dns_label(text: str, limit: int = MAX_NAME) -> str:
    """`text` as a DNS-1123 label: lowercase alphanumerics and '-', trimmed to `limit`."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return cleaned[:limit].rstrip("-") or "pitstop"


def job_name(prefix: str, run_id: str, task_path: str, node: str) -> str:
    """`<prefix>-<10 hex>`: the same run, task and node always give the same name."""
    digest = hashlib.sha256(f"{run_id}\x00{task_path}\x00{node}".encode()).hexdigest()[:10]
    return f"{dns_label(prefix, MAX_NAME - 11)}-{digest}"


# --- names the apiserver accepts (validation before a name goes into an API path) ----------

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
DNS_LABEL = re.compile(rf"^{_LABEL}$")
DNS_SUBDOMAIN = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
MAX_SUBDOMAIN = 253
# `v1`, `apps/v1`, `kueue.x-k8s.io/v1beta1`: a group (DNS subdomain) and a version (DNS label).
API_VERSION = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*/)?{_LABEL}$")

_RULES = {
    "label": "a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters, "
    "starting and ending with a letter or digit)",
    "subdomain": "a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 "
    "characters, each dot-separated part starting and ending with a letter or digit)",
    "segment": "a path segment name (not empty, '.' or '..', and without '/' or '%')",
}


class InvalidName(ValueError):
    """A name the apiserver would refuse; pitstop refuses it before any request."""


def check_name(value: str, what: str, rule: str = "subdomain") -> str:
    """`value` unchanged when the apiserver would accept it as `what` (`node name`,
    `namespace`...) under `rule` (`label`, `subdomain`, `segment`); InvalidName otherwise."""
    if rule == "label":
        ok = bool(DNS_LABEL.fullmatch(value))
    elif rule == "subdomain":
        ok = len(value) <= MAX_SUBDOMAIN and bool(DNS_SUBDOMAIN.fullmatch(value))
    elif rule == "segment":
        ok = value not in ("", ".", "..") and not any(c in value for c in "/%") and value.isprintable()
    else:  # pragma: no cover - a bug in the caller
        raise ValueError(f"unknown name rule {rule!r}")
    if not ok:
        raise InvalidName(f"{value!r} is not a valid {what}: a {what} is {_RULES[rule]}")
    return value


def check_api_version(value: str) -> str:
    if not API_VERSION.fullmatch(value):
        raise InvalidName(
            f"{value!r} is not a valid apiVersion: write `v1` or `<group>/<version>` "
            "(e.g. apps/v1, kueue.x-k8s.io/v1beta1)"
        )
    return value


def check_workload_refs(values: list[str], kinds: tuple[str, ...]) -> list[str]:
    """Workloads named as `<Kind> <namespace>/<name>` (e.g. `Deployment serving/vllm`), each of
    one of `kinds`; ValueError naming the first that is not."""
    pattern = re.compile(rf"({'|'.join(kinds)}) [a-z0-9][-a-z0-9]*/[a-z0-9][-a-z0-9.]*")
    for item in values:
        if not pattern.fullmatch(item):
            raise ValueError(
                f"{item!r} is not a workload: write `{kinds[0]} <namespace>/<name>`"
                + (f" (or {', '.join(kinds[1:])})" if len(kinds) > 1 else "")
            )
    return values
