"""The live status page (`router console`) in headless Chromium. Against a running
pipeline: the groups it shows, per side and destination, are the table's, the waiting
room's group is listed as waiting, the cards at the top count them and their plots gain
points refresh after refresh (a screenshot for a reviewer: .results/console/console.png).
Against a table whose room holds 10,000 waiting groups: the page says so, shows the 50
oldest, finds one by its guarantee ID, and builds itself in under a second
(.results/console/console-10000.png).

Chromium and chromedriver are Debian's (`ops/chromium.sh ensure` installs them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.backends.redis.client import redis_client
from router.console.server import serve
from router.contract import headers_for
from router.metrics.prom import Gauges
from router.metrics.registry import Metrics
from router.table import room
from router.table.gauges import open_groups as table_gauges
from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory, TopologyFactory
from tests.fixtures.helpers import wait_until
from tests.fixtures.paths import ROOT
from tests.fixtures.queues import ONE_WAY

SCREENSHOT = ROOT / ".results" / "console" / "console.png"
SCREENSHOT_10K = ROOT / ".results" / "console" / "console-10000.png"
RENDER_BOUND_MS = 1_000.0  # issue 34: a page holding 10,000 waiting groups, in under a second

# The cards at the top of each side: {side: {card: [value, text, [points per plot line]]}}
CARDS_JS = """
const out = {};
if (!document.body.dataset.loaded) return null;
for (const side of document.querySelectorAll("[data-side]")) {
  const cards = {};
  for (const card of side.querySelectorAll("[data-card]")) {
    const lines = [...card.querySelectorAll("svg polyline")].map(
      l => l.getAttribute("points").trim().split(/\\s+/).length);
    cards[card.dataset.card] = [card.dataset.value, card.querySelector(".value").innerText, lines];
  }
  out[side.dataset.side] = cards;
}
return out;
"""

# The page's own timing of its last render (JSON parse, DOM build, layout), and when its
# first render ended, in ms since navigation start.
TIMES_JS = """
const d = document.body.dataset;
if (!d.loaded) return null;
return {render_ms: Number(d.renderMs), first_render_at: Number(d.firstRenderAt)};
"""

# The send side's waiting room as shown, read at once (the page redraws every 2 s).
ROOM_JS = """
const side = document.querySelector('[data-side="send"]');
if (!document.body.dataset.loaded || !side) return null;
const card = side.querySelector('[data-card="waiting"]');
return {
  caption: side.querySelector('[data-list="waiting"]').innerText,
  rows: [...side.querySelectorAll("tr[data-waiting]")].map(r => r.dataset.waiting),
  card: [card.dataset.value, card.innerText],
  role_lines: document.querySelectorAll(
    'tr[data-role="send-unit"] svg[data-plot="role:send-unit"] polyline').length,
};
"""

# What the page shows: {side: {"groups": [[destination, guarantee ID], ...], "waiting": "..."}}
SHOWN_JS = """
const out = {};
if (!document.body.dataset.loaded) return null;
for (const side of document.querySelectorAll("[data-side]")) {
  const groups = [];
  for (const dest of side.querySelectorAll("[data-destination]")) {
    for (const row of dest.querySelectorAll("tr[data-gid]")) {
      groups.push([dest.dataset.destination, row.dataset.gid]);
    }
  }
  const waiting = [...side.querySelectorAll("tr[data-waiting]")].map(r => r.dataset.waiting);
  out[side.dataset.side] = {groups: groups.sort(), waiting: waiting, text: side.innerText};
}
return out;
"""


# The send and receive units' in/s and out/s cells
RATES_JS = """
const cells = [];
for (const role of ["send-unit", "receive-unit"]) {
  const row = document.querySelector(`tr[data-role="${role}"]`);
  if (!row) return null;
  cells.push(row.cells[2].innerText, row.cells[3].innerText);
}
return cells;
"""


def chromium() -> tuple[str, str]:
    proc = subprocess.run(
        [str(ROOT / "ops" / "chromium.sh"), "ensure"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"Chromium could not be installed: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip(), "/usr/bin/chromedriver"


@pytest.fixture
def browser() -> Iterator[Any]:
    binary, driver_path = chromium()
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1100")
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def run_console(p: Pipeline) -> tuple[subprocess.Popen[str], str]:
    """`router console` on a free port with the pipeline's settings; its page's URL."""
    env = {**os.environ, **p.env, "ROUTER_CONFIG": str(p.fleet.config_file)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "router", "console", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "serving http://127.0.0.1:PORT/" (or an error and EOF)
    assert line.startswith("serving http://"), line + proc.stdout.read()
    return proc, line.split()[1]


def table_json(p: Pipeline) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "router", "table", "list", "--json"],
        env={**os.environ, **p.env, "ROUTER_CONFIG": str(p.fleet.config_file)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def test_the_status_page_shows_the_tables_groups(pipeline: PipelineFactory, browser: Any) -> None:
    two = {**ONE_WAY, "transfer_partitions": 2, "receive_queues": 2}
    p = pipeline(PipelineSpec(busy_policy="wait", **two))  # type: ignore[arg-type]
    s = p.settings
    a, b = s.topology.send_queues
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    # A and C open (no finals), one on each of the two destinations of each side; B finds
    # both busy and waits in the send side's room.
    producer.produce(a, b"A0", partition=0, headers=headers_for("A", seq=0))
    producer.produce(a, b"C0", partition=0, headers=headers_for("C", seq=0))
    producer.flush(10)
    client = redis_client(s.redis)
    send, receive = table_for(s, "send", client), table_for(s, "receive", client)
    wait_until(lambda: {"A", "C"} <= set(receive.entries()), 60, "A and C open on the receive side")
    producer.produce(b, b"B0", partition=0, headers=headers_for("B", seq=0))
    producer.flush(10)
    wait_until(lambda: "B" in send.room(), 60, "B waiting in the send side's room")

    table = table_json(p)
    expected = {
        side: sorted([e["destination"], e["guarantee_id"]] for e in table[side]["entries"])
        for side in ("send", "receive")
    }
    assert sorted(expected["send"])[0] == ["!", "B"], table
    assert sorted(g for _, g in expected["send"]) == ["A", "B", "C"], table
    assert sorted(g for _, g in expected["receive"]) == ["A", "C"], table

    console, url = run_console(p)
    try:
        browser.get(url)

        def shown() -> dict[str, Any] | None:
            page: dict[str, Any] | None = browser.execute_script(SHOWN_JS)
            if page and {k: v["groups"] for k, v in page.items()} == expected:
                return page
            return None

        page = wait_until(
            shown,
            30,
            "the page lists the table's groups",
            interval=0.2,
            report=lambda: json.dumps(browser.execute_script(SHOWN_JS)),
        )
        assert page["send"]["waiting"] == ["B"], page["send"]["text"]
        assert page["receive"]["waiting"] == [], page["receive"]["text"]

        def rates() -> list[str] | None:
            # The next refresh measures throughput against the first one's counters.
            cells = browser.execute_script(RATES_JS)
            return cells if cells and "\u2013" not in cells else None

        assert len(wait_until(rates, 30, "per-role throughput on the page", interval=0.2)) == 4

        seq = iter(range(1, 10_000))

        def plotted() -> dict[str, Any] | None:
            # Traffic for the throughput plots meanwhile: A and C go on (never final), so
            # what the tables hold stays as it is.
            n = next(seq)
            for gid in ("A", "C"):
                producer.produce(a, b"%s%d" % (gid.encode(), n), partition=0,
                                 headers=headers_for(gid, seq=n))  # fmt: skip
            producer.poll(0)
            # Every card's plot lines have four points or more (a point per refresh).
            page: dict[str, Any] | None = browser.execute_script(CARDS_JS)
            if not page:
                return None
            lines = [n for side in page.values() for c in side.values() for n in c[2]]
            return page if lines and min(lines) >= 4 else None

        page = wait_until(
            plotted,
            30,
            "every card of both sides plotted over four refreshes or more",
            interval=0.2,
            report=lambda: json.dumps(browser.execute_script(CARDS_JS)),
        )
        assert producer.flush(10) == 0
        send, receive = page["send"], page["receive"]
        counts = {"open": "2", "waiting": "1", "staged": "0", "dead_letters": "0"}
        assert {k: send[k][0] for k in counts} == counts, send
        assert {k: receive[k][0] for k in counts} == {**counts, "waiting": "0"}, receive
        assert float(send["oldest"][0]) > 0 and receive["oldest"][0] == "0", page
        assert send["oldest"][1].endswith(" s") and len(send["oldest"][2]) == 3, send  # p50, p90
        assert len(send["throughput"][2]) == 2, send  # in and out
        for side in (send, receive):  # the units publish their lag with their counters
            assert side["lag"][0] != "" and float(side["lag"][0]) >= 0, page
        assert set(send) == {
            "open", "waiting", "oldest", "staged", "dead_letters", "expiries", "throughput", "lag"
        }  # fmt: skip
        shown = browser.execute_script(ROOM_JS)
        assert shown["caption"].startswith("1 waiting; oldest "), shown
        assert shown["role_lines"] == 2, shown  # the send units' in/s and out/s plotted
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(SCREENSHOT))
        print(f"screenshot: {SCREENSHOT}")
    finally:
        console.terminate()
        assert console.wait(15) == 0


def fill_room(table: ManagementTable, lane: str, count: int) -> list[str]:
    """Every destination taken by a group of its own, then `count` groups waiting in the
    room, routed as a unit routes them (10,000 in 5 route calls of 2,000); their IDs,
    oldest first."""

    def request(gid: str, offset: int) -> RouteRequest:
        return RouteRequest(gid, False, 3_600_000, f"{lane}/{offset}", lane)

    dests = table.destinations
    opened = table.route([request(f"open-{i}", i) for i in range(len(dests))], batch="open")
    assert sorted(opened.decisions) == sorted(dests), opened
    table.settle("open", dests, [])
    gids = [f"g-{i:05}" for i in range(count)]
    parked = table.route([request(g, len(dests) + i) for i, g in enumerate(gids)], batch="fill")
    assert set(parked.decisions) == {room.WAIT}, set(parked.decisions)
    table.settle("fill", [], [])
    return gids


def test_a_page_holding_10000_waiting_groups_renders_in_under_a_second(
    topology: TopologyFactory, browser: Any
) -> None:
    s = topology(topology={"receive_units": 1})
    assert s.routing.busy_policy == "wait"
    table = table_for(s, "send", redis_client(s.redis))
    t0 = time.monotonic()
    gids = fill_room(table, f"{s.topology.send_queues[0]}/0", 10_000)
    filled = time.monotonic() - t0
    assert len(table.room()) == 10_000
    # The room's gauges, as the units and the sweeper refresh them for Prometheus.
    gauges = Gauges()
    table_gauges({"send": table}, Metrics())(gauges, True)
    assert gauges.values["room_waiting"] == {("send", "0"): 10_000.0}
    assert 0 <= gauges.values["room_oldest_wait_seconds"][("send", "0")] < 600

    stop = threading.Event()
    urls: list[str] = []
    server = threading.Thread(
        target=serve, args=(s, "127.0.0.1", 0, stop, urls.append), name="console", daemon=True
    )
    server.start()
    try:
        url = wait_until(lambda: urls[0] if urls else None, 30, "the console serving")
        t1 = time.monotonic()
        with urllib.request.urlopen(url + "api/status", timeout=60) as answer:
            assert answer.status == 200
            size = len(answer.read())
        status_s = time.monotonic() - t1
        browser.get(url)
        first = wait_until(
            lambda: browser.execute_script(TIMES_JS), 60, "the page's first render", interval=0.1
        )
        shown = browser.execute_script(ROOM_JS)
        assert shown["caption"].startswith("10,000 waiting; oldest "), shown["caption"]
        assert shown["caption"].endswith("; showing the 50 oldest"), shown["caption"]
        assert shown["rows"] == gids[:50], shown["rows"]
        assert shown["card"][0] == "10000" and "10,000" in shown["card"][1], shown["card"]
        SCREENSHOT_10K.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(SCREENSHOT_10K))

        # Searching by guarantee ID finds the youngest one, in a list of one.
        browser.find_element("css selector", "#search").send_keys(gids[-1])

        def found() -> dict[str, Any] | None:
            shown: dict[str, Any] | None = browser.execute_script(ROOM_JS)
            return shown if shown and shown["rows"] == [gids[-1]] else None

        shown = wait_until(found, 30, f"the search for {gids[-1]} alone", interval=0.1)
        assert f"10,000 waiting, 1 matching '{gids[-1]}'" in shown["caption"], shown
        searched = browser.execute_script(TIMES_JS)
    finally:
        stop.set()
        server.join(timeout=30)
    assert not server.is_alive()
    print(
        f"room filled with 10,000 waiting groups in {filled:.2f} s; /api/status "
        f"{size:,} bytes in {status_s:.2f} s; the page's render (parse, build, layout) "
        f"{first['render_ms']:.1f} ms, first render {first['first_render_at']:.0f} ms after "
        f"navigation start; after the search: {searched['render_ms']:.1f} ms; "
        f"screenshot: {SCREENSHOT_10K}"
    )
    assert first["render_ms"] < RENDER_BOUND_MS, first
