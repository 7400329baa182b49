"""Activities: every side effect pitstop has, one module per external system.

`ACTIVITIES` is the registry `python worker.py` serves; add each activity function here.
Plain `def` activities run on the worker's thread pool; `async def` ones on its event loop.
A module's activity is bound to its spec with `@module_activity(SPEC)` (`@kube_module(SPEC)`
for the Kubernetes ones); tests/unit/test_module_catalogue.py checks that every spec in
`pitstop.module_catalog` has exactly one activity here and every module activity one spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.acceptance import ACCEPTANCE_ACTIVITIES
from activities.baseline import BASELINE_ACTIVITIES
from activities.compat import COMPAT_ACTIVITIES
from activities.dr import DR_ACTIVITIES
from activities.etcd import ETCD_ACTIVITIES
from activities.etcd_health import etcd_health
from activities.fleet_report import FLEET_REPORT_ACTIVITIES
from activities.gpu import GPU_ACTIVITIES
from activities.kube import KUBE_ACTIVITIES
from activities.notify import NOTIFY_ACTIVITIES
from activities.observe import OBSERVE_ACTIVITIES
from activities.plan import load_plan
from activities.prom import PROM_ACTIVITIES
from activities.records import RECORDS_ACTIVITIES
from activities.run_report import RUN_REPORT_ACTIVITIES
from activities.runs import RUNS_ACTIVITIES
from activities.ssh import SSH_ACTIVITIES
from activities.storage import STORAGE_ACTIVITIES
from activities.versions import VERSIONS_ACTIVITIES

ACTIVITIES: list[Callable[..., Any]] = [
    load_plan,
    *SSH_ACTIVITIES,
    *BASELINE_ACTIVITIES,
    *ETCD_ACTIVITIES,
    etcd_health,
    *STORAGE_ACTIVITIES,
    *RECORDS_ACTIVITIES,
    *RUN_REPORT_ACTIVITIES,
    *FLEET_REPORT_ACTIVITIES,
    *RUNS_ACTIVITIES,
    *NOTIFY_ACTIVITIES,
    *KUBE_ACTIVITIES,
    *GPU_ACTIVITIES,
    *OBSERVE_ACTIVITIES,
    *PROM_ACTIVITIES,
    *ACCEPTANCE_ACTIVITIES,
    *VERSIONS_ACTIVITIES,
    *COMPAT_ACTIVITIES,
    *DR_ACTIVITIES,
]
