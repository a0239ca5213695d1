"""The GPU Operator's MIG manager, device plugin and GPU Feature Discovery for MIG, in the simulated
cluster: a node's `nvidia.com/mig.config` label in, GPU instances, advertised resources and labels out.

Facts from NVIDIA/mig-parted (`cmd/nvidia-mig-manager/main.go`, `pkg/mig/reconfigure/reconfigure.go`,
`deployments/container/reconfigure-mig.sh`) and GFD's tests:

- The manager watches its node's `nvidia.com/mig.config` and acts on each new value. It reads the
  mig-parted config from the ConfigMap the ClusterPolicy names (`spec.migManager.config.name`, in
  the operator's namespace; `default-mig-parted-config`, `mig_parted_config`). A name the config
  does not have fails at once: `nvidia.com/mig.config.state=failed`. A config already applied is
  `success` at once.
- Otherwise: state `pending`; the device plugin, GFD, DCGM and DCGM exporter are paused (their
  `nvidia.com/gpu.deploy.<operand>` labels set to `paused-for-mig-change`, so their pods go and the
  node's GPU resources become unallocatable); MIG mode is switched where it changes (a GPU reset);
  `nvidia-mig-parted apply` destroys and creates the GPU instances; the operands come back and the
  state is `success`. The device plugin re-registers and advertises the new resources (and GFD
  relabels) a little after the label says `success`: D-GPU-MIG-01 waits for the resources, not the
  label. When apply fails — a layout the GPU cannot hold, or instances in use by running GPU pods
  (NVML refuses to destroy a GPU instance in use) — the operands come back and the state is
  `failed`; the old instances stay and no pod is touched. The manager writes no Event: `failed` on
  the label is all the node shows (the reason is in the manager's log).
- Advertised: `mixed` strategy, `nvidia.com/mig-<profile>` per profile (`+` written `.`) and
  `nvidia.com/gpu` for the GPUs without MIG; GFD labels `nvidia.com/mig-<profile>.count`,
  `.memory`, `.multiprocessors`, `.product`, `.replicas`, `.sharing-strategy`, `.slices.gi/.ci`,
  `.engines.*` (NVIDIA's mixed-strategy label fixture) and `nvidia.com/gpu.replicas=0`. `single`
  strategy: every MIG device is an `nvidia.com/gpu`, GFD's `nvidia.com/gpu.product` becomes
  `<product>-MIG-<profile>` with the device's memory and slices; a node whose GPUs hold different
  profiles gets `<product>-MIG-INVALID`, count 0 and nothing advertised (GFD's own test).
- Reboot (`rebooting`) happens only when a MIG mode change fails and the manager runs with
  `WITH_REBOOT=true` (off by default in the operator); a mode change never fails here, so no node
  reboots.

Durations (simulated seconds × the cluster's time_scale; estimates of the steps above, not
measurements): pausing the operands `PAUSE_S`, a MIG mode change `MODE_CHANGE_S`, creating the
instances `APPLY_S` per GPU, the device plugin and GFD coming back `RESTART_S`. Timers live in
memory; the applied config is kept with the node in the store.

Faults (fleet spec): `mig.slow_advertise` (`minutes`, default 15) holds the new resources back that
long after `success`; `mig.bad_combo_accepted` reports `success` for a layout the GPU cannot hold
(and advertises what fits of it); `mig.reconfig_while_busy` deletes the node's GPU pods and
reconfigures under them; `mig.billing_as_gpu` advertises every MIG device as `nvidia.com/gpu`
under the whole GPU's product and memory labels; `mig.memory_leak` lets a filled instance spill into
its neighbours on the same GPU; `mig.process_visible` shows a container every MIG device of its
GPUs (a runtime ignoring the device plugin's assignment). The last two act in the containers
(`container_view`, `fleetval.sim.images`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import yaml

from fleetval.errors import FleetvalError
from fleetval.fleet.gpus import gpu_uuid
from fleetval.mig import catalog as mig_catalog
from fleetval.mig.isolation import FILL_SCRIPT
from fleetval.mig.simulated import (
    IDLE_MIB,
    DeviceAttrs,
    Instance,
    MigDeviceUse,
    MigView,
    device_attrs,
    filled_use_mib,
    instances,
)
from fleetval.sim.kube import mig_parted_config, operands
from fleetval.sim.kube.meta import TERMINAL, phase
from fleetval.sim.kube.nodes import GPU_MEMORY_MIB, mig_settings, node_object
from fleetval.sim.kube.resources import by_kind

if TYPE_CHECKING:
    from fleetval.sim.kube.cluster import SimKubeCluster

CONFIG_LABEL: Final = "nvidia.com/mig.config"
STATE_LABEL: Final = "nvidia.com/mig.config.state"
STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
MANAGER_DEPLOY_LABEL: Final = "nvidia.com/gpu.deploy.mig-manager"
PAUSED: Final = "paused-for-mig-change"
PAUSED_OPERANDS: Final = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")
GPU: Final = "nvidia.com/gpu"
MIG_RESOURCE: Final = "nvidia.com/mig-"
PAUSE_S: Final = 20.0
MODE_CHANGE_S: Final = 30.0
APPLY_S: Final = 4.0
RESTART_S: Final = 45.0
SLOW_ADVERTISE_MINUTES: Final = 15.0
_GFD_ATTRS: Final = (
    "count",
    "memory",
    "multiprocessors",
    "product",
    "replicas",
    "sharing-strategy",
    "slices.ci",
    "slices.gi",
    "engines.copy",
    "engines.decoder",
    "engines.encoder",
    "engines.jpeg",
    "engines.ofa",
)
_GPU_KEYS: Final = ("product", "count", "replicas", "memory", "sharing-strategy")  # GFD's per-GPU labels
_SINGLE_ATTRS: Final = (
    "multiprocessors",
    "slices.gi",
    "slices.ci",
    *(a for a in _GFD_ATTRS if a.startswith("engines.")),
)


@dataclass(slots=True)
class _Job:
    """A reconfiguration in progress."""

    target: str
    started: float
    ends: float
    layouts: list[dict[str, int]] | None  # None: the config cannot be applied (failed at apply)


@dataclass(slots=True)
class MigState:
    """The simulated MIG manager's memory (not API state)."""

    handled: dict[str, str] = field(default_factory=dict)  # node -> the label value last acted on
    jobs: dict[str, _Job] = field(default_factory=dict)
    advertise_at: dict[str, float] = field(default_factory=dict)  # node -> when the plugin comes back
    held: dict[tuple[str, str, str], tuple[Instance, ...]] = field(default_factory=dict)  # pod -> devices
    fillers: set[tuple[str, str, str]] = field(default_factory=set)  # pods holding their devices full
    parsed: tuple[str, dict[str, object] | None] = ("", None)  # the ConfigMap's text, parsed once


