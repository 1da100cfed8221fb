"""What the fake Kubernetes API (tests/backends/k8s_fake.py) holds objects to: the names,
quantities, affinities and patches a kube-apiserver accepts, and the ``Status`` errors it
sends for the rest."""

from __future__ import annotations

import copy
import re
import time

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
