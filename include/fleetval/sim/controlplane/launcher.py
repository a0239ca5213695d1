"""`fleetval cluster up | down`: a real Kubernetes control plane on loopback, started as a cluster
would start it.

etcd; kube-apiserver (TLS, client certificates and static tokens, `Node,RBAC` authorization,
service-account token signing, the default admission plugins plus NodeRestriction); the
controller-manager (each controller with its own service account) and the scheduler, both with
their own certificates; Kueue's manager out of cluster with its own identity, its CRDs, RBAC and
webhook configurations from its release manifests (the webhooks and CRD conversion registered by
URL on loopback) and deploy/'s configuration merged into Kueue's defaults; the project's deploy/
objects; and the fleet's GPU nodes, joined by the virtual kubelet (`fleetval.sim.kubelet`).

Everything lives in the state directory: certificates, etcd's data, kubeconfigs, each process's
log and pid. `down` stops every process the directory records and waits until none is left.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import yaml

from fleetval.errors import FleetvalError
from fleetval.sim.controlplane import pki
from fleetval.sim.controlplane.binaries import Binaries, find_binaries

LOOPBACK: Final = "127.0.0.1"
SERVICE_CIDR: Final = "10.96.0.0/16"
SERVICE_IP: Final = "10.96.0.1"  # the `kubernetes` Service's address: the first of SERVICE_CIDR
KUEUE_NAMESPACE: Final = "kueue-system"
KUEUE_USER: Final = f"system:serviceaccount:{KUEUE_NAMESPACE}:kueue-controller-manager"
KUEUE_WEBHOOK_SERVICE: Final = "kueue-webhook-service"  # Kueue's defaults (internalCertManagement)
KUEUE_WEBHOOK_SECRET: Final = "kueue-webhook-server-cert"
KUBELET_USER: Final = "fleetval:virtual-kubelet"
STARTUP_TIMEOUT_S: Final = 120.0
STOP_TIMEOUT_S: Final = 15.0
DYING_WAIT_S: Final = 10.0  # how long restart lets a killed process finish exiting
# Kueue's manifests that run it in a cluster; out of cluster it needs none of them (its
# Deployment stays, scaled to 0, so a client reading Kueue's image tag finds the version).
_KUEUE_SKIPPED_KINDS: Final = frozenset({"Service", "APIService", "Secret", "ConfigMap"})
# The one admin identity the tests and the operator's kubectl use.
ADMIN_USER: Final = "fleetval-admin"


class ControlPlaneError(FleetvalError):
    """A component did not start, or the state directory is not a cluster's."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@dataclass
class Ports:
    etcd_client: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    kueue_webhook: int = field(default_factory=free_port)
    kueue_health: int = field(default_factory=free_port)
    kueue_metrics: int = field(default_factory=free_port)
    kueue_visibility: int = field(default_factory=free_port)
    kubelet: int = field(default_factory=free_port)