def state(cluster: SimKubeCluster) -> MigState:
    if not isinstance(cluster.mig, MigState):
        cluster.mig = MigState()
    return cluster.mig


# --- the node's GPU and config --------------------------------------------------------------------------


def node_gpu(cluster: SimKubeCluster, node: str) -> mig_catalog.GpuMig | None:
    """The catalog GPU of a fleet node (None: not MIG-capable as far as the catalog knows)."""
    try:
        return mig_catalog.gpu_for(cluster.spec.profile_of(node).gpu_product)
    except (FleetvalError, KeyError):
        return None


def _config(cluster: SimKubeCluster) -> dict[str, object] | None:
    """The mig-parted config the ClusterPolicy names, read from its ConfigMap (None: unreadable)."""
    policies = cluster.stored(by_kind("ClusterPolicy"))
    policy = min(policies, key=lambda p: str(p["metadata"].get("creationTimestamp", ""))) if policies else {}
    name = (((policy.get("spec") or {}).get("migManager") or {}).get("config") or {}).get("name")
    configmap = cluster.lookup(by_kind("ConfigMap"), operands.NAMESPACE, str(name or mig_parted_config.NAME))
    text = ((configmap or {}).get("data") or {}).get("config.yaml")
    if not isinstance(text, str):
        return None
    mig = state(cluster)
    if mig.parsed[0] != text:  # parsing it on every pass would cost more than the rest of the pass
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            doc = None
        mig.parsed = (text, doc if isinstance(doc, dict) else None)
    return mig.parsed[1]


