"""A Toxiproxy server of a run's own (ops/toxiproxy.sh builds it) on a free port of 127.0.0.1,
and its HTTP API: TCP proxies, and the toxics that break them (no data through, latency, a
connection reset). `ops.harness.stack.netlinks` gives each unit its own proxies to Redis and
to the broker with it.

    with Toxiproxy.start(run_dir) as tp:          # ToxiproxyMissing if it cannot be built
        tp.proxy("redis-0", 127.0.0.1:free, "127.0.0.1:6379")
        tp.add_toxic("redis-0", "cut-down", "timeout", {"timeout": 0}, stream="downstream")
        tp.remove_toxic("redis-0", "cut-down")
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
from typing import Any, Literal

from ops.harness.stack.localstack import ROOT, free_port

SCRIPT = ROOT / "ops" / "toxiproxy.sh"

Stream = Literal["upstream", "downstream"]


class ToxiproxyMissing(RuntimeError):
    """Toxiproxy cannot be built here (no Go toolchain, or the build failed): the reason."""


def ensure_binary(timeout: float = 900.0) -> str:
    """The path of toxiproxy-server, built first if need be (ops/toxiproxy.sh ensure)."""
    try:
        proc = subprocess.run(
            [str(SCRIPT), "ensure"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ToxiproxyMissing(f"building toxiproxy took more than {timeout:.0f}s") from exc
    if proc.returncode != 0:
        raise ToxiproxyMissing(proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed")
    return proc.stdout.strip().splitlines()[-1]


class Toxiproxy:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.log = proc, log
        self.url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, run_dir: Path, ready_timeout: float = 30.0) -> Toxiproxy:
        binary = ensure_binary()
        run_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log = run_dir / "toxiproxy.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [binary, "-host", "127.0.0.1", "-port", str(port)],
                env={**os.environ, "LOG_LEVEL": "warn"},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        tp = cls(proc, port, log)
        deadline = time.monotonic() + ready_timeout
        try:
            while not tp.answers():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"toxiproxy did not come up:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)  # polling a server that is starting, bounded by the deadline
        except BaseException:
            tp.stop()
            raise
        return tp

    def __enter__(self) -> Toxiproxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"toxiproxy {method} {path}: {exc.code} {exc.read()!r}") from exc
        return json.loads(raw) if raw.strip() else None

    def answers(self) -> bool:
        try:
            self._call("GET", "/proxies")
            return True
        except (OSError, RuntimeError):
            return False

    def proxy(self, name: str, listen: str, upstream: str) -> None:
        """A TCP proxy `name` listening on `listen` (host:port), forwarding to `upstream`."""
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream})

    def add_toxic(
        self,
        proxy: str,
        name: str,
        kind: str,
        attributes: dict[str, int],
        stream: Stream = "downstream",
    ) -> None:
        """A toxic of type `kind` (timeout, latency, reset_peer, ...) on one direction of
        `proxy` (downstream: the server's answers; upstream: the client's requests)."""
        self._call(
            "POST",
            f"/proxies/{proxy}/toxics",
            {
                "name": name,
                "type": kind,
                "stream": stream,
                "toxicity": 1.0,
                "attributes": attributes,
            },
        )

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Removing a timeout or reset_peer toxic closes the connections it held."""
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def toxics(self, proxy: str) -> list[str]:
        return [str(t["name"]) for t in self._call("GET", f"/proxies/{proxy}/toxics")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
