"""Stand-ins speaking Prometheus's protocols, on free ports in threads:

- ``QueryApi``: the HTTP query API (``/api/v1/query``) answering the two DCGM queries of
  scheduling/telemetry.py from a table the test sets (``readings``), as a Prometheus holding
  the exporter's series would; ``down=True`` answers 503.
- ``DcgmExporter``: what NVIDIA's dcgm-exporter serves at ``/metrics`` (text format, one
  ``DCGM_FI_DEV_GPU_UTIL`` series per GPU with ``gpu``, ``UUID``, ``Hostname`` and the job's
  ``hpc_job`` or ``pod``/``namespace``/``container`` labels), for a real Prometheus to scrape.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class _Server:
    def __init__(self):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                status, content_type, body = owner.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, path: str) -> tuple[int, str, bytes]:
        raise NotImplementedError


class QueryApi(_Server):
    def __init__(self):
        self.readings: dict[str, dict[str, float]] = {"hpc_job": {}, "pod": {}}  # 0–100
        self.down = False
        self.queries: list[str] = []
        super().__init__()

    def answer(self, path):
        url = urlparse(path)
        if self.down:
            return 503, "text/plain", b"service unavailable"
        if url.path != "/api/v1/query":
            return 404, "text/plain", b"not found"
        promql = parse_qs(url.query)["query"][0]
        self.queries.append(promql)
        label = "hpc_job" if "by (hpc_job)" in promql else "pod"
        result = [
            {"metric": {label: key}, "value": [1764583200.0, str(value)]}
            for key, value in self.readings[label].items()
        ]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", json.dumps(body).encode()


class DcgmExporter(_Server):
    def __init__(self):
        self.gpus: list[dict] = []  # {"hpc_job": "...", "util": 3} or {"pod": ..., "util": ...}
        super().__init__()

    def answer(self, path):
        if urlparse(path).path != "/metrics":
            return 404, "text/plain", b"not found"
        lines = [
            "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        ]
        for index, gpu in enumerate(self.gpus):
            labels = {
                "gpu": str(index),
                "UUID": f"GPU-{index:08d}-0000-0000-0000-000000000000",
                "device": f"nvidia{index}",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": gpu.get("host", "node-00"),
                "DCGM_FI_DRIVER_VERSION": "550.54.15",
            }
            if "hpc_job" in gpu:
                labels["hpc_job"] = gpu["hpc_job"]
            if "pod" in gpu:
                labels |= {"pod": gpu["pod"], "namespace": "research", "container": "main"}
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{text}}} {gpu['util']}")
        return 200, "text/plain; version=0.0.4", ("\n".join(lines) + "\n").encode()
