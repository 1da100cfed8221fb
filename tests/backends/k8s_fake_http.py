"""The HTTP half of the fake Kubernetes API (tests/backends/k8s_fake.py): the routes the
adapter calls, decoded and answered from the fake's state, with kube-apiserver's codes."""

from __future__ import annotations

import json
import re
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlparse

from tests.backends.k8s_fake_netpol import policy_errors
from tests.backends.k8s_fake_rules import (
    MERGE_PATCH,
    ApiError,
    invalid,
    job_errors,
    merge_patch,
    meta_errors,
    not_found,
    now,
    parse_selector,
)

if TYPE_CHECKING:
    from tests.backends.k8s_fake import FakeKubernetes


# -- the HTTP half
JOBS = r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs"
NETPOL = r"^/apis/networking.k8s.io/v1/namespaces/(?P<ns>[^/]+)/networkpolicies"
ROUTES = [
    (r"^/version$", {"GET": "version"}),
    (r"^/api/v1/nodes$", {"GET": "list_nodes"}),
    (r"^/api/v1/nodes/(?P<name>[^/]+)$", {"GET": "get_node", "PATCH": "patch_node"}),
    (JOBS + "$", {"GET": "list_jobs", "POST": "create_job"}),
    (JOBS + r"/(?P<name>[^/]+)$", {"GET": "get_job", "PATCH": "patch_job", "DELETE": "delete_job"}),
    (r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$", {"GET": "list_pods"}),
    (NETPOL + "$", {"GET": "list_policies", "POST": "create_policy"}),
    (NETPOL + r"/(?P<name>[^/]+)$", {"GET": "get_policy", "DELETE": "delete_policy"}),
]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    do_GET = do_POST = do_PATCH = do_DELETE = lambda self: self.handle_any()  # noqa: E731

    @property
    def fake(self) -> FakeKubernetes:
        return self.server.fake  # type: ignore[attr-defined]

    def handle_any(self) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        fake = self.fake
        fake.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": query,
                "content_type": ctype,
                "body": raw.decode() if raw else None,
                "at": time.monotonic(),
            }
        )
        if fake.outage == "hang":
            fake.release.wait(timeout=10)
            return self.reply(503, ApiError(503, "ServiceUnavailable", "hung").body())
        if fake.outage == "drop":
            self.close_connection = True
            return None
        try:
            if fake.outage == "503":
                raise ApiError(
                    503,
                    "ServiceUnavailable",
                    "the server is currently unable to handle the request",
                )
            if fake.token and self.headers.get("Authorization") != f"Bearer {fake.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            for pattern, methods in ROUTES:
                if m := re.match(pattern, url.path):
                    if self.command not in methods:
                        raise ApiError(
                            405,
                            "MethodNotAllowed",
                            "the server does not allow this method on the requested resource",
                        )
                    body = self.decode(raw, ctype) if raw else None
                    with fake.lock:
                        code, result = getattr(self, methods[self.command])(
                            body=body, query=query, ctype=ctype, **m.groupdict()
                        )
                    return self.reply(code, result)
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        except ApiError as error:
            return self.reply(error.code, error.body())

    def decode(self, raw: bytes, ctype: str):
        # Like the API server: a body without a Content-Type is read as JSON, except a patch,
        # whose patch type only the Content-Type names (checked in ``patched``).
        if ctype not in {"", "application/json", *MERGE_PATCH}:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an "
                f'unknown format ("{ctype}") - accepted media types include: '
                "application/json, application/merge-patch+json, "
                "application/strategic-merge-patch+json",
            )
        try:
            return json.loads(raw)
        except ValueError as error:
            raise ApiError(400, "BadRequest", f"invalid JSON: {error}") from None

    def reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout test); nothing to tell it
            pass

    # -- endpoints ---------------------------------------------------------------------------------
    def version(self, **_):
        return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-allot-fake"}

    def listing(self, kind, api_version, objects, query):
        match = parse_selector(query.get("labelSelector", ""))
        items = [o for o in objects if match(o["metadata"].get("labels"))]
        return 200, {
            "kind": kind,
            "apiVersion": api_version,
            "metadata": {"resourceVersion": str(self.fake._rv)},
            "items": sorted(items, key=lambda o: o["metadata"]["name"]),
        }

    def list_nodes(self, query, **_):
        return self.listing("NodeList", "v1", self.fake.nodes.values(), query)

    def get_node(self, name, **_):
        if name not in self.fake.nodes:
            raise not_found("nodes", name)
        return 200, self.fake.nodes[name]

    def patch_node(self, name, body, ctype, **_):
        node = self.get_node(name)[1]
        merged = self.patched(node, body, ctype)
        causes: list[tuple[str, str]] = []
        meta_errors(merged["metadata"], causes)
        if not isinstance(merged.get("spec", {}).get("unschedulable", False), bool):
            causes.append(("spec.unschedulable", "Invalid value: must be a boolean"))
        if merged["metadata"].get("name") != name:
            causes.append(("metadata.name", "Invalid value: field is immutable"))
        if causes:
            raise ApiError(
                422,
                "Invalid",
                f'Node "{name}" is invalid: ' + "; ".join(f"{f}: {m}" for f, m in causes),
                {"name": name, "kind": "Node"},
            )
        taints = [
            t
            for t in merged["spec"].get("taints", [])
            if t["key"] != "node.kubernetes.io/unschedulable"
        ]
        if merged["spec"].get("unschedulable"):
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        merged["spec"]["taints"] = taints
        merged["metadata"]["resourceVersion"] = self.fake.next_rv()
        self.fake.nodes[name] = merged
        self.fake.reconcile()
        return 200, merged

    def patched(self, obj, body, ctype):
        if ctype not in MERGE_PATCH:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an "
                f'unknown format ("{ctype}") - accepted media types include: '
                "application/merge-patch+json, application/strategic-merge-patch+json",
            )
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        return merge_patch(obj, body)

    def list_jobs(self, ns, query, **_):
        jobs = [j for (n, _), j in self.fake.jobs.items() if n == ns]
        return self.listing("JobList", "batch/v1", jobs, query)

    def list_pods(self, ns, query, **_):
        pods = [p for (n, _), p in self.fake.pods.items() if n == ns]
        return self.listing("PodList", "v1", pods, query)

    def get_job(self, ns, name, **_):
        if (ns, name) not in self.fake.jobs:
            raise not_found("jobs", name, "batch")
        return 200, self.fake.jobs[(ns, name)]

    def create_job(self, ns, body, **_):
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        if (body.get("apiVersion"), body.get("kind")) not in {("batch/v1", "Job"), (None, None)}:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data "
                f"({body.get('apiVersion')}) does not match the expected API "
                "version (batch/v1)",
            )
        if ns not in self.fake.namespaces:
            raise not_found("namespaces", ns)
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", ns) != ns:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not "
                "match the namespace sent on the request",
            )
        if causes := job_errors(body):
            raise invalid("jobs", "batch", meta.get("name") or "", causes)
        if (ns, meta["name"]) in self.fake.jobs:
            raise ApiError(
                409,
                "AlreadyExists",
                f'jobs.batch "{meta["name"]}" already exists',
                {"name": meta["name"], "group": "batch", "kind": "jobs"},
            )
        uid = str(uuid.uuid4())
        meta.update(
            namespace=ns,
            uid=uid,
            creationTimestamp=now(),
            generation=1,
            resourceVersion=self.fake.next_rv(),
        )
        spec = body["spec"]
        spec.setdefault("suspend", False)
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", spec["parallelism"])
        spec.setdefault("backoffLimit", 6)
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        body.update(apiVersion="batch/v1", kind="Job", status={})
        self.fake.jobs[(ns, meta["name"])] = body
        self.fake.reconcile()
        return 201, body

    def patch_job(self, ns, name, body, ctype, **_):
        job = self.get_job(ns, name)[1]
        merged = self.patched(job, body, ctype)
        causes = job_errors(merged)
        for field in ("selector", "completions"):
            if merged["spec"].get(field) != job["spec"].get(field):
                causes.append((f"spec.{field}", "Invalid value: field is immutable"))
        if merged["spec"]["template"] != job["spec"]["template"] and not (
            job["spec"].get("suspend") and merged["spec"].get("suspend")
        ):
            causes.append(("spec.template", "Invalid value: field is immutable"))
        if causes:
            raise invalid("jobs", "batch", name, causes)
        merged["metadata"]["resourceVersion"] = self.fake.next_rv()
        self.fake.jobs[(ns, name)] = merged
        self.fake.reconcile()
        return 200, merged

    def delete_job(self, ns, name, body, query, **_):
        job = self.get_job(ns, name)[1]
        policy = query.get("propagationPolicy") or (body or {}).get("propagationPolicy")
        if policy not in {None, "Orphan", "Background", "Foreground"}:
            raise ApiError(422, "Invalid", f'propagationPolicy: Unsupported value: "{policy}"')
        del self.fake.jobs[(ns, name)]
        for pod in self.fake.pods_of(name, ns):
            if policy in {"Background", "Foreground"}:
                del self.fake.pods[(ns, pod["metadata"]["name"])]
            else:  # batch/v1 Jobs orphan their pods by default: the classic leak
                pod["metadata"]["ownerReferences"] = []
        self.collect_dependents(ns, job["metadata"]["uid"], policy in {"Background", "Foreground"})
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": "batch",
                "kind": "jobs",
                "uid": job["metadata"]["uid"],
            },
        }

    def collect_dependents(self, ns, uid, delete: bool) -> None:
        """The garbage collector, for the NetworkPolicies a Job owns: deleted with it, or
        orphaned (their owner reference dropped) when the Job's dependents are orphaned."""
        for key, policy in list(self.fake.network_policies.items()):
            owners = policy["metadata"].get("ownerReferences") or []
            if key[0] != ns or not any(o.get("uid") == uid for o in owners):
                continue
            if delete:
                del self.fake.network_policies[key]
            else:
                policy["metadata"]["ownerReferences"] = [o for o in owners if o["uid"] != uid]

    def list_policies(self, ns, query, **_):
        policies = [p for (n, _), p in self.fake.network_policies.items() if n == ns]
        return self.listing("NetworkPolicyList", "networking.k8s.io/v1", policies, query)

    def get_policy(self, ns, name, **_):
        if (ns, name) not in self.fake.network_policies:
            raise not_found("networkpolicies", name, "networking.k8s.io")
        return 200, self.fake.network_policies[(ns, name)]

    def create_policy(self, ns, body, **_):
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        if (body.get("apiVersion"), body.get("kind")) not in {
            ("networking.k8s.io/v1", "NetworkPolicy"),
            (None, None),
        }:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) does not match the "
                "expected API version (networking.k8s.io/v1)",
            )
        if ns not in self.fake.namespaces:
            raise not_found("namespaces", ns)
        meta = body.setdefault("metadata", {})
        if meta.get("namespace", ns) != ns:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not "
                "match the namespace sent on the request",
            )
        if causes := policy_errors(body):
            raise invalid("networkpolicies", "networking.k8s.io", meta.get("name") or "", causes)
        if (ns, meta["name"]) in self.fake.network_policies:
            raise ApiError(
                409,
                "AlreadyExists",
                f'networkpolicies.networking.k8s.io "{meta["name"]}" already exists',
                {"name": meta["name"], "group": "networking.k8s.io", "kind": "networkpolicies"},
            )
        meta.update(
            namespace=ns,
            uid=str(uuid.uuid4()),
            creationTimestamp=now(),
            generation=1,
            resourceVersion=self.fake.next_rv(),
        )
        body.update(apiVersion="networking.k8s.io/v1", kind="NetworkPolicy")
        self.fake.network_policies[(ns, meta["name"])] = body
        return 201, body

    def delete_policy(self, ns, name, **_):
        policy = self.get_policy(ns, name)[1]
        del self.fake.network_policies[(ns, name)]
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": "networking.k8s.io",
                "kind": "networkpolicies",
                "uid": policy["metadata"]["uid"],
            },
        }
