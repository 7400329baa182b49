"""What the fleet view shows, per cluster and across clusters (pydantic: it is written to
files and may be read back by tools)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

# The runbook that inventories a cluster on its own (one task, read-only): named in the
# "never inventoried" line so the reader knows what to run.
INVENTORY_RUNBOOK = "runbooks/fleet-inventory.yaml"


class ComponentVersion(BaseModel):
    """One component of the version inventory as `inventory.versions` reported it."""

    component: str
    # The version inventory row it belongs to (docs/upgrade-process.md "Version inventory").
    row: str
    current: str


class ClusterInventory(BaseModel):
    run_id: str
    runbook: str
    taken_at: datetime
    components: list[ComponentVersion] = Field(default_factory=list)

    def version_of(self, component: str) -> str | None:
        return next((c.current for c in self.components if c.component == component), None)


class Backup(BaseModel):
    """The newest etcd-backup run that succeeded, and what it uploaded."""

    run_id: str
    ended_at: datetime
    uri: str | None = None
    taken_at: datetime | None = None
    sha256: str | None = None


class Drill(BaseModel):
    """The newest etcd-restore-drill run that ended, passed or not, with what it measured."""

    run_id: str
    ended_at: datetime
    passed: bool
    rto_s: float | None = None
    rpo_s: float | None = None
    reasons: list[str] = Field(default_factory=list)
    report_uri: str | None = None


class RunInFlight(BaseModel):
    run_id: str
    runbook: str
    stage: str | None = None
    status: str | None = None
    started_at: datetime | None = None


class RunRef(BaseModel):
    """A finished run named for what it says (a backup run that did not succeed)."""

    run_id: str
    status: str
    ended_at: datetime | None = None
    msg: str = ""


class ClusterStatus(BaseModel):
    name: str
    inventory: ClusterInventory | None = None
    backup: Backup | None = None
    # The newest backup run, when it did not succeed (a newer failure hides behind an older success).
    backup_failed: RunRef | None = None
    drill: Drill | None = None
    in_flight: list[RunInFlight] = Field(default_factory=list)
    # More runs in progress than were read (the fleet view reads a bounded number per cluster).
    in_flight_more: bool = False
    notes: list[str] = Field(default_factory=list)


class SkewRow(BaseModel):
    """One component whose version differs between inventoried clusters."""

    component: str
    row: str
    by_cluster: dict[str, str]
    # The newest version any cluster runs (None when no value reads as a version).
    newest: str | None = None
    # The version more than half of the clusters run (None when no value has a majority).
    majority: str | None = None
    behind_newest: list[str] = Field(default_factory=list)
    off_majority: list[str] = Field(default_factory=list)

    @property
    def highlighted(self) -> list[str]:
        """The clusters the view marks: behind the newest, or off the majority."""
        return sorted(set(self.behind_newest) | set(self.off_majority))


class FleetStatus(BaseModel):
    generated_at: datetime
    clusters: list[ClusterStatus]
    skew: list[SkewRow] = Field(default_factory=list)
    # How the clusters were found: named by --clusters, or from the newest runs' search attributes.
    discovery: str = ""

    def versions(self) -> dict[str, dict[str, str]]:
        """Each inventoried cluster's components and their versions (nothing else: small enough
        for a run to register)."""
        return {
            c.name: {p.component: p.current for p in c.inventory.components}
            for c in self.clusters
            if c.inventory is not None
        }
