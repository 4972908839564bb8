"""The validation operator's re-checks of its one node: right before it creates the pod, and while
the pod is Pending. Each reads that node only, never the cluster.

- ``node_problem``: one GET of the node. Not Ready, cordoned, an untolerated NoSchedule/NoExecute
  taint (``discovery.node_problem``, the rule discovery applies) or deleted: the pod will not start
  there, the wait should end now.
- ``gpu_holders``: one list of the node's pods, ``fieldSelector=spec.nodeName=<node>`` with
  ``resourceVersion=0``. The apiserver answers it from its watch cache through the cache's
  spec.nodeName index: the node's few pods, whatever the cluster size. Without resourceVersion the
  list would be a consistent read, which an apiserver before 1.31 (or with ConsistentListFromCache
  off) serves from etcd by reading every pod of the cluster and filtering: seconds at 150,000 pods,
  twice per validation. The cache can lag etcd by a moment; a user pod bound in that moment is seen
  by the next Pending check, and the scheduler never puts our lowest-priority pod on GPUs a user pod
  holds or a preemptor is nominated for, so nothing is lost by reading the cache.

Pending pods nominated to the node (a preemption in progress) are left to that scheduler rule
instead of a cluster-wide list of unbound pods: our pod then stays Pending and the user pod, once
bound, is in the node's list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.kube import discovery, listing
from cluster_doctor.kube.api import CoreV1

GONE = "gone"
NODE_PODS = "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"


@dataclasses.dataclass(frozen=True)
class NodeProblem:
    """Why validation pods cannot start on the node now."""

    reason: str  # discovery.NOT_READY, CORDONED, TAINTED, or GONE
    detail: str

    def describe(self) -> str:
        """The cause as an attempt's reason states it."""
        return {
            discovery.NOT_READY: f"the node is not ready ({self.detail})",
            discovery.CORDONED: "the node is cordoned (spec.unschedulable)",
            discovery.TAINTED: f"the node has {self.detail}",
            GONE: "the node was deleted from the cluster",
        }.get(self.reason, f"{self.reason}: {self.detail}")


def node_problem(core_v1: CoreV1, node_name: str, tolerations: Sequence[Mapping[str, Any]]) -> NodeProblem | None:
    """One GET of the node: what keeps validation pods off it now, or None."""
    from kubernetes.client.exceptions import ApiException

    validate_node_name(node_name)
    try:
        response = core_v1.read_node(node_name, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return NodeProblem(GONE, "404 Not Found")
        raise
    node = listing.node_dict(listing.decode_object("nodes", response.data))
    found = discovery.node_problem(node, tolerations)
    return NodeProblem(*found) if found else None


def gpu_holders(core_v1: CoreV1, node_name: str, resource: str, *, exclude_pod: str | None = None) -> list[str]:
    """Non-terminal pods bound to the node that hold its GPUs (other than ``exclude_pod``), each as
    'ns/name requests N <resource>'. One list call, answered from the watch cache's node index."""
    validate_node_name(node_name)
    response = core_v1.list_pod_for_all_namespaces(field_selector=NODE_PODS.format(node=node_name),
                                                   resource_version="0", _preload_content=False)
    items, _ = listing.decode("pods", response.data, [0])
    holders = []
    for lazy in items:
        pod = listing.pod_dict(lazy)
        if pod["metadata"]["name"] == exclude_pod:
            continue
        if pod["spec"]["nodeName"] != node_name:
            continue  # the selector already says so; a server that ignored it must not free the node
        held = discovery.gpu_holder(pod, resource)
        if held:
            holders.append(held[1])
    return holders
