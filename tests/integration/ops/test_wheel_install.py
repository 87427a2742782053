"""The wheel is the product: `make dist` builds it, and installed alone into a fresh virtual
environment outside the checkout it carries every file the package opens at run time and
runs the router against the stack.

The environment is made once for the module (`installed`): the wheel and the sdist built by
`make dist` into a temporary folder, a new venv of the same Python, the wheel installed
there by pip (its dependencies from the package index, through pip's cache). Everything
then runs from a temporary working directory with a clean environment (PATH to that venv
and the system, a HOME of its own, the run's ROUTER_* variables): nothing of the checkout
is importable, so a file the wheel lacks fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from router.contract import schemas
from router.contract.events import ABANDONED_GROUP
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.paths import ROOT

pytestmark = pytest.mark.slow

DIST_NAME = "kafka-order-router"
SOURCE_SKIP = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}

# Run by the installed Python: one group of four with its final, then a group that never
# ends (one message, a 1 s lifetime) for the sweeper to abandon. Open groups are recorded in
# Redis (`sender_id`), as a sender that resumes after a crash does.
SEND_SCRIPT = """\
import json, sys
import router
from router.sender import Sender

a = json.loads(sys.argv[1])
conf = {"bootstrap.servers": a["bootstrap"]}
with Sender(
    conf, a["topology"], sender_id=a["sender_id"], state=a["redis_url"], state_prefix=a["prefix"]
) as sender:
    for i, value in enumerate(a["values"]):
        sender.send(value.encode(), guarantee_id=a["gid"], final=i == len(a["values"]) - 1)
    sender.send(b"left open", guarantee_id=a["orphan"], ttl_ms=1000)
print(json.dumps({"router": router.__file__}))
"""

# What the installed package is: where it lives, where it reads its schemas, its files.
INSPECT_SCRIPT = """\
import json
from importlib.metadata import files, version
import router
from router.contract import schemas

print(json.dumps({
    "router": router.__file__,
    "version": version("kafka-order-router"),
    "schema_dir": str(schemas.schema_dir()),
    "schemas": schemas.names(),
    "files": sorted(str(f) for f in files("kafka-order-router") or []),
}))
"""


@dataclass(frozen=True)
class Installed:
    venv: Path
    workdir: Path  # outside the checkout: where every installed command runs
    env: dict[str, str]  # clean: no PYTHONPATH, no VIRTUAL_ENV, nothing of the checkout
    wheel: Path

    @property
    def router(self) -> Path:
        return self.venv / "bin" / "router"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *args: str | Path, timeout: float = 60) -> str:
        done = subprocess.run(
            [str(a) for a in args],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stderr}"
        return done.stdout


def _outside_env() -> dict[str, str]:
    """This process's environment (proxies, pip's settings and cache) without anything that
    would make the checkout or this venv importable."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _checked(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> None:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(ROOT), "the wheel must be tried outside the checkout"
    dist, venv, workdir, home = base / "dist", base / "venv", base / "work", base / "home"
    workdir.mkdir()
    home.mkdir()
    env = _outside_env()
    _checked(["make", "-s", "-C", str(ROOT), "dist", f"DIST={dist}"], workdir, env, 600)
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1, sorted(p.name for p in dist.iterdir())
    assert sorted(dist.glob("*.tar.gz")), "make dist builds the sdist too"
    _checked([sys.executable, "-m", "venv", str(venv)], workdir, env, 300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheels[0])]
    _checked(pip, workdir, env, 600)
    clean = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(base),
    }
    return Installed(venv, workdir, clean, wheels[0])


def _project_version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version: str = project["version"]
    return version


def _source_files() -> set[str]:
    """What the wheel must carry, from the source tree: every file of the two packages
    (modules, Lua scripts, the console page, py.typed, ...) and every file of schemas/,
    which the wheel maps to router/_schemas/ (pyproject.toml's force-include)."""
    wanted: set[str] = set()
    for package in ("router", "spark_jobs"):
        for path in (ROOT / package).rglob("*"):
            rel = path.relative_to(ROOT)
            if path.is_file() and not SOURCE_SKIP & set(rel.parts) and path.suffix != ".pyc":
                wanted.add(rel.as_posix())
    for path in (ROOT / "schemas").rglob("*"):
        if path.is_file():
            wanted.add(f"router/_schemas/{path.relative_to(ROOT / 'schemas').as_posix()}")
    return wanted


def _repository_assets() -> set[str]:
    """Every .lua and .avsc of the repository and the console's assets: each must be in
    `_source_files()` (a script or schema added elsewhere would be missed by the wheel)."""
    skip = {".venv", ".cache", ".stack", ".results", ".git", "tests", *SOURCE_SKIP}
    found: set[str] = set()
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip]
        rel = Path(folder).relative_to(ROOT)
        found |= {(rel / n).as_posix() for n in names if n.endswith((".lua", ".avsc"))}
    console = ROOT / "router" / "console"
    found |= {
        p.relative_to(ROOT).as_posix() for p in console.rglob("*") if p.is_file() and p.suffix
    }
    return {
        f"router/_schemas/{a.removeprefix('schemas/')}" if a.startswith("schemas/") else a
        for a in found
        if not a.endswith((".py", ".pyc"))
    }


