"""deploy/helm/: values for the official Apache Airflow chart, and the Roles they rely on.

There is no Helm here, so the values are checked as `helm install` checks them: merged over the
chart's defaults (tests/fixtures/deploy/airflow-chart-1.22.0-values.yaml) the way Helm coalesces
values — maps key by key, a list or a scalar replaced whole, null deleting the key — and the result
validated against the chart's own values.schema.json (draft-07).
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from fleetval.k8s.validation import KUBERNETES_VERSION
from fleetval.settings import ENV_VARS, NOTIFY_ENV_VARS
from tests.paths import FIXTURES, ROOT
from tests.rbac import RUNNER, runner_grants

HELM = ROOT / "deploy" / "helm"
CHART = FIXTURES / "deploy"
RUNNER_ACCOUNT = RUNNER[1]


def coalesce(defaults: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values over a chart's defaults."""
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads((CHART / "airflow-chart-1.22.0-values.schema.json").read_text())
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "airflow-chart-1.22.0-values.yaml").read_text())
    return data


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((HELM / "values.yaml").read_text())
    return data


def _errors(validator: jsonschema.Draft7Validator, doc: dict[str, Any]) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc))


def test_the_values_are_valid_for_the_chart(
    validator: jsonschema.Draft7Validator, defaults: dict[str, Any], values: dict[str, Any]
) -> None:
    assert _errors(validator, defaults) == []  # the chart's own defaults pass its schema
    assert _errors(validator, coalesce(defaults, values)) == []


def test_the_schema_check_refuses_what_helm_would(
    validator: jsonschema.Draft7Validator, defaults: dict[str, Any], values: dict[str, Any]
) -> None:
    typo = copy.deepcopy(values)
    typo["logs"]["persistence"]["sise"] = typo["logs"]["persistence"].pop("size")
    assert any("'sise' was unexpected" in e for e in _errors(validator, coalesce(defaults, typo)))
    typo_sa = copy.deepcopy(values)
    typo_sa["triggerer"]["serviceAccount"]["create"] = "false"  # a string, not a boolean
    assert any(
        "triggerer.serviceAccount.create" in e for e in _errors(validator, coalesce(defaults, typo_sa))
    )
    bad_env = copy.deepcopy(values)
    bad_env["env"].append({"name": "FLEETVAL_NAMESPACE"})  # no value
    assert any("'value' is a required property" in e for e in _errors(validator, coalesce(defaults, bad_env)))
    bad_executor = {**values, "executor": "KubernetesExecuter,"}
    assert _errors(validator, coalesce(defaults, bad_executor))


def test_the_image_is_fleetvals_on_the_airflow_of_the_dockerfile(values: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    version = re.search(r"^ARG AIRFLOW_VERSION=(\S+)$", dockerfile, re.M)
    assert version is not None and values["airflowVersion"] == version.group(1)
    assert values["images"]["airflow"]["repository"].endswith("fleetval-airflow")
    assert values["images"]["useDefaultImageForMigration"] is False  # the migration runs fleetval too
    assert values["executor"] == "KubernetesExecutor"


def test_tasks_and_the_triggerer_call_the_cluster_as_the_runner_in_cluster(values: dict[str, Any]) -> None:
    for section in (values["workers"], values["workers"]["kubernetes"], values["triggerer"]):
        assert section["serviceAccount"]["create"] is False
        assert section["serviceAccount"]["name"] == RUNNER_ACCOUNT
    env = {e["name"]: e["value"] for e in values["env"]}
    conn = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert conn["conn_type"] == "kubernetes"
    assert conn["extra"] == {"in_cluster": True, "namespace": RUNNER[0]}
    assert env["FLEETVAL_NAMESPACE"] == RUNNER[0]
    missing = sorted(set(ENV_VARS + NOTIFY_ENV_VARS) - set(env))
    assert missing == [], "every fleetval setting is passed to every component"
    secrets = {s["envName"]: s for s in values["secret"]}
    assert secrets["AIRFLOW_CONN_FLEETVAL_DB"]["secretKey"] == "connection"
    assert values["postgresql"]["enabled"] is False and values["data"]["metadataSecretName"]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_airflows_roles_are_valid_and_leave_the_runners_grants_exact(values: dict[str, Any]) -> None:
    docs = _docs(HELM / "airflow-rbac.yaml")
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert values["rbac"]["create"] is False  # else the chart binds pod launching to the runner too
    # Installing both files gives the runner nothing beyond deploy/rbac.yaml.
    assert runner_grants([*_docs(ROOT / "deploy" / "rbac.yaml"), *docs]) == runner_grants()
    bound = {
        s["name"]
        for d in docs
        if d["kind"] == "RoleBinding"
        for s in d["subjects"]
        if s["namespace"] == RUNNER[0]
    }
    assert bound == {
        values["scheduler"]["serviceAccount"]["name"],
        values["apiServer"]["serviceAccount"]["name"],
    }
    executor = next(
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "airflow-kubernetes-executor"
    )
    pods = next(r for r in executor["rules"] if r["resources"] == ["pods"])
    assert {"create", "watch", "delete", "patch"} <= set(pods["verbs"])


def test_the_migration_job_migrates_imports_pools_then_the_store(
    tmp_path: Path, values: dict[str, Any]
) -> None:
    """Run the job's script with `airflow` and `fleetval` stand-ins that log their arguments."""
    log = tmp_path / "calls.log"
    for tool in ("airflow", "fleetval"):
        stub = tmp_path / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    job = values["migrateDatabaseJob"]
    assert job["applyCustomEnv"] is True  # the store's connection reaches the job
    store = "postgresql://fleetval:x@db:5432/fleetval"
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "AIRFLOW_CONN_FLEETVAL_DB": store}
    subprocess.run(job["args"], env=env, check=True, timeout=30)
    assert log.read_text().splitlines() == [
        "airflow db migrate",
        "airflow pools import /opt/fleetval/pools.json",
        f"fleetval db upgrade --db {store}",
    ]
    assert "COPY --chown=airflow:0 pools.json /opt/fleetval/pools.json" in (ROOT / "Dockerfile").read_text()
    # Without the store's connection the job fails instead of migrating nothing.
    unset = subprocess.run(job["args"], env={"PATH": env["PATH"]}, capture_output=True, timeout=30)
    assert unset.returncode != 0
