"""Test harness: where the servers are, and per-test isolation on a shared stack.

`ROUTER_STACK` chooses the servers:
  local     (default) the project's own stack (ops/stack.sh: Kafka from Maven Central jars,
            Redis from Debian), started once per session, reused if it already answers;
  docker    the kafka and redis services of docker-compose.yml (reused if they already
            answer on the Docker host's 9092 and 6379, else started through pytest-docker);
  external  addresses from ROUTER_KAFKA__BOOTSTRAP_SERVERS and ROUTER_REDIS__URL.

Every test isolates itself: topics get unique names, Redis keys a unique prefix, consumer
groups unique IDs, so tests can run against a stack that other things also use.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.stack.localstack import LocalStack
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stack.toxiproxy import Toxiproxy, ToxiproxyMissing
from ops.harness.stack.toxiproxy import ensure_binary as ensure_toxiproxy
from router.backends.redis import client as redisclient
from router.config import KafkaSettings, RedisSettings, RouterSettings
from router.topology.side import table_for
from router.topology.topics import ensure_topics, plan
from tests.fixtures.factories import PipelineFactory, TopicFactory, TopologyFactory
from tests.fixtures.helpers import SLOW_TEARDOWNS, killing, said_if_slow, unique, wait_until
from tests.fixtures.paths import ROOT


def pytest_configure(config: pytest.Config) -> None:
    """Run every test on a clock that booted a second ago, as on CI's fresh machines:
    `time.monotonic()` counts from boot there, so code that takes 0.0 for "long ago"
    (a timestamp initialised to 0) misbehaves on fresh machines only. Shifting the clock
    in this process makes such code fail on every machine. Differences of monotonic
    readings are unchanged; libraries that captured the function at import keep theirs.
    Set ROUTER_TEST_REAL_CLOCK=1 to run on the real clock."""
    if os.environ.get("ROUTER_TEST_REAL_CLOCK"):
        return
    real = time.monotonic
    boot = real() - 1.0

    def fresh_boot_monotonic() -> float:
        return real() - boot

    time.monotonic = fresh_boot_monotonic


STACK_SCRIPT = ROOT / "ops" / "stack.sh"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Session fixtures' slow teardowns (`tests.fixtures.helpers.said_if_slow`)."""
    for line in SLOW_TEARDOWNS:
        terminalreporter.write_line(line)


_quiet = logging.getLogger("tests.quiet-librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


@dataclass(frozen=True)
class Stack:
    kafka_bootstrap: str
    redis_url: str


def kafka_answers(bootstrap: str, timeout: float = 3.0) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet})
    try:
        admin.list_topics(timeout=timeout)
    except Exception:
        return False
    return True


def redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def _local_stack() -> Iterator[Stack]:
    env = dict(os.environ)
    out = subprocess.run(
        [str(STACK_SCRIPT), "env"], check=True, capture_output=True, text=True, env=env
    ).stdout
    addresses = dict(line.split("=", 1) for line in out.split())
    stack = Stack(addresses["ROUTER_KAFKA__BOOTSTRAP_SERVERS"], addresses["ROUTER_REDIS__URL"])
    started = False
    if not (kafka_answers(stack.kafka_bootstrap) and redis_answers(stack.redis_url)):
        proc = subprocess.run(
            [str(STACK_SCRIPT), "up"], capture_output=True, text=True, env=env, check=False
        )
        if proc.returncode != 0:
            pytest.exit(f"could not start the local stack:\n{proc.stdout}\n{proc.stderr}", 3)
        started = True
    yield stack
    if started and not os.environ.get("ROUTER_KEEP_STACK"):
        with said_if_slow("the local stack (ops/stack.sh down)"):
            subprocess.run([str(STACK_SCRIPT), "down"], check=False, capture_output=True)


def _external_stack() -> Iterator[Stack]:
    try:
        stack = Stack(
            os.environ["ROUTER_KAFKA__BOOTSTRAP_SERVERS"], os.environ["ROUTER_REDIS__URL"]
        )
    except KeyError as missing:
        pytest.exit(f"ROUTER_STACK=external needs {missing.args[0]} to be set", 3)
    yield stack


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(ROOT / "docker-compose.yml")


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    """Only the servers: the router services of docker-compose.yml are not the tests'."""
    return ["up -d --wait kafka redis"]


def _docker_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    host = request.getfixturevalue("docker_ip")
    running = Stack(f"{host}:9092", f"redis://{host}:6379/0")
    if kafka_answers(running.kafka_bootstrap) and redis_answers(running.redis_url):
        # `make stack-up` or `docker compose up -d` already runs them: use them, leave them be.
        yield running
        return
    services = request.getfixturevalue("docker_services")
    stack = Stack(
        f"{host}:{services.port_for('kafka', 9092)}",
        f"redis://{host}:{services.port_for('redis', 6379)}/0",
    )
    services.wait_until_responsive(
        check=lambda: kafka_answers(stack.kafka_bootstrap) and redis_answers(stack.redis_url),
        timeout=120.0,
        pause=0.5,
    )
    yield stack


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    mode = os.environ.get("ROUTER_STACK", "local")
    if mode == "local":
        yield from _local_stack()
    elif mode == "external":
        yield from _external_stack()
    elif mode == "docker":
        yield from _docker_stack(request)
    else:
        pytest.exit(f"ROUTER_STACK must be local, docker or external, not {mode!r}", 3)