@dataclass
class StateDir:
    """The files of one cluster."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def info(self) -> Path:
        return self.root / "cluster.json"

    def component_kubeconfig(self, name: str) -> Path:
        return self.root / "kubeconfigs" / f"{name}.kubeconfig"

    def command_file(self, name: str) -> Path:
        return self.pids / f"{name}.command.json"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.pids / f"{name}.pid"

    def running(self) -> list[str]:
        """The components of this directory whose process is alive."""
        return [name for name, pid in self.recorded_pids().items() if _alive(pid)]

    def recorded_pids(self) -> dict[str, int]:
        found: dict[str, int] = {}
        if self.pids.is_dir():
            for path in sorted(self.pids.glob("*.pid")):
                with contextlib.suppress(ValueError, OSError):
                    found[path.stem] = int(path.read_text().split()[0])
        return found


def refuse_running(state: StateDir) -> None:
    if running := state.running():
        raise ControlPlaneError(
            f"{state.root} holds a running cluster ({', '.join(running)}): `fleetval cluster down` first"
        )


def kubeconfig_for(
    server: str, ca: bytes, name: str, *, pair: pki.KeyPair | None = None, token: str | None = None
) -> dict[str, Any]:
    user: dict[str, Any] = {}
    if pair is not None:
        user = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
    if token is not None:
        user = {"token": token}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca).decode()},
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "fleetval"}}],
        "current-context": name,
    }


def _write_yaml(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    path.chmod(0o600)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie of ours is not alive; reap it.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    # Nor is someone else's: an orphan killed in a container whose init never reaps stays a zombie.
    return _proc_state(pid) not in {"Z", "X"}


def _proc_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (None where /proc cannot tell)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or parentheses itself.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] if fields else None


class ControlPlane:
    """One loopback cluster in `state.root`; `up()` starts it, `down()` stops it."""

    def __init__(self, state_dir: Path, binaries: Binaries | None = None, ports: Ports | None = None) -> None:
        self.state = StateDir(state_dir.resolve())
        self._binaries = binaries
        self.ports = ports or Ports()
        self.server = f"https://{LOOPBACK}:{self.ports.apiserver}"

    @classmethod
    def attach(cls, state_dir: Path) -> ControlPlane:
        """The cluster `up` started in `state_dir` (its ports and binaries as it recorded them)."""
        state = StateDir(state_dir.resolve())
        if not state.info.is_file():
            raise ControlPlaneError(f"{state_dir} holds no cluster (`fleetval cluster up` first)")
        info = json.loads(state.info.read_text())
        binaries = Binaries(Path(info["bin_dir"]), info.get("versions") or {}) if "bin_dir" in info else None
        return cls(state.root, binaries, Ports(**info["ports"]))

    def restart(self, name: str) -> None:
        """Start a component that died (or a test killed) again, and wait until it serves."""
        restart(self.state.root, name)
        self._wait_ready(name)
        if name == "kueue":
            self._wait_webhooks()

    def _wait_ready(self, name: str) -> None:
        """Until the component answers its readiness endpoint (those that have one)."""
        urls = {
            "etcd": (f"http://{LOOPBACK}:{self.ports.etcd_client}/health", False),
            "kube-apiserver": (f"{self.server}/readyz", True),
            "kueue": (f"http://{LOOPBACK}:{self.ports.kueue_health}/readyz", False),
        }
        if name in urls:
            url, tls = urls[name]
            self._wait_http(url, name, tls=tls)

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = find_binaries()
        return self._binaries

    # --- start -------------------------------------------------------------------------------
    def up(
        self,
        *,
        crds: Sequence[Path] = (),
        kueue_config: dict[str, Any] | None = None,
        manifests: Sequence[Path] = (),
        kubelet_command: Sequence[str] | None = None,
        log: IO[str] | None = None,
    ) -> dict[str, Any]:
        """Start every component and wait for each to serve; returns what `cluster.json` holds.

        `crds` are applied before Kueue starts (the integrations it enables look for them),
        `manifests` once Kueue's webhooks answer; `kubelet_command` starts the virtual kubelet
        (it gets the kubelet kubeconfig, port and serving certificate as arguments)."""
        if any(_alive(pid) for pid in self.state.recorded_pids().values()):
            raise ControlPlaneError(
                f"{self.state.root} holds a running cluster: `fleetval cluster down` first"
            )
        started = time.monotonic()
        timings: dict[str, float] = {}
        for sub in (self.state.pki, self.state.logs, self.state.pids, self.state.root / "kubeconfigs"):
            sub.mkdir(parents=True, exist_ok=True)
        bins = self.binaries
        try:
            self._pki()
            self._start_etcd()
            self._wait_ready("etcd")
            timings["etcd"] = time.monotonic() - started
            self._start_apiserver()
            self._wait_ready("kube-apiserver")
            timings["kube-apiserver"] = time.monotonic() - started
            for path in crds:
                self.kubectl_apply(path)
            self._start_controller_manager()
            self._start_scheduler()
            self._apply_kueue(bins, kueue_config or {})
            self._wait_ready("kueue")
            self._wait_webhooks()
            timings["kueue"] = time.monotonic() - started
            for path in manifests:
                self.kubectl_apply(path)
            if kubelet_command is not None:
                self._start(
                    "virtual-kubelet",
                    [
                        *kubelet_command,
                        "--kubeconfig",
                        str(self.state.component_kubeconfig("virtual-kubelet")),
                        "--port",
                        str(self.ports.kubelet),
                        "--tls-cert",
                        str(self.state.pki / "kubelet-serving.crt"),
                        "--tls-key",
                        str(self.state.pki / "kubelet-serving.key"),
                    ],
                )
        except BaseException:
            self.down()
            raise
        info = {
            "kubeconfig": str(self.state.kubeconfig),
            "server": self.server,
            "state_dir": str(self.state.root),
            "backend": "controlplane",
            "versions": bins.versions,
            "bin_dir": str(bins.directory),
            "pids": self.state.recorded_pids(),
            "ports": vars(self.ports),
            "started_s": {k: round(v, 2) for k, v in timings.items()},
        }
        self.state.info.write_text(json.dumps(info, indent=2))
        if log is not None:
            log.write(f"control plane up in {time.monotonic() - started:.1f} s\n")
        return info

    def _pki(self) -> None:
        d = self.state.pki
        ca = pki.CertificateAuthority(d)
        self.ca = ca
        ca.issue(
            "apiserver",
            "kube-apiserver",
            hosts=(
                LOOPBACK,
                "localhost",
                SERVICE_IP,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ),
            server=True,
        )
        ca.issue(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            organizations=("system:masters",),
            client=True,
        )
        ca.issue("kubelet-serving", "fleetval-virtual-kubelet", hosts=(LOOPBACK, "localhost"), server=True)
        # Kueue manages its webhook certificate itself (cert-controller, its default): it keeps a
        # valid one it finds in its Secret, so the one given here also names loopback, where the
        # API server calls the webhooks. Its own CA, whose key goes into that Secret.
        self.kueue_ca = pki.CertificateAuthority(
            d, name="kueue-ca", organizations=("kueue",), stem="kueue-ca", rsa=True
        )
        self.kueue_ca.issue(
            "kueue-webhook",
            f"{KUEUE_WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc",
            hosts=(f"{KUEUE_WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc", LOOPBACK, "localhost"),
            server=True,
        )
        pki.signing_key(d / "sa.key")
        from cryptography.hazmat.primitives import serialization

        key = serialization.load_pem_private_key((d / "sa.key").read_bytes(), None)
        (d / "sa.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        identities = {
            "admin": (ADMIN_USER, ("system:masters",)),
            "controller-manager": ("system:kube-controller-manager", ()),
            "scheduler": ("system:kube-scheduler", ()),
            "kueue": (KUEUE_USER, ("system:serviceaccounts", f"system:serviceaccounts:{KUEUE_NAMESPACE}")),
            "virtual-kubelet": (KUBELET_USER, ()),
        }
        for name, (user, groups) in identities.items():
            pair = ca.issue(f"{name}-client", user, organizations=groups, client=True)
            path = self.state.kubeconfig if name == "admin" else self.state.component_kubeconfig(name)
            _write_yaml(path, kubeconfig_for(self.server, ca.pem, f"fleetval-{name}", pair=pair))

    # --- processes ----------------------------------------------------------------------------
    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        # What started it, so `restart` can start it again the same way (same ports, same state).
        self.state.command_file(name).write_text(json.dumps({"argv": argv, "env": env or {}}))
        return launch(self.state, name)

    def _start_etcd(self) -> None:
        client, peer = self.ports.etcd_client, self.ports.etcd_peer
        self._start(
            "etcd",
            [
                str(self.binaries.path("etcd")),
                "--name=fleetval",
                f"--data-dir={self.state.root / 'etcd'}",
                f"--listen-client-urls=http://{LOOPBACK}:{client}",
                f"--advertise-client-urls=http://{LOOPBACK}:{client}",
                f"--listen-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-advertise-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-cluster=fleetval=http://{LOOPBACK}:{peer}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",  # a test cluster: speed over durability
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self) -> None:
        d = self.state.pki
        tokens = self.state.root / "tokens.csv"
        tokens.write_text("")  # the static token file (tokens are added by `token()` before restart)
        tokens.chmod(0o600)
        self._start(
            "kube-apiserver",
            [
                str(self.binaries.path("kube-apiserver")),
                f"--etcd-servers=http://{LOOPBACK}:{self.ports.etcd_client}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.ports.apiserver}",
                f"--cert-dir={d}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                f"--kubelet-client-certificate={d / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={d / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={d / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP",
                "--endpoint-reconciler-type=none",  # loopback is no address for the `kubernetes` Service
                "--profiling=false",
                "--v=1",
            ],
        )

    def _start_controller_manager(self) -> None:
        d = self.state.pki
        kubeconfig = self.state.component_kubeconfig("controller-manager")
        self._start(
            "kube-controller-manager",
            [
                str(self.binaries.path("kube-controller-manager")),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={d / 'ca.crt'}",
                f"--cluster-signing-cert-file={d / 'ca.crt'}",
                f"--cluster-signing-key-file={d / 'ca.key'}",
                # No cloud, no pod network: node IPAM, routes and service LBs have nothing to do.
                "--controllers=*,-nodeipam,-route,-service-lb-controller,-cloud-node-lifecycle",
                "--node-monitor-grace-period=40s",
                "--concurrent-job-syncs=10",
                "--v=1",
            ],
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self.state.component_kubeconfig("scheduler")
        self._start(
            "kube-scheduler",
            [
                str(self.binaries.path("kube-scheduler")),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                "--secure-port=0",
                "--leader-elect=false",
                "--v=1",
            ],
        )

    # --- Kueue -------------------------------------------------------------------------------
    def _apply_kueue(self, bins: Binaries, site_config: dict[str, Any]) -> None:
        webhook = f"https://{LOOPBACK}:{self.ports.kueue_webhook}"
        ca_bundle = base64.b64encode(self.kueue_ca.pem).decode()
        objects = kueue_objects(
            yaml.safe_load_all(bins.kueue_manifests.read_text()),
            webhook,
            ca_bundle,
            version=bins.versions.get("kueue", ""),
        )
        d = self.state.pki
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": KUEUE_WEBHOOK_SECRET, "namespace": KUEUE_NAMESPACE},
                "data": {
                    key: base64.b64encode((d / name).read_bytes()).decode()
                    for key, name in (
                        ("ca.crt", "kueue-ca.crt"),
                        ("ca.key", "kueue-ca.key"),
                        ("tls.crt", "kueue-webhook.crt"),
                        ("tls.key", "kueue-webhook.key"),
                    )
                },
            }
        )
        rendered = self.state.root / "kueue" / "manifests.yaml"
        rendered.parent.mkdir(parents=True, exist_ok=True)
        rendered.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        rendered.chmod(0o600)
        self.kubectl_apply(rendered)
        # In a cluster the Secret is mounted where the webhook server reads its certificate.
        cert_dir = self.state.root / "kueue" / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        for key, name in (("tls.crt", "kueue-webhook.crt"), ("tls.key", "kueue-webhook.key")):
            (cert_dir / key).write_bytes((d / name).read_bytes())
            (cert_dir / key).chmod(0o600)
        config = kueue_configuration(
            site_config,
            webhook_port=self.ports.kueue_webhook,
            health_port=self.ports.kueue_health,
            metrics_port=self.ports.kueue_metrics,
            cert_dir=cert_dir,
        )
        config_path = _write_yaml(self.state.root / "kueue" / "config.yaml", config)
        self._start(
            "kueue",
            [
                str(bins.path("kueue")),
                f"--config={config_path}",
                f"--visibility-server-port={self.ports.kueue_visibility}",
                "--feature-gates=VisibilityOnDemand=false",
                "--zap-log-level=info",
            ],
            env={"KUBECONFIG": str(self.state.component_kubeconfig("kueue"))},
        )

    def _wait_webhooks(self) -> None:
        """Kueue's webhooks answer once its manager has its certificates and informers: a dry-run
        create of a ResourceFlavor passes through the validating webhook."""
        probe = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "fleetval-webhook-probe"},
        }
        path = self.state.root / "kueue" / "webhook-probe.yaml"
        path.write_text(yaml.safe_dump(probe))
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            self._check_running("kueue")
            result = self.kubectl(["create", "--dry-run=server", "-f", str(path)], check=False)
            if result.returncode == 0:
                return
            last = result.stderr.strip()
            time.sleep(0.5)
        raise ControlPlaneError(f"Kueue's webhooks did not answer within {STARTUP_TIMEOUT_S:.0f} s: {last}")

    # --- kubectl -----------------------------------------------------------------------------
    def kubectl(
        self, args: Iterable[str], *, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binaries.path("kubectl")), f"--kubeconfig={self.state.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def kubectl_apply(self, path: Path) -> None:
        """Server-side apply, retried while CRDs just created are not yet served."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            result = self.kubectl(
                [
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "--field-manager=fleetval-cluster",
                    "-f",
                    str(path),
                ],
                check=False,
            )
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"applying {path.name}: {result.stderr.strip()}")
            time.sleep(0.5)

    # --- waiting -----------------------------------------------------------------------------
    def _check_running(self, name: str) -> None:
        pid = self.state.recorded_pids().get(name)
        if pid is None or not _alive(pid):
            tail = "\n".join(self.state.log(name).read_text(errors="replace").splitlines()[-15:])
            raise ControlPlaneError(f"{name} exited during start-up; its log ends:\n{tail}")

    def _wait_http(self, url: str, name: str, *, tls: bool = True) -> None:
        context = None
        if tls:
            context = ssl.create_default_context(cafile=str(self.state.pki / "ca.crt"))
            context.load_cert_chain(self.state.pki / "admin-client.crt", self.state.pki / "admin-client.key")
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check_running(name)
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise ControlPlaneError(f"{name} did not become ready at {url} within {STARTUP_TIMEOUT_S:.0f} s")

    # --- stop --------------------------------------------------------------------------------
    def down(self) -> list[str]:
        return stop(self.state.root)


