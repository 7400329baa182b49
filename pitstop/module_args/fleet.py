"""Args of the `fleet.*` modules: the fleet view (`pitstop fleet status`, pitstop/fleet/) written
from inside a run, e.g. a promotion's clusters before and after its change."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from pitstop.module_args.storage import STORAGE_RETRY, S3Args, http_link_base
from pitstop.module_spec import ModuleSpec

# Cluster names as the fleet view accepts them (pitstop/fleet/source.py CLUSTER_NAME).
_CLUSTER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


class FleetReportArgs(S3Args):
    """Which clusters, and where the view goes. The view is read from Temporal only, as the CLI
    reads it (each cluster's newest inventory run, skew, backups and drills, runs in progress)."""

    clusters: list[str] = Field(
        min_length=1,
        description="Cluster names (their inventories' `cluster.name`), in the order of the view's columns.",
    )
    title: str = Field(
        default="",
        description="In the artifact's name, `fleet status (<title>)`, and the files' (e.g. `before`).",
    )
    prefix: str = Field(default="fleet-reports", min_length=1, description="Key prefix of the reports.")
    link_base: str | None = Field(
        default=None,
        description="https URL where the bucket's keys are served: the artifact's link is this + `/` + "
        "the HTML's key; default: its s3:// URI.",
    )
    create_bucket: bool = Field(
        default=False, description="Create the bucket when missing (the embedded stack; not for production)."
    )

    @field_validator("clusters")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not _CLUSTER.match(n)]
        if bad:
            raise ValueError(
                f"not a cluster name: {', '.join(repr(b) for b in bad)} (letters, digits, '.', '_', '-')"
            )
        return list(dict.fromkeys(names))

    _link_base = field_validator("link_base", mode="before")(http_link_base)


FLEET_REPORT: ModuleSpec[FleetReportArgs] = ModuleSpec(
    name="fleet.report",
    args_model=FleetReportArgs,
    summary="The fleet view of some clusters (`pitstop fleet status`: versions, skew, backups and "
    "drills, runs in progress) as Markdown and HTML in S3, linked from the run's artifacts; returns "
    "each cluster's component versions.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    heartbeat_timeout=timedelta(minutes=2),
    retry=STORAGE_RETRY,
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [FLEET_REPORT]
