"""Deterministic names for objects pitstop creates, so a retried activity finds its own."""

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
