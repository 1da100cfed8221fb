"""A local fake of the Kubernetes HTTP API: just the part the Allot adapter uses.

No API server can run in CI, so the adapter is tested against this: a real HTTP server on
127.0.0.1 (stdlib ``http.server`` in a thread) that the official client talks to unmodified.
It is strict where the real API server is strict, because a fake that accepts anything proves
nothing: malformed names, non-integer GPU quantities, missing containers, unknown patch content
types, duplicate names and unknown objects come back as the same ``Status`` bodies and codes a
kube-apiserver sends. It also plays the Job controller and the scheduler in a few lines: an
unsuspended Job gets Running pods on the nodes its required affinity allows (one per node when
it carries pod anti-affinity, never past a node's allocatable GPUs, never on a cordoned node),
suspending deletes them, and ``complete_job``/``fail_job`` finish a Job as the kubelet would.

Outages: ``outage = "503"`` answers every request with 503, ``"hang"`` never answers (the client
times out), ``"drop"`` closes the connection without a response; ``stop()`` refuses connections.
``kubelet_paused`` leaves bound pods unstarted (an image pull) until ``start_pods``.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUANTITY = re.compile(
    r"^[+]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage"}
MERGE_PATCH = {"application/merge-patch+json", "application/strategic-merge-patch+json"}
GPU = "nvidia.com/gpu"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def body(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def not_found(kind: str, name: str, group: str = "") -> ApiError:
    resource = f"{kind}.{group}" if group else kind
    return ApiError(
        404,
        "NotFound",
        f'{resource} "{name}" not found',
        {"name": name, "group": group, "kind": kind},
    )


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    text = "; ".join(f"{field}: {msg}" for field, msg in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind}.{group} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes
            ],
        },
    )


# -- validation
def qualified_name_errors(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return True
    return not name or len(name) > 63 or not LABEL_VALUE.match(name)


def meta_errors(meta: dict, causes: list, path: str = "metadata") -> None:
    for key, value in (meta.get("labels") or {}).items():
        if qualified_name_errors(key):
            causes.append((f"{path}.labels", f'Invalid value: "{key}": invalid label key'))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            causes.append(
                (
                    f"{path}.labels",
                    f'Invalid value: "{value}": a valid label must be '
                    "63 characters or less, alphanumeric, '-', '_' or '.'",
                )
            )
    for key in meta.get("annotations") or {}:
        if qualified_name_errors(key):
            causes.append((f"{path}.annotations", f'Invalid value: "{key}": invalid key'))


def resource_errors(resources: dict, path: str, causes: list) -> None:
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    for kind, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            where = f"{path}.{kind}[{name}]"
            if name not in STANDARD_RESOURCES and "/" not in name:
                causes.append(
                    (where, "Invalid value: must be a standard resource type or fully qualified")
                )
            elif not isinstance(value, str | int) or not QUANTITY.match(str(value)):
                causes.append(
                    (
                        where,
                        f'Invalid value: "{value}": quantities must match the regular expression',
                    )
                )
            elif "/" in name and not re.fullmatch(r"\d+", str(value)):
                causes.append((where, f'Invalid value: "{value}": must be an integer'))
    for name, value in requests.items():
        if "/" in name and name not in limits:
            causes.append(
                (
                    f"{path}.limits",
                    "Required value: Limit must be set for non overcommitable resources",
                )
            )
        elif "/" in name and str(limits[name]) != str(value):
            causes.append(
                (
                    f"{path}.requests[{name}]",
                    f'Invalid value: "{value}": must be equal to {name} limit of {limits[name]}',
                )
            )


def affinity_errors(affinity: dict, path: str, causes: list) -> None:
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return
    terms = required.get("nodeSelectorTerms")
    if not terms:
        causes.append(
            (
                f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ".nodeSelectorTerms",
                "Required value: must have at least one term",
            )
        )
    for term in terms or []:
        for expr in term.get("matchExpressions") or []:
            op, values = expr.get("operator"), expr.get("values") or []
            if op not in {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}:
                causes.append((f"{path}.nodeAffinity", f'Unsupported value: "{op}"'))
            elif op in {"In", "NotIn"} and not values:
                causes.append(
                    (
                        f"{path}.nodeAffinity",
                        "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                    )
                )


def job_errors(job: dict) -> list[tuple[str, str]]:
    causes: list[tuple[str, str]] = []
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    name = meta.get("name")
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    elif len(name) > 63 or not DNS_LABEL.match(name):
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 label '
                "must consist of lower case alphanumeric characters or '-', and must "
                "start and end with an alphanumeric character (at most 63 characters)",
            )
        )
    meta_errors(meta, causes)
    for field in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append((f"spec.{field}", f"Invalid value: {value!r}: must be >= 0"))
    if not isinstance(spec.get("suspend", False), bool):
        causes.append(("spec.suspend", "Invalid value: must be a boolean"))
    template = spec.get("template") or {}
    meta_errors(template.get("metadata") or {}, causes, "spec.template.metadata")
    pod = template.get("spec") or {}
    if pod.get("restartPolicy") not in {"Never", "OnFailure"}:
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                'Required value: valid values: "OnFailure", "Never"',
            )
        )
    containers = pod.get("containers") or []
    if not containers:
        causes.append(("spec.template.spec.containers", "Required value"))
    for i, container in enumerate(containers):
        path = f"spec.template.spec.containers[{i}]"
        if not DNS_LABEL.match(container.get("name") or ""):
            causes.append((f"{path}.name", "Required value: a valid RFC 1123 label"))
        if not container.get("image"):
            causes.append((f"{path}.image", "Required value"))
        resource_errors(container.get("resources") or {}, f"{path}.resources", causes)
        for j, var in enumerate(container.get("env") or []):
            if not ENV_NAME.match(str(var.get("name") or "")):
                causes.append(
                    (
                        f"{path}.env[{j}].name",
                        f'Invalid value: "{var.get("name")}": a valid environment variable '
                        "name must consist of alphabetic characters, digits, '_', '-', or '.', "
                        "and must not start with a digit",
                    )
                )
    affinity_errors(pod.get("affinity") or {}, "spec.template.spec.affinity", causes)
    return causes


# -- label selectors and merge patches
def parse_selector(text: str):
    """Kubernetes label-selector syntax: a=b, a==b, a!=b, a, !a, a in (x,y), a notin (x,y)."""
    checks = []
    for req in re.split(r",(?![^()]*\))", text or ""):
        req = req.strip()
        if not req:
            continue
        if m := re.fullmatch(r"(!?)([\w./-]+)", req):
            neg, key = m.groups()
            checks.append(lambda labels, k=key, n=bool(neg): (k in labels) != n)
        elif m := re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)", req):
            key, op, value = m.groups()
            checks.append(lambda labels, k=key, v=value, n=(op == "!="): (labels.get(k) == v) != n)
        elif m := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", req):
            key, op, values = m.groups()
            wanted = {v.strip() for v in values.split(",")}
            checks.append(
                lambda labels, k=key, w=wanted, n=(op == "notin"): (labels.get(k) in w) != n
            )
        else:
            raise ApiError(400, "BadRequest", f'unable to parse requirement: "{req}"')
    return lambda labels: all(check(labels or {}) for check in checks)


def merge_patch(target, patch):
    """RFC 7386. Strategic merge behaves the same for the scalar and map fields used here."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def node_matches(node: dict, term: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    for expr in term.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def finished(job: dict) -> bool:
    return any(
        c["type"] in {"Complete", "Failed"} and c["status"] == "True"
        for c in job.get("status", {}).get("conditions", [])
    )