def test_the_installed_wheel_carries_every_file_it_needs(installed: Installed) -> None:
    info = json.loads(installed.run(installed.python, "-c", INSPECT_SCRIPT))
    site = installed.venv.resolve()
    assert Path(info["router"]).resolve().is_relative_to(site), info["router"]
    assert Path(info["schema_dir"]).resolve().is_relative_to(site), info["schema_dir"]
    assert info["version"] == _project_version()

    wanted = _source_files()
    assets = _repository_assets()
    # Not vacuous: the tree has Lua scripts, schemas and the console page.
    assert {Path(a).suffix for a in assets} >= {".lua", ".avsc", ".html"}, assets
    assert assets <= wanted, f"outside what the wheel ships: {sorted(assets - wanted)}"
    missing = wanted - set(info["files"])
    assert not missing, f"not in the installed package: {sorted(missing)}"
    # The schemas the router loads, from the installed copy: every one of schemas/.
    assert set(info["schemas"]) == set(schemas.names())

    help_text = installed.run(installed.router, "--help")
    for command in ("send-unit", "receive-unit", "sweeper", "topics"):
        assert command in help_text, help_text
    assert installed.run(installed.router, "--version").split()[-1] == _project_version()


def _read_queues(bootstrap: str, queues: list[str], want: set[bytes]) -> dict[bytes, tuple]:
    """value -> (queue, offset) of the records whose values are in `want`, read_committed
    from the start of every receive queue, until all of them came (at most 60 s)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("wheel-read"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(q, 0, 0) for q in queues])
    seen: dict[bytes, tuple] = {}

    def all_came() -> bool:
        for m in consumer.consume(100, 0.2):
            if m.error() is None and m.value() in want:
                assert m.value() not in seen, f"{m.value()!r} twice"
                seen[m.value()] = (m.topic(), m.offset())
        return seen.keys() == want

    try:
        wait_until(
            all_came, 60, f"{len(want)} records on the receive queues", report=lambda: f"{seen}"
        )
    finally:
        consumer.close()
    return seen


def _abandoned(bootstrap: str, topic: str, gid: str) -> list[dict[str, object]]:
    """The AbandonedGroup events of `gid` (one per side), decoded with the checkout's schema:
    what the installed sweeper wrote with the installed one."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wheel-events")})
    consumer.assign([TopicPartition(topic, 0, 0)])
    events: list[dict[str, object]] = []

    def both_sides() -> bool:
        m = consumer.poll(0.2)
        if (
            m is not None
            and m.error() is None
            and dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == ABANDONED_GROUP.encode()
        ):
            event = schemas.decode(ABANDONED_GROUP, m.value())
            if event["guarantee_id"] == gid:
                events.append(event)
        return len(events) >= 2

    try:
        wait_until(both_sides, 60, f"the sweeper's abandoned-group events for {gid}")
    finally:
        consumer.close()
    return events


def test_units_and_sweeper_from_the_wheel_route_a_group(
    installed: Installed, pipeline: PipelineFactory, redis_prefix: str, redis_url: str
) -> None:
    spec = PipelineSpec(
        send_units=1,
        receive_units=1,
        sweepers=1,
        send_queues=1,
        send_queue_partitions=1,
        transfer_partitions=2,
        receive_queues=2,
        extra_env={"ROUTER_REDIS__KEY_PREFIX": redis_prefix, "ROUTER_SWEEPER__INTERVAL_MS": "200"},
    )
    # The installed console script, from outside the checkout, in the clean environment
    # (the pipeline fixture stops the processes, fails on a crash and deletes the topics).
    p = pipeline(
        spec, command=[str(installed.router)], cwd=installed.workdir, base_env=installed.env
    )
    s = p.settings
    gid, orphan = unique("order"), unique("left-open")
    values = [f"{gid} line {i}" for i in range(4)]
    sent = installed.run(
        installed.python,
        "-c",
        SEND_SCRIPT,
        json.dumps(
            {
                "bootstrap": s.kafka.bootstrap_servers,
                "redis_url": redis_url,
                "prefix": redis_prefix,
                "topology": s.topology.name,
                "sender_id": unique("wheel-sender"),
                "gid": gid,
                "orphan": orphan,
                "values": values,
            }
        ),
    )
    assert Path(json.loads(sent)["router"]).resolve().is_relative_to(installed.venv.resolve())

    arrived = _read_queues(
        s.kafka.bootstrap_servers, list(s.topology.receive_queues), {v.encode() for v in values}
    )
    places = [arrived[v.encode()] for v in values]
    assert len({queue for queue, _ in places}) == 1, places  # one destination
    offsets = [offset for _, offset in places]
    assert offsets == sorted(offsets), places  # in the order sent

    events = _abandoned(s.kafka.bootstrap_servers, s.topology.events_topic, orphan)
    assert {e["side"] for e in events} == {"SEND", "RECEIVE"}
    assert all(e["ttl_ms"] == 1000 and e["final_routed"] is False for e in events)
    assert not p.fleet.crashed()
    assert [proc.alive for proc in p.fleet.procs] == [True] * 3
