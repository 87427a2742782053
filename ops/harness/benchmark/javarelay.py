"""The native baseline (ops/java/Relay.java): compiled with `javac` against the
kafka-clients jar the stack caches (ops/stack.sh fetch-jars), run as a process of a
pipeline's fleet beside the router's own, on the same topics and consumer group as the
Python raw relay of that side (`router.unit.relay.relay_spec`).

    classes = build()                      # once; again only when the source changed
    proc = start(pipeline, "send")         # a Proc in pipeline.fleet: stopped with it
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ops.harness.stack.fleet import Proc
from ops.harness.stack.pipeline import Pipeline
from router.table.store.management import Side
from router.topology.side import side_spec
from router.unit.relay import relay_spec

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "ops" / "java" / "Relay.java"
HEAP = "256m"
# The JVM's options; ROUTER_BENCH_JVM_OPTS (space-separated) replaces them (and
# ROUTER_BENCH_JAVA_ARGS adds arguments to the relay's, e.g. "--consumer.fetch.max.wait.ms
# 10": experiments, never the reported baseline). C1 only
# (TieredStopAtLevel=1): a bench stage lasts seconds, and C2's compilations would be most
# of the JVM's CPU in them (measured at 50,000 1 KB messages: 38 CPU s per million and
# 20,500 msg/s with C2, 15 and 39,900 with C1 only). A long-running service pays C2 once
# and then runs a little faster than this, so the baseline's CPU is, if anything, high.
JVM_OPTS = (f"-Xmx{HEAP}", "-Xms64m", "-XX:TieredStopAtLevel=1")


def jvm_opts() -> list[str]:
    given = os.environ.get("ROUTER_BENCH_JVM_OPTS")
    return given.split() if given is not None else list(JVM_OPTS)


def jar_dir() -> Path:
    """Where ops/stack.sh keeps the Kafka jars (same variables, same defaults)."""
    cache = Path(os.environ.get("ROUTER_CACHE_DIR", ROOT / ".cache"))
    return cache / "jars" / f"kafka-{os.environ.get('ROUTER_KAFKA_VERSION', '4.1.2')}"


def classpath(classes: Path) -> str:
    return f"{jar_dir()}/*{os.pathsep}{classes}"


def build() -> Path:
    """Compile Relay.java (if the class is missing or older than its source); the folder
    of the compiled class. Clear errors when javac or the jars are missing."""
    jars = jar_dir()
    if not (jars / f"kafka-clients-{jars.name.removeprefix('kafka-')}.jar").exists():
        raise RuntimeError(
            f"no kafka-clients jar in {jars}: run `ops/stack.sh fetch-jars` (or `make jars`)"
        )
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac (a JDK, 17 or newer) is needed for the Java relay stages")
    out = jars.parent.parent / "java" / f"relay-{jars.name}"
    built = out / "Relay.class"
    if built.exists() and built.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [javac, "-Xlint:all", "-Werror", "-d", str(out), "-cp", f"{jars}/*", str(SOURCE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"javac {SOURCE.name} failed:\n{done.stdout}{done.stderr}")
    return out


def command(p: Pipeline, side: Side, classes: Path) -> list[str]:
    """The relay for one side of the pipeline's topology: its sources, its destinations
    (send side: the transfer partitions; receive side: the receive queues), and the
    Python relay's consumer group and Kafka settings."""
    s = side_spec(p.settings, side)
    k = p.settings.kafka
    targets = ",".join(f"{t}:{q}" for t, q in (s.target(d) for d in s.destinations))
    return [
        "java",
        *jvm_opts(),
        "-cp",
        classpath(classes),
        "Relay",
        "--bootstrap",
        k.bootstrap_servers,
        "--group",
        relay_spec(s).group_id,
        "--sources",
        ",".join(s.sources),
        "--targets",
        targets,
        "--max-poll",  # the Python stages' largest batch (they grow to it under a backlog)
        str(max(p.settings.unit.batch_size, p.settings.unit.max_batch_size)),
        "--linger-ms",
        str(k.linger_ms),
        "--compression",
        k.compression_type,
        "--transaction-timeout-ms",
        str(k.transaction_timeout_ms),
        "--group-protocol",
        k.group_protocol,
        *os.environ.get("ROUTER_BENCH_JAVA_ARGS", "").split(),
    ]


def start(p: Pipeline, side: Side, classes: Path, count: int = 1) -> list[Proc]:
    """`count` Java relays for `side`, added to the pipeline's fleet (so `p.stop()`
    stops them with SIGTERM, and their exit codes count like any process's)."""
    fleet = p.fleet
    role = f"{side}-java-relay"
    procs = []
    for _ in range(count):
        index = sum(1 for x in fleet.procs if x.role == role) + 1
        log_path = fleet.log_dir / f"{role}-{index}.log"
        log_file = log_path.open("ab")
        popen = subprocess.Popen(
            command(p, side, classes),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        proc = Proc(role, index, popen, log_path, log_file)
        fleet.procs.append(proc)
        procs.append(proc)
    return procs