def launch(state: StateDir, name: str) -> int:
    """Start a component as its command file says, in a process group of its own (it outlives
    `cluster up`, and `down` ends it whole), its output appended to its log."""
    command = json.loads(state.command_file(name).read_text())
    with state.log(name).open("ab") as logfile:
        proc = subprocess.Popen(
            command["argv"],
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=state.root,
            env={**os.environ, **command["env"]},
            start_new_session=True,
        )
    state.pid_file(name).write_text(f"{proc.pid}\n")
    return proc.pid


def restart(state_dir: Path, name: str) -> int:
    """Start a component again (after a crash, or a kill by a test) as `up` started it."""
    state = StateDir(state_dir.resolve())
    if not state.command_file(name).is_file():
        known = sorted(p.name.removesuffix(".command.json") for p in state.pids.glob("*.command.json"))
        raise ControlPlaneError(f"{name}: not a component of the cluster in {state.root} (it has: {known})")
    pid = state.recorded_pids().get(name)
    if pid is not None and _alive(pid):
        # A process just killed is still exiting until all its threads have gone.
        deadline = time.monotonic() + DYING_WAIT_S
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            raise ControlPlaneError(f"{name} is running (pid {pid})")
    return launch(state, name)


def stop(state_dir: Path, timeout: float = STOP_TIMEOUT_S) -> list[str]:
    """Stop every process the state directory records (kubelet first, etcd last); returns their names."""
    state = StateDir(state_dir.resolve())
    order = [
        "virtual-kubelet",
        "kueue",
        "kube-scheduler",
        "kube-controller-manager",
        "kube-apiserver",
        "etcd",
    ]
    pids = state.recorded_pids()
    names = sorted(pids, key=lambda n: order.index(n) if n in order else -1)
    stopped = []
    for name in names:
        pid = pids[name]
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                while _alive(pid):
                    time.sleep(0.05)
            stopped.append(name)
        # The group may hold children the leader left behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        state.pid_file(name).unlink(missing_ok=True)
    return stopped


