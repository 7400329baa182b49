"""The rehearsal cluster: a simulated GPU Kubernetes cluster that `kubectl` and the official
`kubernetes` Python client cannot tell from a small real one, for the calls pitstop makes.

Start it
--------
- Command line: `pitstop sim serve [--nodes N] [--domains D] [--gpus-per-node G]
  [--scenario FILE] [--time-scale X] [--port P] [--kubeconfig PATH]` serves on 127.0.0.1 and
  writes a kubeconfig (plain-HTTP server URL, bearer token `pitstop-sim-token`).
- In-process (tests, demo)::

      from pitstop_sim import SimCluster, SimConfig, load_scenario
      with SimCluster(SimConfig(scenario=load_scenario(path), kubeconfig=tmp / "kubeconfig")) as sim:
          sim.url, sim.kubeconfig_path          # http://127.0.0.1:<port>, the kubeconfig file
          kubernetes.config.load_kube_config(config_file=str(sim.kubeconfig_path))

  `SimCluster.start()` serves from a background thread and returns the URL; `stop()` ends
  it. `await start_async()` / `stop_async()` run it on the caller's event loop instead.
  Every `SimCluster` method is thread-safe.

Python API (`SimCluster`)
-------------------------
  counters() -> CountersSnapshot        reset_counters()
  timeline() -> [TimelineEvent]         unavailability() -> [DomainUnavailability]
  reboot(node)                          node_profile(node) / set_node_profile(node, ProfileUpdate)
  add_fault(ApiErrorFault | LatencyFault) -> index       clear_faults()
  block_pdb(namespace, name, blocked=True)               (a PDB that never allows, or back)
  get/list/create/patch/delete(resource, ...)  objects in-process ("pods", "apps/deployments", ...)
  wait_for(predicate, timeout, what)    node_names()     call(fn) (run fn(SimControl) on the loop)
  gpu_node_names() / control_plane_names()   kubernetes_version()   node_health(node) (regressions applied)

SSH endpoints (`SimConfig(ssh=True)`, on by default in `pitstop sim serve`): every node gets
its own 127.0.0.1 port and host key, answering the commands pitstop's `ssh.*` modules send
(facts, firmware updater, reboot, coreutils, SFTP); known_hosts, the client key and an
inventory are written next to the kubeconfig. See `pitstop_sim.ssh`.

Persisted to etcd (`SimConfig(etcd_endpoint="http://127.0.0.1:2379")`, `pitstop sim serve
--etcd ENDPOINT [--etcd-prefix /registry/] [--etcd-resume]`): every object is also written,
as JSON, under the keys the apiserver uses (`/registry/minions/<node>`, `/registry/pods/...`),
so an etcd backup and restore drill see what the cluster held; `flush_etcd()` waits for the
writes. See `pitstop_sim.etcd_store`.

HTTP admin endpoints (no token): see `pitstop_sim.admin` — `/_sim/counters`,
`/_sim/counters/reset`, `/_sim/timeline`, `/_sim/unavailability`, `/_sim/reboot/{node}`,
`/_sim/nodes/{node}/profile`, `/_sim/faults`, `/_sim/pdbs/{ns}/{name}/block`, `/_sim/state`,
`/_sim/nodes/{node}/xid` (inject or clear an Xid; `SimCluster.inject_xid`),
`/_sim/nodes/{node}/telemetry` (GPU temperature, utilization, clocks; etcd fsync latency).

Exporters (no token; `pitstop_sim.metrics`): `/metrics/dcgm[/{node}]` (dcgm-exporter),
`/metrics/kube-state` (kube-state-metrics), `/metrics/etcd/{control-plane node}` (etcd), with
the real exporters' names and label sets; a registered cluster is scraped by the embedded
stack's Prometheus (`pitstop dev up --with prometheus`).

Kubernetes API served
---------------------
Discovery (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>[/<version>]`) and a minimal
`/openapi/v3` (paths only: `kubectl create/apply -f` learn that the server validates fields).
core/v1: namespaces, nodes (+status), pods (+status, eviction, log, binding), events,
configmaps, secrets, services, serviceaccounts; apps/v1: deployments (+scale), replicasets,
daemonsets, statefulsets (stored only); batch/v1: jobs, cronjobs (stored only); policy/v1:
poddisruptionbudgets; apiextensions.k8s.io/v1: customresourcedefinitions (creating one serves
its resources); admissionregistration.k8s.io/v1: validating/mutating webhook configurations
(stored); coordination.k8s.io/v1: leases; kueue.x-k8s.io/v1beta1: clusterqueues, localqueues,
resourceflavors, workloads; nvidia.com/v1: clusterpolicies.
Verbs: get, list (labelSelector, fieldSelector with the apiserver's field labels, limit and
continue), watch (`?watch=1`, chunked JSON lines, resourceVersion resume, bookmarks), create
(generateName, dryRun=All), update (resourceVersion conflicts), patch (strategic merge —
refused with 415 on custom resources as the apiserver does —, JSON merge, JSON patch),
delete (graceful pods, preconditions, propagationPolicy), deletecollection; Tables for
`kubectl get`. Errors are `Status` objects with the apiserver's reasons and messages.

Behaviour pitstop's kube modules rely on
----------------------------------------
- Nodes: labels `topology.kubernetes.io/zone` (failure domain), `nvidia.com/gpu.present=true`,
  `nvidia.com/gpu.product`, `nvidia.com/gpu.count`, `pitstop.dev/driver-version`,
  `pitstop.dev/firmware-version`; capacity/allocatable with `nvidia.com/gpu`; `nodeInfo`;
  conditions. The node controller adds `node.kubernetes.io/unschedulable:NoSchedule` while a
  node is cordoned and `not-ready`/`unreachable` taints while it is not Ready.
- Eviction (`POST .../pods/{name}/eviction`, body policy/v1 Eviction): 201 `Status` Success,
  or 429 `TooManyRequests` "Cannot evict pod as it would violate the pod's disruption
  budget." with `details.causes[0].reason == "DisruptionBudget"`; pods matching two PDBs
  get 500. The PDB status is computed live at eviction time, so eviction never exceeds
  `disruptionsAllowed`. DaemonSet pods are recreated; Deployment pods are recreated after
  `timing.recreate_delay_seconds` on a node that fits, and become Ready after
  `timing.pod_start_seconds` (both simulated seconds, divided by the time scale).
- Checkpoint protocol (gang training jobs, label `pitstop.dev/gang=<name>`): a pod or Job
  annotated `pitstop.dev/checkpoint-protocol: "annotation"` answers a new
  `pitstop.dev/checkpoint-requested: <token>` with `pitstop.dev/checkpoint-done: <token>`
  after `timing.checkpoint_seconds` (or the object's `pitstop.dev/checkpoint-seconds`).
  Objects without the protocol never answer. Counters record training pods evicted or
  deleted without the protocol, or before acknowledging. Training jobs can also be seeded as
  real operators run them (`framework:` pytorchjob, jobset, volcano, raycluster, lws,
  unlabelled; `training_frameworks.py`); the counters know them by the scenario's job names.
- Validation pods: a pod labelled `pitstop.dev/validation=<kind>` runs for
  `timing.validation_seconds[kind]`, then Succeeds or Fails with a log made by the log
  producer for `<kind>` (`dcgm`, `nccl`, `xid` (dmesg or `dcgmi dmon`), `ecc`
  (`nvidia-smi -q`, only in a container given GPUs) built in; `register_log_producer` for
  more) from its node's health profile (`xid_errors`, `ecc` per GPU...); read it with
  `GET .../pods/{name}/log`. `bench` pods run the shipped probe scripts of
  runbooks/manifests/probes from their mounted ConfigMap as a node would (`bench_logs.py`: the
  training script's METRIC lines, vLLM's server log and `vllm bench serve` table in the layout
  of the image's version); a script the image does not have fails as python or sh says; other
  images print METRIC lines.
- ConfigMap volumes: a pod whose (non-optional) ConfigMap is missing stays Pending in
  ContainerCreating with the kubelet's `FailedMount` events, retried with a growing back-off,
  and starts once the ConfigMap exists. Plain Job pods finish after `timing.job_seconds`; pods
  annotated `sim.pitstop.dev/run-seconds: N` after N.
- Images: `registry.available` (fnmatch patterns, default everything) is what the nodes can
  pull. A pod with any other image waits in ErrImagePull, then ImagePullBackOff, with the
  kubelet's events and containerd's NotFound text, and never starts.
- Kueue: `stopPolicy` None/Hold/HoldAndDrain on ClusterQueues; Jobs labelled
  `kueue.x-k8s.io/queue-name` are created suspended and admitted only while their
  ClusterQueue (via the LocalQueue of that name) has `stopPolicy: None`; `HoldAndDrain`
  suspends admitted ones. Status condition `Active` follows.
- Reboot (`reboot(node)`, `POST /_sim/reboot/{node}`): Ready becomes Unknown, pods on the
  node become not ready; after `timing.reboot_seconds` the node is Ready with a new boot id
  and any profile update staged with `apply: reboot`. Cordon state is kept. Nodes in
  `faults.nodes_never_return` stay NotReady. Pods that do not tolerate the NoExecute taint
  are removed after `timing.not_ready_eviction_seconds` (default tolerations: 300s).
- Scheduling: the scheduler skips cordoned nodes unless a pod tolerates
  `node.kubernetes.io/unschedulable:NoSchedule`; a pod with `spec.nodeName` set runs there
  regardless (so a validation Job can target a cordoned node either way, as on a real
  cluster). It honours DoNotSchedule `topologySpreadConstraints` (maxSkew, minDomains,
  nodeAffinityPolicy/nodeTaintsPolicy, matchLabelKeys) and required pod affinity and
  anti-affinity, the existing pods' anti-affinity included, as kube-scheduler's
  PodTopologySpread and InterPodAffinity filters do (`controllers/interpod.py`); scenario
  deployments can carry `topology_spread` and `anti_affinity`. Unschedulable pods stay Pending
  with a `PodScheduled=False` message and a FailedScheduling event worded as kube-scheduler's.
- Deleting a pod through the API is counted as a deletion (forced when a PDB covers it or
  the grace period is 0); controller-initiated removals (ReplicaSet scale-down, garbage
  collection, taint eviction) are not client actions and are not counted.

Authentication: the kubeconfig carries a bearer token, but kubectl does not send tokens to a
plain-HTTP server, so anonymous requests are served; a request with a wrong token gets 401
(`SimConfig(require_token=True)` refuses anonymous ones too).

RBAC (`SimConfig(rbac=True, rbac_policy=[paths], service_accounts=["ns/name"],
kubeconfig_service_account="ns/name")`, `pitstop sim serve --rbac PATH --service-account
NS/NAME`; off by default): every request needs a token (401 otherwise) and is authorized as an
apiserver's RBAC authorizer does, from the rbac.authorization.k8s.io/v1 objects the cluster
then serves (the default roles, plus the Namespaces, ServiceAccounts, roles and bindings of the
policy files); a denial is the apiserver's 403 and is kept (`SimCluster.rbac_denials()`). The
admin token can do anything; `service_account_token("ns/name")` is a ServiceAccount's. See
`pitstop_sim.rbac`.

Platform scenarios (`platform:` key, see `pitstop_sim.platform_spec` and
`runbooks/scenarios/platform-upgrade.yaml`)
----------------------------------------------------------------------------------------------
- `/version` answers `platform.kubernetes_version` (the control plane's version, kept in the
  simulator's state); kubelets default to it. Control-plane nodes `cp-001..` (Ready, label
  `node-role.kubernetes.io/control-plane`, taint NoSchedule, no GPUs, own SSH endpoint,
  inventory group `control_plane`) run mirror pods `kube-apiserver-cp-001`, ... whose images
  carry the version, and a `kube-proxy` DaemonSet runs on every node.
- Components become Deployments/DaemonSets (images, annotations, Services); Helm releases are
  Helm 3 Secrets (`pitstop.helm`); CRDs keep `status.storedVersions` (an update that drops a
  stored version is refused, a new storage version is recorded); webhook configurations point
  at component Services. Changing a DaemonSet's template rolls its pods (RollingUpdate,
  maxUnavailable) and a Deployment's replaces its ReplicaSet.
- Over SSH (`pitstop_sim.ssh.kubetools`, `.packages`): `kubeadm version|upgrade plan|upgrade
  apply|upgrade node` with kubeadm's version policy and messages; `apt-get install PKG=VER`,
  `apt-mark hold|unhold|showhold`, `dpkg-query -W -f=...` over each node's package set;
  `systemctl restart kubelet|containerd` (the Node then reports the installed version),
  `kubelet --version`, `containerd --version`, `ofed_info -s`. Driver (`nvidia-driver-<branch>`)
  and kernel (`linux-image-<release>`) packages take effect at the next reboot.
- `platform.regressions`: health overrides applied to a node while its versions match `when`
  (validation and `bench` pod logs follow them).

Not simulated: server-side apply, exec/attach/port-forward/proxy, the metrics API
(metrics.k8s.io), protobuf bodies, rolling Deployment updates (a new template replaces the old
ReplicaSet at once), StatefulSet and CronJob controllers (their objects are stored only),
OpenAPI schemas (`kubectl explain`).
"""

from __future__ import annotations

from pitstop_sim.cluster import SimCluster, SimConfig, SimControl
from pitstop_sim.models import (
    ApiErrorFault,
    CountersSnapshot,
    DomainUnavailability,
    GpuEcc,
    LatencyFault,
    NodeHealth,
    NodeProfile,
    ProfileUpdate,
    TimelineEvent,
)
from pitstop_sim.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from pitstop_sim.validation_logs import ValidationOutcome, register_log_producer

__all__ = [
    "ApiErrorFault",
    "CountersSnapshot",
    "DomainUnavailability",
    "GpuEcc",
    "LatencyFault",
    "NodeHealth",
    "NodeProfile",
    "ProfileUpdate",
    "Scenario",
    "ScenarioError",
    "SimCluster",
    "SimConfig",
    "SimControl",
    "TimelineEvent",
    "ValidationOutcome",
    "load_scenario",
    "parse_scenario",
    "register_log_producer",
]
