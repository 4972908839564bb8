"""RBAC as far as tests need it: the `forbidden` deny list, or an allow list of PolicyRules
(`rbac_rules`, the rules of the ClusterRoles bound to the client) matched as the RBAC authorizer
matches them (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go, `RuleAllows`: verb,
apiGroup and resource each listed or `*`; a subresource request names `resource/subresource`;
resourceNames narrow requests that name an object), and the two reviews `kubectl auth can-i` asks
for: SelfSubjectRulesReview (`--list`) and SelfSubjectAccessReview. The emulator has no
authentication: every request is the anonymous user's, and the rules are its rules.
"""

from __future__ import annotations

from .errors import bad_request

REVIEW_GROUP = "authorization.k8s.io"
REVIEWS = ("selfsubjectrulesreviews", "selfsubjectaccessreviews")
# what the default ClusterRoles give every authenticated user, so a rules review lists them too
# (system:basic-user: the self reviews; system:discovery / system:public-info-viewer: discovery URLs)
BASIC_RESOURCE_RULES = [{"verbs": ["create"], "apiGroups": [REVIEW_GROUP], "resources": list(REVIEWS)}]
BASIC_NON_RESOURCE_RULES = [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                                                                   "/livez", "/openapi", "/openapi/*", "/readyz",
                                                                   "/version", "/version/"]}]


def _has(values, item: str) -> bool:
    return "*" in (values or []) or item in (values or [])


def allows(rules: list[dict], verb: str, group: str, resource: str, name: str | None) -> bool:
    """Whether a rule grants `verb` on `resource` (`nodes/status` for a subresource) of `group`."""
    for r in rules + BASIC_RESOURCE_RULES:
        if not (_has(r.get("verbs"), verb) and _has(r.get("apiGroups"), group)):
            continue
        base, _, sub = resource.partition("/")
        resources = r.get("resources") or []
        if not (_has(resources, resource) or (sub and f"*/{sub}" in resources)):
            continue
        if r.get("resourceNames") and (name is None or name not in r["resourceNames"]):
            continue
        return True
    return False


def review(cluster, plural: str, body: dict | None) -> dict:
    """The answer to a POSTed self review, as the apiserver gives it (status filled, spec echoed)."""
    rules = cluster.settings.rbac_rules
    body = dict(body or {})
    spec = body.get("spec") or {}
    kind = "SelfSubjectRulesReview" if plural == REVIEWS[0] else "SelfSubjectAccessReview"
    if plural == REVIEWS[0]:
        resource_rules = BASIC_RESOURCE_RULES + (rules if rules is not None else [
            {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])
        status = {"resourceRules": resource_rules, "nonResourceRules": BASIC_NON_RESOURCE_RULES, "incomplete": False}
    else:
        attrs = spec.get("resourceAttributes")
        if not isinstance(attrs, dict):
            raise bad_request("resourceAttributes or nonResourceAttributes must be set")
        resource = attrs.get("resource", "") + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        ok = rules is None or allows(rules, attrs.get("verb", ""), attrs.get("group", ""), resource, attrs.get("name"))
        status = {"allowed": ok, **({} if ok else {"reason": ""})}
    return {"kind": kind, "apiVersion": f"{REVIEW_GROUP}/v1", "metadata": {"creationTimestamp": None},
            "spec": spec, "status": status}
