"""kube.delete: delete exactly the listed objects, each only as it was when listed.

In three steps, so that what is refused is refused before anything is deleted:

1. pitstop's own refusals, for the whole list: kinds whose deletion loses data or the cluster
   (pitstop.kube.removals.NEVER_DELETED) and the protected namespaces the worker policy does not
   open for this cluster (`clusters.<name>.allow_delete_in`);
2. a server-side dry run of every DELETE (`dryRun=All`), with the object's preconditions: the
   apiserver checks authorization (the worker's RBAC: a kind or namespace it does not grant is a
   403) and the uid/resourceVersion without writing anything. Check mode stops here;
3. the DELETEs, with the same preconditions: an object recreated (another uid) or changed
   (another resourceVersion) between the dry run and its turn is still not deleted.

Propagation is Background by default, as kubectl's: the object goes at once and the garbage
collector removes what it owned (a Deployment's ReplicaSets and Pods) afterwards, so the task
does not wait on pods' grace periods and a retried task finds the object gone (404: ok, not a
change). Foreground keeps the object, marked deleted, until its blocking dependents are gone.
"""

from __future__ import annotations

from typing import Any

from activities.kube.client import ApiStatus, Kube
from activities.kube.common import api_errors, beat, kube_for, kube_module, translate
from activities.kube.discovery import Discovery
from activities.kube.removals import find_kind
from pitstop.contracts import ModuleCall, ModuleResult, bound_text
from pitstop.errors import ErrorType, fail
from pitstop.kube.objects import Obj
from pitstop.kube.removals import NEVER_DELETED, PROTECTED_NAMESPACES, ObjectKey, group_of, refusal
from pitstop.module_args.kube_removals import DELETE, DeleteArgs, DeleteTarget
from pitstop.policy.clusters import cluster_rule
from pitstop.policy.effective import ClusterRule
from pitstop.policy.errors import POLICY_ENV, policy_violation


def key_of(target: DeleteTarget) -> ObjectKey:
    return ObjectKey(group_of(target.api_version), target.kind, target.namespace, target.name)


def refuse(targets: list[DeleteTarget], rule: ClusterRule) -> None:
    """Step 1: the kinds kube.delete never deletes (InvalidArgs), then the protected namespaces
    the worker policy does not allow (PolicyViolation); nothing has been asked of the cluster."""
    kinds = [
        f"{t.label}: {NEVER_DELETED[(key.group, key.kind)]}"
        for t in targets
        if ((key := key_of(t)).group, key.kind) in NEVER_DELETED
    ]
    if kinds:
        fail(
            ErrorType.INVALID_ARGS,
            "kube.delete: refused, nothing deleted: "
            + "; ".join(kinds)
            + " (kube.delete never deletes Namespaces, CustomResourceDefinitions, PersistentVolumes, "
            "PersistentVolumeClaims or Nodes)",
        )
    protected = [t for t in targets if refusal(key_of(t), rule.allow_delete_in) is not None]
    if protected:
        names = ", ".join(t.label for t in protected)
        spaces = sorted({t.namespace for t in protected})
        allowed = ", ".join(rule.allow_delete_in) or "none"
        raise policy_violation(
            f"kube.delete: refused, nothing deleted: {names}: {', '.join(spaces)} is a protected namespace "
            f"({', '.join(PROTECTED_NAMESPACES)}) and the worker policy does not allow deletion there on "
            f"cluster {rule.name!r} (policy clusters.{rule.name}.allow_delete_in: {allowed}; {rule.origin})",
            fix=f"ask the worker's operator to add it to clusters.{rule.name}.allow_delete_in "
            f"in {POLICY_ENV}",
        )


def options(target: DeleteTarget, propagation: str) -> Obj:
    preconditions: Obj = {}
    if target.uid:
        preconditions["uid"] = target.uid
    if target.resource_version:
        preconditions["resourceVersion"] = target.resource_version
    return {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "preconditions": preconditions,
        "propagationPolicy": propagation,
    }


def stale(exc: ApiStatus) -> bool:
    """The 409 of a precondition the object no longer meets (recreated or changed)."""
    return exc.status == 409 and "Precondition failed" in exc.message


