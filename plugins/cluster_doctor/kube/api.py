"""The Kubernetes client our code is handed, as a type: ``CoreV1``.

At run time it is ``retry.core_v1``'s ``Retrying`` proxy of kubernetes' ``CoreV1Api`` (every public
method retried; a proxy, not a subclass), in tests the real ``CoreV1Api`` over HTTP to the Kubernetes
API emulator. Both have the methods below, with these positional parameters; the keyword arguments
(``field_selector``, ``_preload_content``, ``_request_timeout`` ...) are kubernetes' own.

The list is exactly what the product calls, and the reads ``retry`` makes after a create: the tests
(tests/plugins/cluster_doctor/kube/test_api.py) fail on a call of a method not listed, on a method
``CoreV1Api`` lacks, and on one whose permission the RBAC manifests in include/k8s do not grant.

The answers are typed ``Any``: a call with ``_preload_content=False`` answers the raw HTTP response
(kube.listing streams it), otherwise kubernetes' model objects.
"""

from __future__ import annotations

from typing import Any, Protocol


class CoreV1(Protocol):
    """The kubernetes ``CoreV1Api`` methods Cluster Doctor calls (``retry.core_v1`` gives one)."""

    # the ApiClient underneath: another API group on the same connection (retry.sibling), /readyz
    api_client: Any

    # ------------------------------------------------------------------ nodes (cluster-wide)
    def list_node(self, **kwargs: Any) -> Any: ...

    def read_node(self, name: str, **kwargs: Any) -> Any: ...

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> Any: ...

    def patch_node_status(self, name: str, body: Any, **kwargs: Any) -> Any: ...

    # ------------------------------------------------------------------ pods and events, all namespaces
    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any: ...

    def list_event_for_all_namespaces(self, **kwargs: Any) -> Any: ...

    # ------------------------------------------------------------------ the validation namespace
    def create_namespaced_pod(self, namespace: str, body: Any, **kwargs: Any) -> Any: ...

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any: ...

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any: ...

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> Any: ...

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any: ...

    def create_namespaced_config_map(self, namespace: str, body: Any, **kwargs: Any) -> Any: ...

    def list_namespaced_config_map(self, namespace: str, **kwargs: Any) -> Any: ...

    # not called by name: retry.Retrying reads a created object back with it after a retried create
    # answered 409 AlreadyExists (create_namespaced_pod's is read_namespaced_pod, above)
    def read_namespaced_config_map(self, name: str, namespace: str, **kwargs: Any) -> Any: ...

    def delete_namespaced_config_map(self, name: str, namespace: str, **kwargs: Any) -> Any: ...

    def read_namespaced_persistent_volume_claim(self, name: str, namespace: str, **kwargs: Any) -> Any: ...