def _layouts(
    config: Mapping[str, object], name: str, gpu: mig_catalog.GpuMig, gpus: int
) -> list[dict[str, int]] | None:
    try:
        return mig_catalog.node_layouts(config, name, gpu, gpus)
    except mig_catalog.MigError:
        return None


def applied_layouts(cluster: SimKubeCluster, node: str) -> list[dict[str, int]]:
    """The instances each GPU of `node` holds now, as profile -> count ({} for MIG disabled)."""
    gpu = node_gpu(cluster, node)
    gpus = cluster.spec.profile_of(node).gpus
    name = cluster.node_mig.get(node, "")
    config = _config(cluster)
    if gpu is None or not name or config is None:
        return [{} for _ in range(gpus)]
    layouts = _layouts(config, name, gpu, gpus) or [{} for _ in range(gpus)]
    if _has(cluster, node, "mig.bad_combo_accepted"):
        layouts = [_what_fits(gpu, layout) for layout in layouts]
    return layouts


def _what_fits(gpu: mig_catalog.GpuMig, layout: dict[str, int]) -> dict[str, int]:
    """The largest prefix of a layout (larger profiles first) the GPU can hold: what a manager that
    ignores errors leaves behind."""
    names = [n for n, c in layout.items() for _ in range(c) if gpu.profile(n) is not None]
    while names and not mig_catalog.check_layout(gpu, names).allowed:
        names.pop()
    kept: dict[str, int] = {}
    for n in names:
        kept[n] = kept.get(n, 0) + 1
    return kept


def node_instances(cluster: SimKubeCluster, node: str) -> list[Instance]:
    gpu = node_gpu(cluster, node)
    if gpu is None:
        return []
    salt = f"{cluster.spec.seed}/{node}/{cluster.node_mig.get(node, '')}"
    return [
        inst
        for index, layout in enumerate(applied_layouts(cluster, node))
        for inst in instances(gpu, index, layout, salt=salt)
    ]


def _fault(cluster: SimKubeCluster, node: str, kind: str) -> dict[str, Any] | None:
    """The fault's parameters ({} for a fault without any), None when the node has no such fault."""
    return next((f.params for f in cluster.spec.faults_on(node, "sharing") if f.kind == kind), None)


def _has(cluster: SimKubeCluster, node: str, kind: str) -> bool:
    return _fault(cluster, node, kind) is not None


# --- what the device plugin advertises and GFD labels -------------------------------------------------


