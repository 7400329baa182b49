"""Args of the `etcd.*` modules: snapshot, inspect, restore into a scratch member, verify.

They run on the worker (the etcd client talks to the cluster's client URLs). TLS material
comes from secret references, resolved inside the activity and written to a 0600 directory
that is removed when the command ends; it is used for `https://` endpoints only (a plain
`http://` endpoint, like the embedded stack's, has no TLS to configure).

Snapshotting *on* a control-plane node (etcd listening on the node's loopback only) is not a
module yet. The pieces: `ssh.command` (become: true) runs `etcdctl snapshot save` there with
the node's own certificates, but pitstop has no SSH fetch to bring the file to the worker.
Until it does, point `endpoints` at the members' client URLs (2379 is normally reachable
from the cluster network) with a client certificate held in a secret, as the runbook does.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pitstop.errors import ErrorType, non_retryable_types
from pitstop.module_spec import ModuleArgs, ModuleSpec, RetryDefaults, SecretRef

# The kubeadm default; refused as a scratch location unless the runbook says otherwise.
DEFAULT_LIVE_DATA_DIRS = ["/var/lib/etcd"]

ETCD_RETRY = RetryDefaults(
    maximum_attempts=4,
    initial_interval=timedelta(seconds=2),
    maximum_interval=timedelta(seconds=20),
    non_retryable_error_types=non_retryable_types(ErrorType.SNAPSHOT_CORRUPT),
)


def _split_endpoints(value: object) -> object:
    # `"{{ etcd_endpoints }}"` may render to "a,b" (etcdctl's own syntax) or to a list.
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class EtcdClientArgs(ModuleArgs):
    endpoints: list[str] = Field(
        min_length=1,
        description="Client URLs (`https://10.0.0.1:2379`), as a list or comma-separated.",
    )
    cacert: SecretRef | None = Field(
        default=None, description="CA bundle that signed the etcd server certificates (https only)."
    )
    cert: SecretRef | None = Field(default=None, description="Client certificate (https only).")
    key: SecretRef | None = Field(default=None, description="Client private key (https only).")
    dial_timeout_s: float = Field(default=5.0, gt=0, description="etcdctl --dial-timeout, seconds.")

    @field_validator("endpoints", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _split_endpoints(value)

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, endpoints: list[str]) -> list[str]:
        for url in endpoints:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"endpoint {url!r} must be a URL starting with http:// or https://")
        schemes = {url.split("://", 1)[0] for url in endpoints}
        if len(schemes) > 1:
            raise ValueError("endpoints mix http:// and https://; one cluster speaks one of them")
        return endpoints

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> Self:
        if (self.cert is None) != (self.key is None):
            raise ValueError("give both `cert` and `key` (a client certificate needs its key), or neither")
        return self

    @property
    def uses_tls(self) -> bool:
        return self.endpoints[0].startswith("https://")


class SnapshotSaveArgs(EtcdClientArgs):
    dest: str = Field(
        min_length=1,
        description=(
            "Snapshot file on the worker: relative to the run's work directory, or absolute where the "
            "worker policy lets modules write. An existing valid snapshot there is kept "
            "(changed: false), so a retried task does not take a second one."
        ),
    )
    count_prefixes: list[str] = Field(
        default_factory=list,
        description=(
            "Key prefixes (e.g. `/registry/minions/`) whose key counts at the snapshot's revision "
            "are recorded, so a restore drill can compare what it restored with what the cluster held."
        ),
    )


class SnapshotStatusArgs(ModuleArgs):
    path: str = Field(
        min_length=1, description="Snapshot file on the worker (relative: the run's work directory)."
    )


class _ScratchArgs(ModuleArgs):
    scratch_dir: str = Field(
        min_length=1,
        description=(
            "Directory for the restored member (created; removed by `scratch_member: stop`): relative "
            "to the run's work directory, or absolute where the worker policy lets modules write. "
            "It must be new, empty, or a previous pitstop scratch directory."
        ),
    )
    live_data_dirs: list[str] = Field(
        default_factory=lambda: list(DEFAULT_LIVE_DATA_DIRS),
        description=(
            "Data directories of live etcd members on this machine. A scratch directory inside "
            "one of them, equal to one, or containing one is refused (PolicyViolation)."
        ),
    )


class RestoreArgs(_ScratchArgs):
    snapshot: str = Field(
        min_length=1,
        description="Snapshot file on the worker to restore (relative: the run's work directory).",
    )
    cluster_token: str | None = Field(
        default=None,
        description="Initial cluster token of the restored member; default: a new one per run.",
    )
    name: str = Field(default="scratch", pattern=r"^[a-z0-9][a-z0-9-]*$", description="Member name.")


class ScratchMemberArgs(_ScratchArgs):
    action: Literal["start", "stop"] = Field(
        description="`start`: run etcd on the restored data on free loopback ports; `stop`: stop it "
        "and remove the scratch directory.",
    )
    start_timeout_s: float = Field(default=30.0, gt=0, description="How long to wait for /health.")


class PrefixRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min: int = Field(default=1, ge=0, description="At least this many keys under the prefix.")
    max: int | None = Field(default=None, ge=0, description="At most this many keys.")


class VerifyArgs(EtcdClientArgs):
    revision: int | None = Field(
        default=None, ge=0, description="Expected revision: the snapshot's (`etcd.snapshot_status`)."
    )
    expected_keys: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Expected number of live keys: what the cluster held at the snapshot's revision "
            "(recorded by `etcd.snapshot_save`, stored with the object by `storage.upload`)."
        ),
    )
    prefixes: dict[str, PrefixRule] = Field(
        default_factory=dict,
        description="Required key prefixes with bounds, e.g. `{'/registry/minions/': {min: 1}}`.",
    )
    expected_counts: dict[str, int] = Field(
        default_factory=dict,
        description="Exact key counts per prefix, e.g. the node count at snapshot time.",
    )
    sample_reads: int = Field(
        default=3, ge=0, le=100, description="Keys read back one by one (under each required prefix)."
    )

    @field_validator("prefixes", mode="before")
    @classmethod
    def _list_means_min_one(cls, value: object) -> object:
        if isinstance(value, list):
            return {str(p): {} for p in value}
        return value


class HealthArgs(EtcdClientArgs):
    """Fails (or reports, `fail_on: never`) when the cluster is not fit for an upgrade: quorum,
    one leader, alarms (NOSPACE, CORRUPT), database size against the backend quota, leader
    changes and WAL fsync p99, from `etcdctl` and each endpoint's `/metrics`. Give every
    member's client URL: only endpoints the worker policy allows are contacted. Read-only."""

    expected_members: int | None = Field(default=None, ge=1, description="Members the cluster must have.")
    max_db_ratio: float = Field(
        default=0.8, gt=0, le=1, description="Largest database size as a share of --quota-backend-bytes."
    )
    max_fsync_p99_ms: float = Field(default=10.0, gt=0, description="Largest WAL fsync p99, milliseconds.")
    max_leader_changes: int | None = Field(
        default=None, ge=0, description="Most leader changes a member may have seen (None: reported only)."
    )
    sample_seconds: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description="Judge fsync over this window (two scrapes) instead of since each member started.",
    )
    fail_on: Literal["any", "never"] = Field(default="any", description="`never`: report only.")


