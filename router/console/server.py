"""`router console`: the live status page, served by the standard library's HTTP server.

`/` is one HTML page (`console.html`, a package resource: inline CSS and a little vanilla
JavaScript that fetches `/api/status` every 2 s and redraws, its plots inline SVG);
`/api/status?q=<guarantee ID>&limit=N&offset=N` is the JSON document
`router.console.view.status` builds from both sides' tables, the processes' published
counters and the console's own history of them (`router.console.history`: a point per
refresh, the last 10 minutes). Reads only: the page changes nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import redis

from router.backends.redis.client import RedisClient, redis_client
from router.config.settings import RouterSettings
from router.console import figures
from router.console.history import History
from router.console.paging import FIRST_PAGE, Query
from router.console.snapshot import Sample, SideSnapshot, rates
from router.console.view import status
from router.metrics.registry import read_all
from router.table import view as tableview
from router.topology import cells
from router.topology.side import table_for

log = logging.getLogger("router.console")

SIDES = ("send", "receive")
RATE_WINDOW_S = 1.0  # throughput is measured over at least this long, when it can be
KEEP_S = 30.0  # counter samples older than this are forgotten (the history keeps figures)


def page() -> bytes:
    return resources.files("router.console").joinpath("console.html").read_bytes()


class Console:
    """Reads the tables and counters; keeps recent counter samples for throughput."""

    def __init__(self, settings: RouterSettings, client: RedisClient | None = None) -> None:
        self.settings = settings
        self.client = client or redis_client(settings.redis)
        self._samples: deque[Sample] = deque()
        self.history = History()
        self._lock = threading.Lock()

    def snapshot(self, side: str) -> SideSnapshot:
        """One side's tables, every cell's together (`router.topology.cells`: their
        destinations and groups are disjoint; their counters add up)."""
        tables = [
            table_for(self.settings, side, self.client, c)  # type: ignore[arg-type]
            for c in cells.all_cells(self.settings)
        ]
        now = tables[0].now_ms()
        views, dests, draining, admitted = [], [], set(), {}
        room: dict[str, int] = {}
        stats: dict[str, int] = {}
        for t in tables:
            cell_room = t.room()  # the room read once: it may hold 10,000 groups
            views += [tableview.view(side, g, e, now, cell_room) for g, e in t.entries().items()]
            dests += t.destinations
            draining |= t.draining()
            room.update(cell_room)
            admitted.update(t.admitted())
            for name, n in t.stats().items():
                stats[name] = stats.get(name, 0) + n
        return SideSnapshot(
            side, tuple(dests), views, sorted(draining), stats, room, admitted, now,
        )  # fmt: skip

    def sample(self) -> tuple[Sample, Sample | None]:
        """A new counter sample and the one to measure throughput against: the newest
        at least RATE_WINDOW_S older, else the oldest kept (None if there is none)."""
        s = self.settings
        cur = Sample(time.monotonic(), read_all(self.client, s.redis.key_prefix, s.topology.name))
        with self._lock:
            while self._samples and cur.at - self._samples[0].at > KEEP_S:
                self._samples.popleft()
            older = [x for x in self._samples if cur.at - x.at >= RATE_WINDOW_S]
            prev = older[-1] if older else (self._samples[0] if self._samples else None)
            self._samples.append(cur)
        return cur, prev

    def status(self, q: Query = FIRST_PAGE) -> dict[str, Any]:
        cur, prev = self.sample()
        sides = [self.snapshot(side) for side in SIDES]
        throughput = rates(prev, cur)
        with self._lock:
            self.history.add(cur.at, figures.point(sides, cur, throughput))
            return status(
                self.settings.topology.name, sides, cur, throughput, self.history, cur.at, q
            )


def handler(console: Console) -> type[BaseHTTPRequestHandler]:
    body = page()

    class Handler(BaseHTTPRequestHandler):
        server_version = "router-console"

        def _send(self, code: int, ctype: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path, _, params = self.path.partition("?")
            if path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", body)
            elif path == "/api/status":
                try:
                    code, data = 200, console.status(Query.of(parse_qs(params)))
                except redis.RedisError as exc:  # Redis away: say so, the page retries
                    log.warning("could not read the tables: %s", exc)
                    code, data = 503, {"errors": [f"Redis: {exc}"]}
                self._send(code, "application/json", json.dumps(data).encode())
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found\n")

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler


def serve(
    settings: RouterSettings,
    host: str,
    port: int,
    stop: threading.Event,
    on_ready: Callable[[str], None] = lambda _: None,
) -> None:
    """Serve until `stop` is set; `on_ready` gets the page's URL (the real port if 0)."""
    server = ThreadingHTTPServer((host, port), handler(Console(settings)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="console-http", daemon=True)
    thread.start()
    try:
        on_ready(f"http://{host}:{server.server_address[1]}/")
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
