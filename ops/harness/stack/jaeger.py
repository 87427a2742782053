"""A Jaeger all-in-one of a run's own (ops/jaeger.sh builds it): OTLP/HTTP in, in-memory
storage, the query API, on free ports of 127.0.0.1; for the tracing test and `make bench`'s
tracing rows.

    with Jaeger.start(run_dir) as jaeger:       # JaegerMissing if it cannot be built
        env = {"ROUTER_TRACING__ENABLED": "true",
               "ROUTER_TRACING__OTLP_ENDPOINT": jaeger.otlp_endpoint}
        ... jaeger.trace(trace_id) ...          # the spans of one trace, or None
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from ops.harness.stack.localstack import ROOT, free_port

SCRIPT = ROOT / "ops" / "jaeger.sh"


class JaegerMissing(RuntimeError):
    """Jaeger cannot be built here (no Go toolchain, or the build failed): the reason."""


def ensure_binary(timeout: float = 1_800.0) -> str:
    """The path of the jaeger binary, built first if need be (ops/jaeger.sh ensure)."""
    try:
        proc = subprocess.run(
            [str(SCRIPT), "ensure"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise JaegerMissing(f"building jaeger took more than {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise JaegerMissing(proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed")
    return proc.stdout.strip().splitlines()[-1]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


class Jaeger:
    def __init__(self, proc: subprocess.Popen[bytes], otlp: int, query: int, log: Path) -> None:
        self.proc, self.log = proc, log
        self.otlp_endpoint = f"http://127.0.0.1:{otlp}"  # tracing.otlp_endpoint
        self.query_url = f"http://127.0.0.1:{query}"

    @classmethod
    def start(cls, run_dir: Path, ready_timeout: float = 60.0) -> Jaeger:
        binary = ensure_binary()
        run_dir.mkdir(parents=True, exist_ok=True)
        otlp, query, grpc = free_port(), free_port(), free_port()
        config = run_dir / "jaeger.yaml"
        config.write_text(
            subprocess.run(
                [str(SCRIPT), "config", str(otlp), str(query), str(grpc)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        log = run_dir / "jaeger.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [binary, "--config", str(config)],
                # Jaeger traces itself only if asked: never to a collector of ours, nor to
                # localhost:4317 (whose time-out would hold its stop for 10 s)
                env={**os.environ, "OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "none"},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        jaeger = cls(proc, otlp, query, log)
        deadline = time.monotonic() + ready_timeout
        while jaeger.services() is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                jaeger.stop()
                raise RuntimeError(f"jaeger did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)  # polling a server that is starting, bounded by the deadline
        return jaeger

    def __enter__(self) -> Jaeger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def services(self) -> list[str] | None:
        """The services that sent spans (None: the query API does not answer yet)."""
        status, body = _get(f"{self.query_url}/api/services")
        if status != 200:
            return None
        return list(json.loads(body).get("data") or [])

    def trace(self, trace_id: str) -> list[dict[str, Any]] | None:
        """The spans of one trace (hex ID), each with its process's service name as
        `service`; None while Jaeger does not have it."""
        status, body = _get(f"{self.query_url}/api/traces/{trace_id}")
        if status != 200:
            return None
        data = json.loads(body).get("data") or []
        if not data:
            return None
        processes = data[0].get("processes", {})
        spans: list[dict[str, Any]] = data[0].get("spans", [])
        for span in spans:
            span["service"] = processes.get(span.get("processID"), {}).get("serviceName")
        return spans

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