SNAPSHOT_SAVE: ModuleSpec[SnapshotSaveArgs] = ModuleSpec(
    name="etcd.snapshot_save",
    args_model=SnapshotSaveArgs,
    summary="Save an etcd snapshot with etcdctl (TLS from secrets); records revision and key counts.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=30),
    heartbeat_timeout=timedelta(seconds=60),
    retry=ETCD_RETRY,
)
SNAPSHOT_STATUS: ModuleSpec[SnapshotStatusArgs] = ModuleSpec(
    name="etcd.snapshot_status",
    args_model=SnapshotStatusArgs,
    summary="Hash, revision, total keys and size of a snapshot file (etcdutl snapshot status).",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=10),
    heartbeat_timeout=timedelta(seconds=60),
    retry=ETCD_RETRY,
)
RESTORE: ModuleSpec[RestoreArgs] = ModuleSpec(
    name="etcd.restore",
    args_model=RestoreArgs,
    summary="Restore a snapshot into a scratch data directory with a new cluster token (etcdutl).",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=30),
    heartbeat_timeout=timedelta(seconds=60),
    retry=ETCD_RETRY,
)
SCRATCH_MEMBER: ModuleSpec[ScratchMemberArgs] = ModuleSpec(
    name="etcd.scratch_member",
    args_model=ScratchMemberArgs,
    summary="Start a throw-away etcd on restored data (free loopback ports), or stop it and clean up.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=5),
    retry=ETCD_RETRY,
)
VERIFY: ModuleSpec[VerifyArgs] = ModuleSpec(
    name="etcd.verify",
    args_model=VerifyArgs,
    summary="Check a (restored) member: revision, key count, required prefixes and sample reads.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=10),
    retry=ETCD_RETRY,
)

HEALTH: ModuleSpec[HealthArgs] = ModuleSpec(
    name="etcd.health",
    args_model=HealthArgs,
    summary="Quorum, leader, alarms, db size vs quota, leader changes and WAL fsync p99 of an etcd cluster.",
    supports_check_mode=True,
    start_to_close=timedelta(minutes=15),
    heartbeat_timeout=timedelta(seconds=60),
    retry=ETCD_RETRY,
)

# Every module of this file, listed once; `pitstop/module_catalog.py` joins the families.
SPECS: list[ModuleSpec[Any]] = [SNAPSHOT_SAVE, SNAPSHOT_STATUS, RESTORE, SCRATCH_MEMBER, VERIFY, HEALTH]
