"""`dr.*` modules: the recovery items beyond etcd (runbooks/dr-readiness.yaml, issue 19).

pki.py      dr.pki_backup (a control-plane node's PKI and kubeadm config to S3, verified)
certs.py    dr.cert_expiry (notAfter of the node's public certificates)
export.py   dr.export_objects (queue and policy objects as one YAML document set in S3)
reach.py    dr.http_check (registries, model registries, an ingress certificate (tls.py), each
            endpoint allowed by the worker policy's http.endpoints)
gitops.py   dr.gitops_source (Flux or Argo CD source at its deployed revision)
report.py   dr.report (the verified / unverified table)
remote.py   what is sent to the node; archive.py  staging and upload (activities.storage)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.dr.certs import cert_expiry
from activities.dr.export import export_objects
from activities.dr.gitops import gitops_source
from activities.dr.pki import pki_backup
from activities.dr.reach import http_check
from activities.dr.report import report

DR_ACTIVITIES: list[Callable[..., Any]] = [
    pki_backup,
    cert_expiry,
    export_objects,
    http_check,
    gitops_source,
    report,
]