def _advertise(cluster: SimKubeCluster, node: dict[str, Any]) -> None:
    """Write the node's resources and GFD labels for the instances it holds now."""
    name = node["metadata"]["name"]
    gpu = node_gpu(cluster, name)
    profile = cluster.spec.profile_of(name)
    if gpu is None:
        return
    labels = dict(node["metadata"].get("labels") or {})
    strategy = labels.get(STRATEGY_LABEL, "single")
    layouts = applied_layouts(cluster, name)
    counts: dict[str, int] = {}
    for layout in layouts:
        for p, c in layout.items():
            counts[p] = counts.get(p, 0) + c
    whole = sum(1 for layout in layouts if not layout)
    full_mib = int(GPU_MEMORY_MIB.get(profile.gpu_product, "0") or 0)
    # Without MIG the node is as the fleet made it (the device plugin's faults and withdrawn GPUs too).
    pristine = node_object(cluster.spec, name, cluster.spec.rack_of[name], 0)
    for key in [k for k in labels if k.startswith(MIG_RESOURCE) or k.startswith("nvidia.com/gpu.")]:
        if key.startswith(MIG_RESOURCE) or key.removeprefix("nvidia.com/gpu.") in (
            *_SINGLE_ATTRS,
            *_GPU_KEYS,
        ):
            labels.pop(key)
    labels.update(
        {
            k: v
            for k, v in pristine["metadata"]["labels"].items()
            if k.removeprefix("nvidia.com/gpu.") in _GPU_KEYS
        }
    )
    resources: dict[str, int] = {}
    if _has(cluster, name, "mig.billing_as_gpu") and counts:
        # Each MIG device sold as a whole GPU: counted as nvidia.com/gpu, labelled as the whole GPU.
        labels["nvidia.com/mig.strategy"] = "single"
        labels["nvidia.com/gpu.count"] = str(sum(counts.values()) + whole)
        resources[GPU] = sum(counts.values()) + whole
    elif strategy == "mixed" and counts:
        resources[GPU] = whole
        labels["nvidia.com/gpu.replicas"] = "0"
        for p, c in sorted(counts.items()):
            attrs = device_attrs(gpu, _profile(gpu, p), full_mib)
            resources[MIG_RESOURCE + p.replace("+", ".")] = c
            labels.update(
                _gfd_labels(f"{MIG_RESOURCE}{p.replace('+', '.')}.", profile.gpu_product, p, c, attrs)
            )
    elif counts:
        if whole or len(counts) != 1:
            labels.update(
                {
                    "nvidia.com/gpu.product": f"{profile.gpu_product}-MIG-INVALID",
                    "nvidia.com/gpu.count": "0",
                    "nvidia.com/gpu.memory": "0",
                }
            )
            resources[GPU] = 0
        else:
            [(p, c)] = counts.items()
            attrs = device_attrs(gpu, _profile(gpu, p), full_mib)
            gfd = _gfd_labels("nvidia.com/gpu.", profile.gpu_product, p, c, attrs)
            labels.update(
                {
                    k: v
                    for k, v in gfd.items()
                    if k.removeprefix("nvidia.com/gpu.") in (*_SINGLE_ATTRS, "memory", "count", "product")
                }
            )
            resources[GPU] = c
    new = copy.deepcopy(node)
    new["metadata"]["labels"] = labels
    for section in ("capacity", "allocatable"):
        current = new["status"].setdefault(section, {})
        for key in list(current):
            if key.startswith(MIG_RESOURCE) and key not in resources:
                current[key] = "0"  # the kubelet keeps a resource a plugin stopped advertising, at 0
        if not counts:
            current[GPU] = pristine["status"][section][GPU]
        current.update({k: str(v) for k, v in resources.items()})
    cluster.write(by_kind("Node"), new)


def _profile(gpu: mig_catalog.GpuMig, name: str) -> mig_catalog.MigProfile:
    profile = gpu.profile(name)
    assert profile is not None
    return profile


def _gfd_labels(prefix: str, product: str, profile: str, count: int, a: DeviceAttrs) -> dict[str, str]:
    return {
        f"{prefix}count": str(count),
        f"{prefix}memory": str(a.memory_mib),
        f"{prefix}multiprocessors": str(a.sm),
        f"{prefix}product": f"{product}-MIG-{profile}",
        f"{prefix}replicas": "1",
        f"{prefix}sharing-strategy": "none",
        f"{prefix}slices.ci": str(a.slices_ci),
        f"{prefix}slices.gi": str(a.slices_gi),
        f"{prefix}engines.copy": str(a.ce),
        f"{prefix}engines.decoder": str(a.dec),
        f"{prefix}engines.encoder": str(a.enc),
        f"{prefix}engines.jpeg": str(a.jpg),
        f"{prefix}engines.ofa": str(a.ofa),
    }


def _paused(cluster: SimKubeCluster, node: dict[str, Any], paused: bool) -> dict[str, Any]:
    """The operands paused (and the GPU resources unallocatable) or back."""
    new = copy.deepcopy(node)
    labels = new["metadata"].setdefault("labels", {})
    for operand in PAUSED_OPERANDS:
        key = f"nvidia.com/gpu.deploy.{operand}"
        if labels.get(key, "true") != "false":
            labels[key] = PAUSED if paused else "true"
    if paused:
        allocatable = new["status"].setdefault("allocatable", {})
        for key in list(allocatable):
            if key == GPU or key.startswith(MIG_RESOURCE):
                allocatable[key] = "0"
    return cluster.write(by_kind("Node"), new)


def _set_state(cluster: SimKubeCluster, node: dict[str, Any], value: str) -> dict[str, Any]:
    new = copy.deepcopy(node)
    new["metadata"].setdefault("labels", {})[STATE_LABEL] = value
    return cluster.write(by_kind("Node"), new)


# --- the manager --------------------------------------------------------------------------------------


