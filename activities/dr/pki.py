"""`dr.pki_backup`: a control-plane node's PKI and kubeadm configuration, archived to S3.

Order (each step safe to repeat on a retry; every refusal comes before any side effect):
  1. the worker policy: S3 endpoint, bucket and credential secrets; the staging file in the
     run's work directory; the cluster's known_hosts and SSH key;
  2. over SSH: which of `paths` exist, which kubeadm*.yaml files lie in /etc/kubernetes;
  3. `tar -C /etc/kubernetes -cf - ...` streamed into the staging file (0600);
  4. the ConfigMap kube-system/kubeadm-config (ClusterConfiguration) added as
     `kubeadm-config.configmap.yaml` when the API serves it;
  5. the manifest (name, kind, size, SHA-256 per file) read from the archive, then the streamed,
     SHA-256 verified upload (storage.upload's `upload_file`), then the staging file removed.
The result carries the object key, its SHA-256 and the manifest: never a file's contents.
"""

from __future__ import annotations

import io
import tarfile
import time
from datetime import UTC, datetime
from typing import Any

import yaml
from temporalio.exceptions import ApplicationError

from activities.dr.archive import manifest, object_key, s3_errors, staged_file, stored, upload, uri
from activities.dr.remote import KUBERNETES_DIR, find_files, node_connection, run_read, stream_tar
from activities.kube.client import ApiStatus, KubeConfigError, Unreachable
from activities.kube.common import kube_for
from activities.module_activity import module_activity
from activities.storage import s3_client
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.errors import ErrorType, fail
from pitstop.module_args.dr import PKI_BACKUP, PkiBackupArgs

CONFIGMAP_MEMBER = "kubeadm-config.configmap.yaml"
CONFIGMAP_PATH = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"


def _kubeadm_configmap(call: ModuleCall) -> tuple[bytes | None, str]:
    """The ConfigMap's ClusterConfiguration as YAML, or None and why it is not there."""
    if call.cluster is None:
        return None, "the inventory names no cluster"
    try:
        kube = kube_for(call)
        found = kube.get_or_none(CONFIGMAP_PATH)
    except (ApiStatus, Unreachable, KubeConfigError) as exc:
        return None, f"not read: {exc}"
    except ApplicationError as exc:
        # The worker reaches this cluster's nodes but not its API (policy): the node files are
        # still worth backing up; the report says why the ConfigMap is missing.
        if exc.type != ErrorType.POLICY_VIOLATION:
            raise
        return None, f"not read: {exc.message}"
    if found is None:
        return None, "kube-system/kubeadm-config does not exist (not a kubeadm cluster?)"
    data = found.get("data") or {}
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {k: str(v) for k, v in data.items()},
    }
    return yaml.safe_dump(doc, sort_keys=True).encode(), "read from the API"


def _append(path: str, name: str, body: bytes) -> None:
    with tarfile.open(path, mode="a:") as archive:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(body), 0o600, int(time.time())
        archive.addfile(info, io.BytesIO(body))


@module_activity(PKI_BACKUP)
def pki_backup(call: ModuleCall, args: PkiBackupArgs) -> ModuleResult:
    client = s3_client(args, call.module)
    taken = datetime.now(UTC)
    key = object_key(args, "pki", call.host, taken, "tar")
    where = uri(args.bucket, key)
    with staged_file(call, f"{call.host}-pki.tar") as staged:
        with node_connection(call) as conn:
            present = [
                p
                for p in args.paths
                if run_read(conn, ["test", "-e", f"{KUBERNETES_DIR}/{p}"], args.become, call.host).rc == 0
            ]
            missing = [p for p in args.paths if p not in present]
            kubeadm_files: list[str] = []
            if args.kubeadm_files:
                found = find_files(conn, KUBERNETES_DIR, "kubeadm*.yaml", args.become, call.host) or []
                kubeadm_files = [f.rsplit("/", 1)[1] for f in found if f.count("/") == 3]
            members = present + [f for f in kubeadm_files if f not in present]
            if not members:
                fail(
                    ErrorType.PRECONDITION_FAILED,
                    f"{call.host} has none of {', '.join(f'{KUBERNETES_DIR}/{p}' for p in args.paths)} "
                    "(is it a control-plane node?); nothing was uploaded",
                )
            if call.check_mode:
                return ModuleResult(
                    changed=True,
                    msg=f"would archive {', '.join(members)} from {call.host}:{KUBERNETES_DIR} to {where}",
                    data={"members": members, "missing": missing},
                )
            size = stream_tar(conn, members, args.become, call.host, staged.fd, args.timeout_seconds)
        staged.close()
        configmap: dict[str, Any] = {"included": False, "why": "not asked (kubeadm_configmap: false)"}
        if args.kubeadm_configmap:
            body, why = _kubeadm_configmap(call)
            configmap = {"included": body is not None, "why": why}
            if body is not None:
                _append(str(staged.path), CONFIGMAP_MEMBER, body)
        files = manifest(staged.path)
        metadata = {"pitstop-run": call.run_id, "cluster": args.cluster, "node": call.host, "item": "pki"}
        with s3_errors(f"upload to {where}"):
            outcome = upload(client, args, key, staged.path, metadata)
    kinds = {
        kind: sum(1 for f in files if f["kind"] == kind) for kind in sorted({str(f["kind"]) for f in files})
    }
    return ModuleResult(
        changed=outcome.changed,
        msg=f"archived {len(files)} files from {call.host}:{KUBERNETES_DIR} ({size} bytes) to {where}, "
        f"{outcome.verified or 'already'}-verified sha256 {outcome.sha256}",
        data={
            **stored(args, key, where, outcome, taken),
            "sse": args.sse,
            "node": call.host,
            "members": members,
            "missing": missing,
            "kubeadm_files": kubeadm_files,
            "kubeadm_configmap": configmap,
            "kinds": kinds,
            "files": files,
        },
    )
