"""The live status page (`router console`) in headless Chromium against a running pipeline:
the groups it shows, per side and destination, are the table's, and the waiting room's
group is listed as waiting. Saves a screenshot to .results/console/console.png.

Chromium and chromedriver are Debian's (`ops/chromium.sh ensure` installs them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.backends.redis.client import redis_client
from router.contract import headers_for
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import wait_until
from tests.fixtures.paths import ROOT
from tests.fixtures.queues import ONE_WAY

SCREENSHOT = ROOT / ".results" / "console" / "console.png"

# What the page shows: {side: {"groups": [[destination, guarantee ID], ...], "waiting": "..."}}
SHOWN_JS = """
const out = {};
if (document.body.dataset.loaded !== "1") return null;
for (const side of document.querySelectorAll("[data-side]")) {
  const groups = [];
  for (const dest of side.querySelectorAll("[data-destination]")) {
    for (const row of dest.querySelectorAll("tr[data-gid]")) {
      groups.push([dest.dataset.destination, row.dataset.gid]);
    }
  }
  out[side.dataset.side] = {groups: groups.sort(), text: side.innerText};
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
        assert "waiting: B" in page["send"]["text"], page["send"]["text"]
        assert "waiting: none" in page["receive"]["text"], page["receive"]["text"]

        def rates() -> list[str] | None:
            # The next refresh measures throughput against the first one's counters.
            cells = browser.execute_script(RATES_JS)
            return cells if cells and "\u2013" not in cells else None

        assert len(wait_until(rates, 30, "per-role throughput on the page", interval=0.2)) == 4
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(SCREENSHOT))
    finally:
        console.terminate()
        assert console.wait(15) == 0
