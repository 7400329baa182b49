"""`--show-policy`: the effective policy as tables (every default resolved, each rule with where
it came from), and the one-line summary the worker logs at start."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from pitstop.policy.clusters import known_clusters
from pitstop.policy.effective import WorkerPolicy
from pitstop.policy.model import PURPOSE_WORDS


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def policy_view(policy: WorkerPolicy) -> Group:
    header = Text.assemble(
        ("worker policy: ", "bold"), policy.described_source, f"  (chosen by: {policy.source_origin})"
    )
    run_dir = policy.work_root.path / "<run>"

    files = _table("files", "access", "path", "from")
    files.add_row("read", str(policy.runbook_dir.path), f"runbook directory: {policy.runbook_dir.origin}")
    files.add_row("read, write", str(run_dir), f"the run's work directory: {policy.work_root.origin}")
    for rule in policy.read:
        files.add_row("read", str(rule.path), rule.origin)
    for rule in policy.write:
        files.add_row("write", str(rule.path), rule.origin)
    for rule in policy.denied:
        files.add_row("never write" if rule.writes_only else "never", str(rule.path), rule.origin)

    clusters = _table(
        f"clusters (registered in {policy.clusters_dir.path})", "name", "kubernetes", "known_hosts", "from"
    )
    for name, cluster in sorted(known_clusters(policy).items()):
        if cluster.in_cluster:
            kube = "in-cluster service account"
        elif cluster.kubeconfig is not None:
            kube = str(cluster.kubeconfig) + (f" (context {cluster.context})" if cluster.context else "")
            kube += "; exec/auth-provider allowed" if cluster.allow_exec else "; exec/auth-provider refused"
        else:
            kube = "none (SSH only)"
        clusters.add_row(name, kube, str(cluster.known_hosts or "none"), cluster.origin)
    if not clusters.rows:
        clusters.add_row("(none)", "every cluster is refused", "", policy.clusters_dir.origin)

    s3 = _table("S3", "endpoint", "buckets", "from")
    for s3_rule in policy.s3:
        s3.add_row(s3_rule.shown, ", ".join(s3_rule.buckets), s3_rule.origin)
    if not s3.rows:
        s3.add_row("(none)", "every S3 endpoint is refused", "built-in default")

    etcd = _table("etcd", "endpoint", "from")
    for etcd_rule in policy.etcd:
        etcd.add_row(etcd_rule.shown, etcd_rule.origin)
    etcd.add_row("this run's own scratch member (etcd.scratch_member)", "built-in default")

    http = _table("http", "endpoint", "from")
    for http_rule in policy.http:
        http.add_row(http_rule.shown, http_rule.origin)
    if not http.rows:
        http.add_row("(none)", "built-in default: every http endpoint is refused")

    prometheus = _table("prometheus", "endpoint", "from")
    for prometheus_rule in policy.prometheus:
        prometheus.add_row(prometheus_rule.shown, prometheus_rule.origin)
    if not prometheus.rows:
        prometheus.add_row("(none)", "built-in default: every Prometheus and Alertmanager is refused")

    secrets = _table("secrets", "name", "may be used as", "only for", "from")
    for name, grant in sorted(policy.secrets.items()):
        scope = grant.clusters or grant.endpoints
        secrets.add_row(
            name, PURPOSE_WORDS[grant.purpose], ", ".join(scope) if scope else "any", grant.origin
        )
    if not secrets.rows:
        secrets.add_row("(none)", "every secret is refused", "", "built-in default")
    runbooks = _table("runbooks", "runs", "from")
    runbooks.add_row(
        "those a request carries (CLI bundles) and those in the runbook directory"
        if policy.runbooks_from_requests
        else f"only those in the runbook directory {policy.runbook_dir.path}",
        policy.runbooks_origin,
    )
    return Group(header, runbooks, files, clusters, s3, etcd, http, prometheus, secrets)


def policy_summary(policy: WorkerPolicy) -> str:
    """One line for the worker's start-up log."""
    clusters = sorted(known_clusters(policy))
    parts = [
        f"policy {policy.described_source}",
        "runbooks from requests and the runbook directory"
        if policy.runbooks_from_requests
        else "runbooks from the runbook directory only",
        f"reads {policy.runbook_dir.path}"
        + "".join(f", {r.path}" for r in policy.read)
        + f" and the run's work directory under {policy.work_root.path}",
        "writes the run's work directory" + "".join(f", {r.path}" for r in policy.write),
        f"clusters {', '.join(clusters) or 'none'}",
        f"S3 {', '.join(r.shown for r in policy.s3) or 'none'}",
        f"etcd {', '.join(r.shown for r in policy.etcd) or 'none'}",
        f"http {', '.join(r.shown for r in policy.http) or 'none'}",
        f"prometheus {', '.join(r.shown for r in policy.prometheus) or 'none'}",
        f"secrets {', '.join(f'{n} ({g.purpose})' for n, g in sorted(policy.secrets.items())) or 'none'}",
    ]
    return "; ".join(parts)