def _gpu_pods(cluster: SimKubeCluster, node: str) -> list[dict[str, Any]]:
    """Running or Pending pods holding GPUs or MIG devices on `node` (the operands excepted)."""
    found = []
    for pod in cluster.stored(by_kind("Pod")):
        if (pod.get("spec") or {}).get("nodeName") != node or phase(pod) in TERMINAL:
            continue
        if operands.SIM_STATIC in (pod["metadata"].get("annotations") or {}):
            continue
        for container in pod["spec"].get("containers") or []:
            resources = container.get("resources") or {}
            wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            if any(k == GPU or k.startswith(MIG_RESOURCE) for k in wanted):
                found.append(pod)
                break
    return found


def _start(cluster: SimKubeCluster, node: dict[str, Any], target: str, now: float) -> None:
    name = node["metadata"]["name"]
    gpu = node_gpu(cluster, name)
    config = _config(cluster)
    gpus = cluster.spec.profile_of(name).gpus
    mig = state(cluster)
    configs = (config or {}).get("mig-configs")
    if gpu is None or config is None or not isinstance(configs, dict) or target not in configs:
        _set_state(cluster, node, "failed")  # `mig-parted assert --valid-config` fails: no pending
        return
    if target == cluster.node_mig.get(name):
        _set_state(cluster, node, "success")
        return
    layouts = _layouts(config, target, gpu, gpus)
    refused = layouts is None or not mig_catalog.check_node(config, target, gpu, gpus).allowed
    if refused and not (layouts is not None and _has(cluster, name, "mig.bad_combo_accepted")):
        layouts = None  # `nvidia-mig-parted apply` will fail
    before = applied_layouts(cluster, name)
    mode_changes = layouts is None or any(bool(a) != bool(b) for a, b in zip(before, layouts, strict=True))
    seconds = PAUSE_S + (MODE_CHANGE_S if mode_changes else 0.0) + APPLY_S * gpus
    mig.jobs[name] = _Job(target, now, now + seconds * cluster.time_scale, layouts)
    node = _set_state(cluster, node, "pending")
    _paused(cluster, node, True)


def _finish(cluster: SimKubeCluster, node: dict[str, Any], job: _Job, now: float) -> None:
    name = node["metadata"]["name"]
    mig = state(cluster)
    del mig.jobs[name]
    busy = _gpu_pods(cluster, name)
    if busy and _has(cluster, name, "mig.reconfig_while_busy"):
        for pod in busy:
            cluster.erase(by_kind("Pod"), pod)  # the fault: workloads deleted under the reconfiguration
        busy = []
    node = cluster.lookup(by_kind("Node"), "", name) or node
    if job.layouts is None or busy:
        node = _paused(cluster, node, False)
        _set_state(cluster, node, "failed")
        mig.advertise_at[name] = job.ends  # the old instances are advertised again
        return
    cluster.set_node_mig(name, job.target)
    node = _paused(cluster, node, False)
    _set_state(cluster, node, "success")
    slow = _fault(cluster, name, "mig.slow_advertise")
    delay = RESTART_S + (
        60.0 * float(slow.get("minutes", SLOW_ADVERTISE_MINUTES)) if slow is not None else 0.0
    )
    mig.advertise_at[name] = job.ends + delay * cluster.time_scale  # timed from the step, not this pass


def reconcile_mig(cluster: SimKubeCluster, now: float) -> float:
    """One pass of every node's MIG manager and device plugin; returns when a wait ends (inf: none)."""
    mig = state(cluster)
    due = math.inf
    for node in list(cluster.stored(by_kind("Node"))):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        if name not in cluster.spec.rack_of or labels.get(MANAGER_DEPLOY_LABEL) != "true":
            continue
        if "mig-manager" in operands.down_operands(cluster.spec, name):
            continue  # a crash-looping manager acts on nothing
        if name not in cluster.node_mig:  # first pass: the node holds its pool's layout already
            cluster.set_node_mig(name, mig_settings(cluster.spec, cluster.spec.profile_of(name).name)[1])
            mig.handled[name] = cluster.node_mig[name]
            if any(applied_layouts(cluster, name)):
                _advertise(cluster, node)
            continue
        wanted = labels.get(CONFIG_LABEL, "")
        job = mig.jobs.get(name)
        if job is None and wanted and wanted != mig.handled.get(name):
            mig.handled[name] = wanted
            _start(cluster, node, wanted, now)
            job = mig.jobs.get(name)
        node = cluster.lookup(by_kind("Node"), "", name) or node
        if job is not None:
            if now >= job.ends:
                _finish(cluster, node, job, now)
            else:
                due = min(due, job.ends)
        node = cluster.lookup(by_kind("Node"), "", name) or node
        at = mig.advertise_at.get(name)
        if at is not None:
            if now >= at:
                del mig.advertise_at[name]
                _advertise(cluster, node)
            else:
                due = min(due, at)
    return due


