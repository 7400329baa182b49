"""`dr.export_objects`: the cluster's queue and policy objects as one YAML document set in S3.

What a rebuilt cluster needs to admit work as before: Kueue's ClusterQueues, LocalQueues,
ResourceFlavors and WorkloadPriorityClasses, PriorityClasses, ResourceQuotas, LimitRanges and
NetworkPolicies. Each object is cleaned of what the apiserver owns (status, managedFields, uid,
resourceVersion, creationTimestamp, generation, the last-applied annotation), so the file
applies as it is (`kubectl apply -f`). A kind the cluster does not serve (Kueue not installed)
is reported under `not_installed`, not as a failure. Upload: `activities.storage.upload_file`,
SHA-256 verified; the staged file is removed whatever happens.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import yaml

from activities.dr.archive import object_key, s3_errors, staged_file, stored, upload, uri
from activities.kube.common import kube_for, kube_module
from activities.kube.discovery import Discovery
from activities.storage import s3_client
from pitstop.contracts import ModuleCall, ModuleResult
from pitstop.module_args.dr import EXPORT_OBJECTS, ExportObjectsArgs

SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
MAX_NAMES = 200


def clean(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """The object as one would write it: no status, no fields the apiserver sets."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_FIELDS}
    for gone in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        meta.pop(gone, None)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}


@kube_module(EXPORT_OBJECTS)
def export_objects(call: ModuleCall, args: ExportObjectsArgs) -> ModuleResult:
    client = s3_client(args, call.module)
    kube = kube_for(call)
    discovery = Discovery(kube)
    taken = datetime.now(UTC)
    documents: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    not_installed: list[str] = []
    for ref in args.kinds:
        label = f"{ref.kind}.{ref.api_version}"
        resource = discovery.find(ref.api_version, ref.kind)
        if resource is None or "list" not in resource.verbs:
            not_installed.append(label)
            continue
        items = kube.list(resource.path())
        cleaned = [
            clean(item, ref.api_version, ref.kind)
            for item in items
            if not (
                ref.kind == "PriorityClass"
                and not args.include_system_priority_classes
                and (item.get("metadata") or {}).get("name") in SYSTEM_PRIORITY_CLASSES
            )
        ]
        cleaned.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))
        documents.extend(cleaned)
        counts[label] = len(cleaned)
    names = [
        f"{d['kind']} {d['metadata'].get('namespace', '') + '/' if d['metadata'].get('namespace') else ''}"
        f"{d['metadata'].get('name')}"
        for d in documents
    ]
    key = object_key(args, "objects", "queue-policy", taken, "yaml")
    where = uri(args.bucket, key)
    summary = f"{len(documents)} objects of {len(counts)} kinds" + (
        f"; not installed: {', '.join(not_installed)}" if not_installed else ""
    )
    if call.check_mode:
        return ModuleResult(
            changed=True,
            msg=f"would export {summary} to {where}",
            data={"counts": counts, "not_installed": not_installed},
        )
    header = (
        f"# Queue and policy objects of cluster {args.cluster} exported by pitstop dr.export_objects "
        f"(run {call.run_id}) at {taken.isoformat().replace('+00:00', 'Z')}; apply with kubectl apply -f.\n"
    )
    text = header + (yaml.safe_dump_all(documents, sort_keys=True, explicit_start=True) if documents else "")
    with staged_file(call, "queue-policy.yaml") as staged:
        os.write(staged.fd, text.encode())
        staged.close()
        metadata = {"pitstop-run": call.run_id, "cluster": args.cluster, "item": "queue-policy-objects"}
        with s3_errors(f"upload to {where}"):
            outcome = upload(client, args, key, staged.path, metadata)
    return ModuleResult(
        changed=outcome.changed,
        msg=f"exported {summary} to {where}, {outcome.verified or 'already'}-verified "
        f"sha256 {outcome.sha256}",
        data={
            **stored(args, key, where, outcome, taken),
            "objects": len(documents),
            "counts": counts,
            "not_installed": not_installed,
            "names": names[:MAX_NAMES],
        },
    )
