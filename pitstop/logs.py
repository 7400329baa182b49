"""Logging of a pitstop process (worker, Slack bridge): configured once, every line scrubbed.

Each handler carries `ScrubLogFilter`, so a secret an activity resolved never reaches a log line
(`pitstop.policy.scrub`).
"""

from __future__ import annotations

import logging
import sys

from pitstop.policy.scrub import ScrubLogFilter

_logging_configured = False


def configure_logging(level: str = "INFO") -> None:
    """Configure root logging once per process (later calls do nothing)."""
    global _logging_configured
    if _logging_configured:
        return
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubLogFilter())
    _logging_configured = True
