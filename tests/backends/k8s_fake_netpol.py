"""NetworkPolicies in the fake Kubernetes API (k8s_fake.py): what a kube-apiserver refuses in
one, and who may reach whom under a set of them, as a CNI that enforces them decides.

The reachability rules are the API's (networking.k8s.io/v1): a pod is isolated for ingress
(egress) once any policy of its namespace with that policy type selects it; it then admits
exactly the union of those policies' rules. A rule without peers admits everyone; a peer's
``podSelector`` without a ``namespaceSelector`` means pods of the policy's own namespace.
Only pod-to-pod traffic is modelled: an ``ipBlock`` peer is taken to match no pod, as a block
of the outside world (the shipped policy excepts the private ranges pods live in).
"""

from __future__ import annotations

from tests.backends.k8s_fake_rules import DNS_SUBDOMAIN, meta_errors

OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


def selector_matches(selector: dict, labels: dict | None) -> bool:
    """A LabelSelector: every matchLabels pair and every expression; ``{}`` selects all."""
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _selector_errors(selector, path: str, causes: list) -> None:
    if not isinstance(selector, dict):
        causes.append((path, "Invalid value: must be a label selector"))
        return
    meta_errors({"labels": selector.get("matchLabels") or {}}, causes, f"{path}.matchLabels")
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        if expr.get("operator") not in OPERATORS:
            causes.append((f"{path}.matchExpressions[{i}].operator", "Unsupported value"))


def policy_errors(policy: dict) -> list[tuple[str, str]]:
    causes: list[tuple[str, str]] = []
    meta, spec = policy.get("metadata") or {}, policy.get("spec")
    name = meta.get("name") or ""
    if not name or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        causes.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain'))
    meta_errors(meta, causes)
    for i, owner in enumerate(meta.get("ownerReferences") or []):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not owner.get(field):
                causes.append((f"metadata.ownerReferences[{i}].{field}", "Required value"))
    if not isinstance(spec, dict) or "podSelector" not in spec:
        causes.append(("spec.podSelector", "Required value"))
        return causes
    _selector_errors(spec["podSelector"], "spec.podSelector", causes)
    if not set(spec.get("policyTypes") or []) <= {"Ingress", "Egress"}:
        causes.append(("spec.policyTypes", "Unsupported value: Ingress or Egress"))
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            for j, peer in enumerate(rule.get(peers_key) or []):
                path = f"spec.{direction}[{i}].{peers_key}[{j}]"
                if not {"podSelector", "namespaceSelector", "ipBlock"} & set(peer):
                    causes.append((path, "Required value: must specify a peer"))
                for key in ("podSelector", "namespaceSelector"):
                    if key in peer:
                        _selector_errors(peer[key], f"{path}.{key}", causes)
    return causes


def _types(policy: dict) -> set[str]:
    spec = policy["spec"]
    if spec.get("policyTypes"):
        return set(spec["policyTypes"])
    return {"Ingress"} | ({"Egress"} if spec.get("egress") else set())


def _peer_matches(peer: dict, pod: dict, policy_ns: str) -> bool:
    if "ipBlock" in peer:
        return False
    ns = pod["metadata"]["namespace"]
    if "namespaceSelector" in peer:
        ns_ok = selector_matches(peer["namespaceSelector"], {"kubernetes.io/metadata.name": ns})
    else:
        ns_ok = ns == policy_ns
    return ns_ok and selector_matches(peer.get("podSelector") or {}, pod["metadata"]["labels"])


def _admits(policies, direction: str, subject: dict, other: dict) -> bool:
    kind, rules_key, peers_key = {
        "ingress": ("Ingress", "ingress", "from"),
        "egress": ("Egress", "egress", "to"),
    }[direction]
    ns = subject["metadata"]["namespace"]
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == ns
        and kind in _types(p)
        and selector_matches(p["spec"]["podSelector"], subject["metadata"]["labels"])
    ]
    if not selecting:
        return True  # not isolated in this direction
    for policy in selecting:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            if not peers or any(_peer_matches(peer, other, ns) for peer in peers):
                return True
    return False


def reachable(policies, source: dict, target: dict) -> bool:
    """May ``source`` open a connection to ``target``: its egress and the target's ingress."""
    return _admits(policies, "egress", source, target) and _admits(
        policies, "ingress", target, source
    )