# --- containers: which MIG devices a pod gets and what it sees -----------------------------------------


def _requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    out = {}
    for key, value in wanted.items():
        if key == GPU or key.startswith(MIG_RESOURCE):
            text = str(value)
            out[key] = int(text) if text.isascii() and text.isdigit() else 0
    return out


def container_view(
    cluster: SimKubeCluster,
    node: str,
    key: tuple[str, str, str],
    container: Mapping[str, Any],
    active: set[tuple[str, str, str]],
) -> MigView | None:
    """The MIG devices the device plugin gives this container (None: it asked for none, or the node
    has no MIG), and what it can see of its GPUs."""
    all_instances = node_instances(cluster, node)
    if not all_instances:
        return None
    mig = state(cluster)
    strategy = (
        (cluster.lookup(by_kind("Node"), "", node) or {})
        .get("metadata", {})
        .get("labels", {})
        .get(STRATEGY_LABEL, "single")
    )
    wanted = _requests(container)
    for stale in [k for k in mig.held if k not in active and k != key]:
        del mig.held[stale]
    mig.fillers &= set(mig.held)
    held = {i.uuid for k, got in mig.held.items() if k != key for i in got}
    filled = {i.uuid for k in mig.fillers for i in mig.held.get(k, ())}
    free = [i for i in all_instances if i.uuid not in held]
    given: list[Instance] = []
    for resource, count in wanted.items():
        if resource == GPU and strategy == "mixed" and not _has(cluster, node, "mig.billing_as_gpu"):
            continue  # whole GPUs: the kubelet's own allocation
        named = resource.removeprefix(MIG_RESOURCE)
        pool = [i for i in free if resource == GPU or i.profile.replace("+", ".") == named]
        given += pool[:count]
        free = [i for i in free if i not in given]
    if not given:
        return None
    mig.held[key] = tuple(given)
    gpu = node_gpu(cluster, node)
    assert gpu is not None
    profile = cluster.spec.profile_of(node)
    full_mib = int(GPU_MEMORY_MIB.get(profile.gpu_product, "0") or 0)
    parents = sorted({i.gpu for i in given})
    leak = _fault(cluster, node, "mig.memory_leak") is not None

    def use(inst: Instance) -> MigDeviceUse:
        attrs = device_attrs(gpu, _profile(gpu, inst.profile), full_mib)
        used = filled_use_mib(attrs.memory_mib) if inst.uuid in filled else IDLE_MIB
        return MigDeviceUse(inst, attrs, used, gpu_uuid(cluster.spec.seed, node, inst.gpu))

    neighbours = tuple(use(i) for i in all_instances if i.gpu in parents and i not in given)
    spilled = 0
    if leak and any(n.instance.uuid in filled for n in neighbours):
        spilled = int(0.6 * use(given[0]).attrs.memory_mib)  # the neighbour's fill overflows into this one
    return MigView(
        gpu_name=profile.gpu_product.replace("-", " "),
        full_memory_mib=full_mib,
        devices=tuple(use(i) for i in given),
        neighbours=neighbours,
        sees_all=_fault(cluster, node, "mig.process_visible") is not None,
        spilled_mib=spilled,
    )


def container_started(
    cluster: SimKubeCluster, key: tuple[str, str, str], command: list[str], args: list[str]
) -> None:
    """A filler's devices are full from its start on (while the pod holds them)."""
    if FILL_SCRIPT.rstrip("\n") in (a.rstrip("\n") for a in (*command, *args)) and key in state(cluster).held:
        state(cluster).fillers.add(key)
