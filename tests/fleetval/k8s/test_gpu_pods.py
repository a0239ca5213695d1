"""Which pods hold a GPU: whole GPUs, time-sliced shares and MIG devices all make a node busy."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from fleetval.k8s.cluster import gpu_pods_per_node, is_gpu_resource


def _pod(name: str, node: str, limits: dict[str, str] | None, *, init: bool = False) -> client.V1Pod:
    container = client.V1Container(name="c", resources=client.V1ResourceRequirements(limits=limits))
    plain = client.V1Container(name="p")
    spec = client.V1PodSpec(
        node_name=node,
        containers=[plain] if init else [container],
        init_containers=[container] if init else None,
    )
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)


class _Core:
    def __init__(self, pods: list[client.V1Pod]) -> None:
        self.pods = pods

    def list_pod_for_all_namespaces(self, **_: Any) -> client.V1PodList:
        return client.V1PodList(items=self.pods, metadata=client.V1ListMeta())


def test_gpu_resources_are_whole_shared_and_mig() -> None:
    assert is_gpu_resource("nvidia.com/gpu")
    assert is_gpu_resource("nvidia.com/gpu.shared")
    assert is_gpu_resource("nvidia.com/mig-1g.10gb")
    assert is_gpu_resource("nvidia.com/mig-1g.10gb.me")
    assert not is_gpu_resource("nvidia.com/gpus")
    assert not is_gpu_resource("rdma/ib")
    assert not is_gpu_resource("cpu")


def test_a_mig_tenant_makes_its_node_busy() -> None:
    core = _Core(
        [
            _pod("whole", "n1", {"nvidia.com/gpu": "8"}),
            _pod("mig", "n2", {"nvidia.com/mig-3g.40gb": "1"}),
            _pod("mig-init", "n2", {"nvidia.com/mig-1g.10gb": "1"}, init=True),
            _pod("shared", "n3", {"nvidia.com/gpu.shared": "1"}),
            _pod("cpu-only", "n4", {"cpu": "2"}),
            _pod("no-limits", "n4", None),
        ]
    )
    assert gpu_pods_per_node(core) == {"n1": 1, "n2": 2, "n3": 1}