class FakeKubernetes:
    """The API server's state plus a tiny Job controller and scheduler."""

    def __init__(self, namespaces=("allot", "allot-jobs"), token: str | None = None):
        self.namespaces = set(namespaces)
        self.token = token
        self.nodes: dict[str, dict] = {}
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.requests: list[dict] = []
        self.outage: str | None = None
        self.kubelet_paused = False  # pods stay bound but unstarted until start_pods()
        self.lock = threading.RLock()
        self.release = threading.Event()
        self._rv = 0
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> FakeKubernetes:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # -- test helpers -----------------------------------------------------------------------------
    def add_node(
        self,
        name,
        gpus=8,
        gpu_type="NVIDIA-H100-80GB-HBM3",
        unschedulable=False,
        ready=True,
        label="nvidia.com/gpu.product",
        labels=None,
    ) -> dict:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid4()),
                "resourceVersion": self.next_rv(),
                "creationTimestamp": now(),
                "annotations": {},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    **({label: gpu_type} if gpu_type else {}),
                    **(labels or {}),
                },
            },
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", GPU: str(gpus)},
                "allocatable": {"cpu": "63", "memory": "500Gi", GPU: str(gpus)},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "NodeNotReady",
                    }
                ],
            },
        }
        with self.lock:
            self.nodes[name] = node
        return node

    def job(self, name: str, namespace: str = "allot-jobs") -> dict:
        return self.jobs[(namespace, name)]

    def pods_of(self, name: str, namespace: str = "allot-jobs") -> list[dict]:
        with self.lock:
            return sorted(
                (
                    p
                    for (ns, _), p in self.pods.items()
                    if ns == namespace and p["metadata"]["labels"].get("job-name") == name
                ),
                key=lambda p: p["metadata"]["name"],
            )

    def complete_job(self, name: str, namespace: str = "allot-jobs") -> None:
        self._finish(name, namespace, "Complete", exit_code=0)

    def fail_job(self, name: str, exit_code: int = 1, namespace: str = "allot-jobs") -> None:
        self._finish(name, namespace, "Failed", exit_code=exit_code)

    def _finish(self, name, namespace, condition, exit_code):
        with self.lock:
            job, pods = self.job(name, namespace), self.pods_of(name, namespace)
            for pod in pods:
                pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
                for cs in pod["status"].get("containerStatuses", []):
                    cs["state"] = {
                        "terminated": {
                            "exitCode": exit_code,
                            "finishedAt": now(),
                            "reason": "Completed" if not exit_code else "Error",
                        }
                    }
            status = job["status"]
            status["active"], status["ready"] = 0, 0
            status["succeeded" if condition == "Complete" else "failed"] = len(pods) or 1
            status["completionTime"] = now()
            reason = "CompletionsReached" if condition == "Complete" else "BackoffLimitExceeded"
            status.setdefault("conditions", []).append(
                {
                    "type": condition,
                    "status": "True",
                    "reason": reason,
                    "message": "Reached expected number of succeeded pods"
                    if condition == "Complete"
                    else "Job has reached the specified backoff limit",
                    "lastTransitionTime": now(),
                }
            )

    # -- the controller and scheduler -------------------------------------------------------------
    def reconcile(self) -> None:
        for job in list(self.jobs.values()):
            self._reconcile_job(job)
        for pod in self.pods.values():
            if pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName"):
                self._schedule(pod)

    def _set_condition(self, job, kind, status, reason):
        conditions = job["status"].setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != kind]
        conditions.append(
            {"type": kind, "status": status, "reason": reason, "lastTransitionTime": now()}
        )

    def _reconcile_job(self, job) -> None:
        meta, spec, status = job["metadata"], job["spec"], job.setdefault("status", {})
        ns, name = meta["namespace"], meta["name"]
        if finished(job):
            return
        pods = self.pods_of(name, ns)
        if spec.get("suspend"):
            for pod in pods:
                del self.pods[(ns, pod["metadata"]["name"])]
            status["active"], status["ready"] = 0, 0
            status.pop("startTime", None)
            self._set_condition(job, "Suspended", "True", "JobSuspended")
            return
        if any(
            c["type"] == "Suspended" and c["status"] == "True" for c in status.get("conditions", [])
        ):
            self._set_condition(job, "Suspended", "False", "JobResumed")
        status.setdefault("startTime", now())
        for index in range(len(pods), spec.get("parallelism", 1)):
            pod = self._new_pod(job, index)
            self.pods[(ns, pod["metadata"]["name"])] = pod
            self._schedule(pod)
        pods = self.pods_of(name, ns)
        status["active"] = len(pods)
        status["ready"] = sum(p["status"]["phase"] == "Running" for p in pods)

    def _new_pod(self, job, index) -> dict:
        meta, template = job["metadata"], job["spec"]["template"]
        labels = {
            **(template.get("metadata", {}).get("labels") or {}),
            "job-name": meta["name"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-completion-index": str(index),
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{index}-{secrets.token_hex(3)[:5]}",
                "namespace": meta["namespace"],
                "uid": str(uuid.uuid4()),
                "labels": labels,
                "creationTimestamp": now(),
                "resourceVersion": self.next_rv(),
                "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(template["spec"]),
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
        }

    def _gpu_request(self, pod) -> int:
        return sum(
            int((c.get("resources") or {}).get("limits", {}).get(GPU, 0))
            for c in pod["spec"]["containers"]
        )

    def _schedule(self, pod) -> None:
        """Bind to the first node the required affinity allows that is schedulable, has the
        GPUs free and holds no pod the anti-affinity excludes."""
        affinity = pod["spec"].get("affinity") or {}
        terms = (
            (affinity.get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or [{}]
        anti = (affinity.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        bound = [
            p
            for p in self.pods.values()
            if p["spec"].get("nodeName") and p["status"]["phase"] in {"Pending", "Running"}
        ]
        for name in sorted(self.nodes):
            node = self.nodes[name]
            if node["spec"].get("unschedulable") or not any(node_matches(node, t) for t in terms):
                continue
            here = [p for p in bound if p["spec"]["nodeName"] == name]
            free = int(node["status"]["allocatable"].get(GPU, "0")) - sum(
                self._gpu_request(p) for p in here
            )
            if free < self._gpu_request(pod):
                continue
            if any(
                parse_selector(
                    ",".join(f"{k}={v}" for k, v in term["labelSelector"]["matchLabels"].items())
                )(p["metadata"]["labels"])
                for term in anti
                for p in here
            ):
                continue
            pod["spec"]["nodeName"] = name
            if self.kubelet_paused:  # bound, but the kubelet has not taken it up yet
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                return
            self._run_pod(pod)
            return

    def _run_pod(self, pod) -> None:
        """What the kubelet reports once it has started a bound pod."""
        pod["status"] = {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "startTime": now(),
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now()}},
                }
                for c in pod["spec"]["containers"]
            ],
        }

    def start_pods(self, name: str, namespace: str = "allot-jobs") -> None:
        """The kubelet (paused with ``kubelet_paused``) starts the bound pods of Job ``name``
        now, as after a slow image pull."""
        with self.lock:
            for pod in self.pods_of(name, namespace):
                if pod["spec"].get("nodeName") and not pod["status"].get("startTime"):
                    self._run_pod(pod)


# -- the HTTP half
JOBS = r"^/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs"
ROUTES = [
    (r"^/version$", {"GET": "version"}),
    (r"^/api/v1/nodes$", {"GET": "list_nodes"}),
    (r"^/api/v1/nodes/(?P<name>[^/]+)$", {"GET": "get_node", "PATCH": "patch_node"}),
    (JOBS + "$", {"GET": "list_jobs", "POST": "create_job"}),
    (JOBS + r"/(?P<name>[^/]+)$", {"GET": "get_job", "PATCH": "patch_job", "DELETE": "delete_job"}),
    (r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$", {"GET": "list_pods"}),
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


# -- fixtures (import them into a test module to use them)
@pytest.fixture(name="fake_api")
def fake_api_fixture():
    """A running fake with three GPU nodes and one CPU-only node."""
    fake = FakeKubernetes().start()
    fake.add_node("gpu-01")
    fake.add_node("gpu-02")
    fake.add_node("gpu-03", gpus=4, gpu_type="NVIDIA-A100-SXM4-40GB")
    fake.add_node("cpu-01", gpus=0, gpu_type="")
    yield fake
    fake.stop()