@pytest.fixture(scope="session")
def kafka_bootstrap(stack: Stack) -> str:
    return stack.kafka_bootstrap


@pytest.fixture(scope="session")
def redis_url(stack: Stack) -> str:
    return stack.redis_url


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def new_topic(admin: AdminClient) -> Iterator[TopicFactory]:
    """Create uniquely named topics for one test; deleted afterwards."""
    created: list[str] = []

    def make(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique(prefix)
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=30)
        created.append(name)

        def visible() -> bool:
            meta = admin.list_topics(name, timeout=5).topics.get(name)
            return bool(
                meta
                and meta.error is None
                and len(meta.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in meta.partitions.values())
            )

        wait_until(visible, 30, f"topic {name} in metadata, every partition with a leader")
        return name

    yield make
    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception as exc:  # leave no test failing on clean-up; say so
                logging.getLogger(__name__).warning("could not delete test topic: %s", exc)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def redis_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A unique key prefix for one test; its keys are removed afterwards."""
    prefix = unique("test")
    yield prefix
    keys = list(redis_client.scan_iter(match=f"*{prefix}*", count=1000))
    if keys:
        redis_client.unlink(*keys)


@pytest.fixture
def group_id() -> str:
    return unique("group")


@pytest.fixture
def base_settings(kafka_bootstrap: str, redis_url: str) -> RouterSettings:
    """Settings pointing at the test stack (topology names come from each test)."""
    return RouterSettings(
        kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
        redis=RedisSettings(url=redis_url, key_prefix="router-test"),
    )


@pytest.fixture
def pipeline(base_settings: RouterSettings, tmp_path: Path) -> Iterator[PipelineFactory]:
    """Start whole topologies (unit processes) for one test; stopped and deleted after."""
    started: list[Pipeline] = []

    def make(spec: PipelineSpec | None = None, start: bool = True, **kwargs: object) -> Pipeline:
        p = Pipeline(
            base_settings,
            spec or PipelineSpec(),
            tmp_path / f"pipeline-{len(started)}",
            name=unique("rt"),
            **kwargs,  # type: ignore[arg-type]
        )
        started.append(p)
        if start:
            p.start()
        return p

    yield make
    for p in started:
        codes = p.stop()
        p.cleanup()
        crashed = {n: c for n, c in codes.items() if c not in (0, -9)}
        if crashed:
            logs = "\n".join(f"--- {x.name}\n{x.tail(30)}" for x in p.fleet.procs)
            pytest.fail(f"router processes exited badly: {crashed}\n{logs}")


@pytest.fixture
def topology(base_settings: RouterSettings, admin: AdminClient) -> Iterator[TopologyFactory]:
    """Settings for a fresh topology with its topics created (no unit processes);
    topics and tables are deleted afterwards. Keyword arguments replace whole sections:
    topology=dict(...), routing=dict(...), sweeper=dict(...), unit=dict(...)."""
    made: list[RouterSettings] = []

    def make(**sections: dict[str, object]) -> RouterSettings:
        topo = {"name": unique("topo"), **sections.pop("topology", {})}
        data = {**base_settings.model_dump(), "topology": topo, **sections}
        data["kafka"] = base_settings.kafka
        settings = RouterSettings.model_validate(data)
        ensure_topics(settings, admin)
        made.append(settings)
        return settings

    yield make
    for settings in made:
        client = redisclient.redis_client(settings.redis)
        for side in ("send", "receive"):
            table_for(settings, side, client).drop()  # type: ignore[arg-type]
        names = [spec.name for spec in plan(settings)]
        for future in admin.delete_topics(names, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception as exc:
                logging.getLogger(__name__).warning("could not delete test topic: %s", exc)


@pytest.fixture(scope="session")
def private_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A Kafka + Redis of this session's own (own ports and data), which tests may stop and
    restart without disturbing the shared stack. Only with ROUTER_STACK=local."""
    if os.environ.get("ROUTER_STACK", "local") != "local":
        pytest.skip("stopping and restarting servers needs the project's own local stack")
    # Its broker has listeners for 5 units' own fault proxies (tests/integration/netfaults).
    stack = LocalStack.private(STACK_SCRIPT, tmp_path_factory.mktemp("private-stack"), unit_links=5)
    stack.up()
    yield stack
    with said_if_slow("the private stack"), killing():
        stack.down()


@pytest.fixture
def toxiproxy(tmp_path: Path) -> Iterator[Toxiproxy]:
    """A Toxiproxy server of the test's own (ops/toxiproxy.sh builds it with Go, once; the
    network faults); the test skips, saying why, where it cannot be built."""
    try:
        ensure_toxiproxy()
    except ToxiproxyMissing as exc:
        pytest.skip(f"Toxiproxy cannot be built here (ops/toxiproxy.sh ensure): {exc}")
    with Toxiproxy.start(tmp_path / "toxiproxy") as tp:
        yield tp


@pytest.fixture
def private_settings(private_stack: LocalStack) -> RouterSettings:
    return RouterSettings(
        kafka=KafkaSettings(bootstrap_servers=private_stack.bootstrap),
        redis=RedisSettings(url=private_stack.redis_url, key_prefix="router-test"),
    )