class Deleter:
    def __init__(self, kube: Kube, args: DeleteArgs) -> None:
        self.kube = kube
        self.args = args
        self.discovery = Discovery(kube)
        self.stale_messages: dict[str, str] = {}

    def path(self, target: DeleteTarget) -> str | None:
        """The object's path; None when its kind is not served (nothing of it can exist)."""
        with api_errors(f"kube.delete: {target.label}"):
            served = find_kind(self.discovery, target.api_version, target.kind)
        if served is None:
            return None
        if served.namespaced and not target.namespace:
            # Without one the path would be the kind's cluster-wide list: a 404, reported "gone".
            fail(
                ErrorType.INVALID_ARGS,
                f"kube.delete: {target.label}: a {target.kind} is namespaced; give `namespace`",
            )
        return served.path(target.namespace or None, target.name)

    def send(self, target: DeleteTarget, path: str, *, dry_run: bool) -> str:
        """`deleted`, `deleting` (finalizers pending), `gone` or `stale`; other errors raise."""
        query = {"dryRun": "All"} if dry_run else None
        body = options(target, self.args.propagation_policy)
        try:
            answer: Any = self.kube.request("DELETE", path, query=query, body=body)
        except ApiStatus as exc:
            if exc.status == 404:
                return "gone"
            if stale(exc):
                self.stale_messages[target.label] = exc.message
                return "stale"
            translate(exc, f"kube.delete: {target.label}")
        meta = (answer.get("metadata") or {}) if isinstance(answer, dict) else {}
        if answer.get("kind") != "Status" and meta.get("deletionTimestamp") and meta.get("finalizers"):
            return "deleting"
        return "deleted"

    def run(self, *, dry_run: bool) -> dict[str, str]:
        self.stale_messages = {}
        out: dict[str, str] = {}
        for number, target in enumerate(self.args.objects):
            beat({"dry_run" if dry_run else "deleted": number, "of": len(self.args.objects)})
            path = self.path(target)
            out[target.label] = "gone" if path is None else self.send(target, path, dry_run=dry_run)
        return out


def refuse_stale(deleter: Deleter, done: list[str]) -> None:
    lines = [f"{label}: {message}" for label, message in deleter.stale_messages.items()]
    deleted = f"; deleted before: {', '.join(done)}" if done else "; nothing deleted"
    fail(
        ErrorType.PRECONDITION_FAILED,
        "kube.delete: changed or recreated since it was planned, so not deleted (plan the removal again "
        "and look at it): " + "; ".join(lines) + deleted,
    )


@kube_module(DELETE)
def delete(call: ModuleCall, args: DeleteArgs) -> ModuleResult:
    rule = cluster_rule(call.cluster.name if call.cluster else None, "kube.delete")
    refuse(args.objects, rule)
    if not args.objects:
        return ModuleResult(changed=False, msg="nothing to delete", data={"objects": []})
    deleter = Deleter(kube_for(call), args)
    planned = deleter.run(dry_run=True)
    if deleter.stale_messages:
        refuse_stale(deleter, [])
    outcome = planned if call.check_mode else deleter.run(dry_run=False)
    if deleter.stale_messages:
        refuse_stale(deleter, [label for label, state in outcome.items() if state in ("deleted", "deleting")])
    verb = {"deleted": "would delete" if call.check_mode else "deleted", "deleting": "deleting (finalizers)"}
    rows = [{"object": label, "result": state} for label, state in outcome.items()]
    lines = [f"{label}: {verb.get(state, 'already gone')}" for label, state in outcome.items()]
    changed = any(state in ("deleted", "deleting") for state in outcome.values())
    gone = sum(1 for state in outcome.values() if state == "gone")
    acted = len(outcome) - gone
    head = ("would delete" if call.check_mode else "deleted") + f" {acted} objects"
    return ModuleResult(
        changed=changed,
        msg=f"{head} ({args.propagation_policy} propagation), {gone} already gone",
        stdout=bound_text("\n".join(lines)),
        data={"objects": rows},
    )
