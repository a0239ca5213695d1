"""The pod every probe task creates, rendered by the probe pod operator (the KubernetesPodOperator's
own `build_pod_request_obj`), validates against the Kubernetes OpenAPI schema and is pinned to its
node with all its GPUs."""

from __future__ import annotations

import kubernetes_validate
import pytest
from kubernetes.client import ApiClient

from fleetval.dcgm.probe import DCGM_IMAGE, dcgm_diag_probe
from fleetval.probes.pod import ProbeSpec


def render_pod(spec: ProbeSpec) -> object:
    from fleetval_airflow.probe_pod import ProbePodOperator

    op = ProbePodOperator(task_id=f"probe_{spec.tool}", probe=spec.to_json(), fv_run=0)
    return op.build_pod_request_obj(dry_run=True)


@pytest.mark.parametrize("level", [2, 3])
def test_dcgm_probe_pod_validates_and_is_pinned(level: int) -> None:
    spec = dcgm_diag_probe("r01-n03", level=level, gpus=8, run_key="weekly_health_sweep/manual__x")
    pod = render_pod(spec)
    manifest = ApiClient().sanitize_for_serialization(pod)
    kubernetes_validate.validate(manifest, "1.30", strict=True)

    container = manifest["spec"]["containers"][0]
    assert manifest["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["r01-n03"]}]}
        ]
    }
    assert not manifest["spec"].get("nodeSelector")  # the hostname label need not be the node's name
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["image"] == DCGM_IMAGE and ":latest" not in container["image"]
    assert container["command"] == ["/bin/bash", "-c"]
    assert f"dcgmi diag -r {level} -j" in container["args"][0]
    assert manifest["spec"]["restartPolicy"] == "Never"
    assert manifest["metadata"]["namespace"] == "fleetval"
    tolerated = {t["key"] for t in manifest["spec"]["tolerations"]}
    assert {"nvidia.com/gpu", "fleetval.io/maintenance"} <= tolerated
    assert manifest["spec"]["activeDeadlineSeconds"] == spec.timeout_s


def test_schema_validation_can_fail() -> None:
    manifest = ApiClient().sanitize_for_serialization(
        render_pod(dcgm_diag_probe("n1", level=2, gpus=8, run_key="k"))
    )
    manifest["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, "1.30", strict=True)