def kueue_objects(
    documents: Iterable[Any], webhook_url: str, ca_bundle: str, *, version: str = ""
) -> list[dict[str, Any]]:
    """Kueue's release manifests as an out-of-cluster manager needs them: CRDs, RBAC and webhook
    configurations, with every webhook and CRD conversion pointed at `webhook_url`."""
    kept = []
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") in _KUEUE_SKIPPED_KINDS:
            continue
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = 0  # the manager runs out of cluster
            doc["metadata"].setdefault("annotations", {})["fleetval.io/runs"] = "out of cluster, on loopback"
            for container in doc["spec"]["template"]["spec"].get("containers", []):
                if version and "kueue" in str(container.get("image", "")):
                    container["image"] = f"registry.k8s.io/kueue/kueue:{version}"
        elif doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in doc.get("webhooks", []):
                _to_url(hook["clientConfig"], webhook_url, ca_bundle)
        elif doc["kind"] == "CustomResourceDefinition":
            conversion = doc.get("spec", {}).get("conversion") or {}
            client = (conversion.get("webhook") or {}).get("clientConfig")
            if client is not None:
                _to_url(client, webhook_url, ca_bundle)
        kept.append(doc)
    return kept


def _to_url(client: dict[str, Any], base: str, ca_bundle: str) -> None:
    service = client.pop("service", None) or {}
    client["url"] = base + str(service.get("path") or "/")
    client["caBundle"] = ca_bundle


def kueue_configuration(
    site: dict[str, Any], *, webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path
) -> dict[str, Any]:
    """Kueue's defaults, the site's configuration over them (deploy/kueue-manager-config.yaml), and
    what an out-of-cluster manager on loopback needs."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
    }
    config.update({k: v for k, v in site.items() if k not in ("apiVersion", "kind")})
    config.update(
        {
            "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health_port}"},
            "metrics": {"bindAddress": f"{LOOPBACK}:{metrics_port}"},
            "webhook": {"port": webhook_port, "host": LOOPBACK, "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": KUEUE_WEBHOOK_SERVICE,
                "webhookSecretName": KUEUE_WEBHOOK_SECRET,
            },
        }
    )
    return config


@contextlib.contextmanager
def running(state_dir: Path, **kwargs: Any) -> Iterator[ControlPlane]:
    plane = ControlPlane(state_dir)
    plane.up(**kwargs)
    try:
        yield plane
    finally:
        plane.down()


if __name__ == "__main__":  # a quick manual check: python -m fleetval.sim.controlplane.launcher DIR
    with running(Path(sys.argv[1])) as plane:
        print(json.dumps(json.loads(plane.state.info.read_text())))
        input("press enter to stop ")
