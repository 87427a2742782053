"""The SparkSession of a job: master, connector jars from the local cache, small defaults.

The Kafka connector and Avro jars come from `.cache/jars/spark-<pyspark version>/`, which
`make jars` (`ops/stack.sh fetch-jars`) fills from Maven Central; nothing is downloaded
when a job starts (`spark.jars`, never `spark.jars.packages`).

Launched from Python (`router spark ...`, `python -m spark_jobs.sender`), the session
starts its own JVM with those jars. Launched by `spark-submit`, the JVM already runs:
pass the jars with `--jars "$(router spark jars)"` and the master with `--master`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.connect.session import SparkSession as RemoteSession

from router.config import load_settings
from spark_jobs.api import ROCKSDB_PROVIDER, STATE_PROVIDER_CONF

DEFAULT_CACHE = Path(__file__).resolve().parent.parent / ".cache"


@dataclass(frozen=True)
class SparkOptions:
    master: str | None = None  # None: spark-submit's --master, else local[*]
    app_name: str = "router-spark"
    shuffle_partitions: int = 2
    driver_memory: str = "1g"
    ui: bool = False
    jars_dir: Path | None = None
    conf: dict[str, str] = field(default_factory=dict)
    # A Spark Connect server (`sc://host:port`): the job is its client. The server has
    # the jars, the master and the cluster settings; the session's SQL settings are set
    # from here as for a local session.
    remote: str | None = None


def jars_dir(explicit: Path | None = None) -> Path:
    """Where the connector jars for the installed pyspark are cached."""
    if explicit is not None:
        return explicit

    cache = Path(os.environ.get("ROUTER_CACHE_DIR") or DEFAULT_CACHE)
    return cache / "jars" / f"spark-{pyspark.__version__}"


def connector_jars(directory: Path | None = None) -> list[str]:
    """The jar files of spark-sql-kafka-0-10 (with its dependencies) and spark-avro."""
    where = jars_dir(directory)
    jars = sorted(str(p) for p in where.glob("*.jar"))
    names = " ".join(Path(j).name for j in jars)
    if not jars or "spark-sql-kafka-0-10" not in names or "spark-avro" not in names:
        raise FileNotFoundError(
            f"Spark's Kafka connector and Avro jars are not in {where}: run `make jars` "
            "(ops/stack.sh fetch-jars) once, or point --jars-dir at them"
        )
    return jars


def launched_by_spark_submit() -> bool:
    """spark-submit starts the JVM first and tells PySpark where it listens."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


# Settings a Spark Connect client may set on its session (the others are the server's).
_SESSION_SETTINGS = (
    "spark.sql.shuffle.partitions",
    "spark.sql.session.timeZone",
    "spark.sql.adaptive.enabled",
    "spark.sql.streaming.metricsEnabled",
    STATE_PROVIDER_CONF,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
)


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect client session (no JVM of ours to call)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _settings(options: SparkOptions) -> dict[str, str]:
    return {
        "spark.sql.shuffle.partitions": str(options.shuffle_partitions),
        "spark.ui.enabled": "true" if options.ui else "false",
        "spark.sql.session.timeZone": "UTC",
        # Micro-batches of a stateful query run one after another; AQE does not apply.
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # State off the JVM heap (RocksDB), each micro-batch's changes checkpointed as a
        # changelog rather than a full snapshot (issue 16, item 3). A query keeps the
        # provider its checkpoint was started with; `transformWithState` needs RocksDB.
        STATE_PROVIDER_CONF: ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        **options.conf,
        # Pinned, whatever `conf` says: `api.to_router_rows` has one task write a whole
        # group in order; a speculative copy of that task would write the group again,
        # interleaved with the first attempt's messages.
        "spark.speculation": "false",
    }


def _connect_session(options: SparkOptions) -> Any:
    """A Spark Connect client session: the session's SQL settings are set from here;
    the server's own (jars, master, `spark.speculation`, which must be `false` there too)
    are the server's. Checks what it can: a server with speculation on is refused."""
    spark = RemoteSession.builder.remote(options.remote).getOrCreate()
    settings = _settings(options)
    for key in (*_SESSION_SETTINGS, *options.conf):
        spark.conf.set(key, settings[key])
    if spark.conf.get("spark.speculation", "false").lower() != "false":
        raise RuntimeError(
            f"the Spark Connect server at {options.remote} runs with spark.speculation on: "
            "a speculative copy of a sender task would write a group twice; start the "
            "server with --conf spark.speculation=false"
        )
    return spark


def build_session(options: SparkOptions) -> Any:
    """A SparkSession for a streaming job (or the tests' shared one); with
    `options.remote`, a Spark Connect client session."""
    if options.remote:
        return _connect_session(options)
    builder = SparkSession.builder.appName(options.app_name)
    if options.master:
        builder = builder.master(options.master)
    if not launched_by_spark_submit():
        # The JVM starts now: give it the cached jars, and local Python workers this
        # interpreter (PySpark's default is whatever `python3` is on PATH).
        builder = builder.config("spark.jars", ",".join(connector_jars(options.jars_dir)))
        builder = builder.config("spark.driver.memory", options.driver_memory)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in _settings(options).items():
        builder = builder.config(key, value)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ROUTER_SPARK_LOG_LEVEL", "WARN"))
    # Noise, silenced: to_avro warns on every task that a nullable column meets a non-null
    # Avro field (the sender only encodes records it validated); transformWithState's
    # state server warns on every `get` of a key with no state yet, that is on every new
    # group (39,000 lines in one make spark-bench run); the trigger warns on every
    # micro-batch slower than its interval (175 lines in one run): counted instead, and
    # summarised in one line when the job stops (`progress.Progress`).
    jvm = spark.sparkContext._jvm
    for quiet in (
        "org.apache.spark.sql.avro.AvroSerializer",
        "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer",
        "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    ):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            quiet, jvm.org.apache.logging.log4j.Level.ERROR
        )
    return spark


# ---------------------------------------------------------------------- shared CLI


def key_values(pairs: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{what} must be KEY=VALUE, not {pair!r}")
        out[key] = value
    return out


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Spark")
    g.add_argument(
        "--master",
        help="Spark master URL, e.g. spark://host:7077 or yarn (default: spark-submit's "
        "--master, else local[*])",
    )
    g.add_argument(
        "--remote",
        default=os.environ.get("SPARK_REMOTE") or None,
        help="Run as a client of this Spark Connect server, e.g. sc://host:15002 "
        "(default: $SPARK_REMOTE; the server holds the connector jars and the master)",
    )
    g.add_argument("--shuffle-partitions", type=int, default=2, help="(default: %(default)s)")
    g.add_argument("--driver-memory", default="1g", help="(default: %(default)s)")
    g.add_argument("--ui", action="store_true", help="Enable the Spark UI.")
    g.add_argument(
        "--jars-dir",
        type=Path,
        help="Connector jars (default: .cache/jars/spark-<pyspark version>/, see make jars)",
    )
    g.add_argument(
        "--spark-conf",
        action="append",
        metavar="KEY=VALUE",
        help="Any other Spark setting; repeatable.",
    )
    g.add_argument(
        "--stop-file",
        help="Stop cleanly (between micro-batches) once this path exists (any Hadoop path; "
        "for jobs on a cluster). SIGTERM or SIGINT to the driver does the same.",
    )


def spark_options(args: argparse.Namespace, app_name: str) -> SparkOptions:
    return SparkOptions(
        master=args.master,
        app_name=app_name,
        shuffle_partitions=args.shuffle_partitions,
        driver_memory=args.driver_memory,
        ui=args.ui,
        jars_dir=args.jars_dir,
        conf=key_values(args.spark_conf, "--spark-conf"),
        remote=args.remote,
    )


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Kafka and the router's topology")
    g.add_argument(
        "--config",
        type=Path,
        default=None,
        help="Router TOML configuration (default: $ROUTER_CONFIG); ROUTER_* variables "
        "override it, as for every router command.",
    )
    g.add_argument(
        "--bootstrap-servers",
        help="Kafka bootstrap servers (default: the router's kafka.bootstrap_servers)",
    )
    g.add_argument(
        "--topology",
        help="Topology name the queue names derive from (default: the router's topology.name)",
    )
    g.add_argument(
        "--kafka-option",
        action="append",
        metavar="KEY=VALUE",
        help="A Kafka client property for Spark's connector (Java client names, e.g. "
        "max.poll.records=500); repeatable. No secrets: security comes from the router's "
        "settings (kafka.client_config, ROUTER_KAFKA__SASL_PASSWORD or "
        "kafka.sasl_password_file), which the jobs pass to the connector.",
    )


def router_settings(args: argparse.Namespace) -> Any:
    """The router's settings (file, ROUTER_* variables), with the job's overrides."""
    overrides: dict[str, Any] = {}
    if args.bootstrap_servers:
        overrides["kafka"] = {"bootstrap_servers": args.bootstrap_servers}
    if args.topology:
        overrides["topology"] = {"name": args.topology}
    return load_settings(args.config, **overrides)


# Java client properties that hold a secret: never on a command line (ps, shell history,
# Spark's UI show it). They come from the router's settings: ROUTER_KAFKA__SASL_PASSWORD
# or kafka.sasl_password_file.
SECRET_OPTIONS = ("sasl.jaas.config", "password", "ssl.key.pem", "secret")

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def security_options(kafka: Any) -> dict[str, str]:
    """The router's Kafka security settings (librdkafka names, `router.config.KafkaSettings`)
    as Spark's Kafka connector takes them (Java client names, `kafka.`-prefixed): the
    protocol, the SASL mechanism and login (password from the settings: environment or
    secret file), and the CA file as a PEM trust store."""
    common = kafka.common()
    out: dict[str, str] = {}
    for key in ("security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm"):
        if key in common:
            out[f"kafka.{key}"] = str(common[key])
    if "ssl.ca.location" in common:
        out["kafka.ssl.truststore.type"] = "PEM"
        out["kafka.ssl.truststore.location"] = str(common["ssl.ca.location"])
    user, password = common.get("sasl.username"), common.get("sasl.password")
    if user is not None and password is not None:
        mechanism = str(common.get("sasl.mechanism", "PLAIN")).upper()
        module = LOGIN_MODULES.get(mechanism)
        if module is None:
            raise ValueError(f"the Spark jobs cannot log in with SASL mechanism {mechanism}")

        def quote(v: object) -> str:
            return str(v).replace("\\", "\\\\").replace('"', '\\"')

        out["kafka.sasl.jaas.config"] = (
            f'{module} required username="{quote(user)}" password="{quote(password)}";'
        )
    return out


def kafka_options(kafka: Any, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Options of Spark's Kafka source and sink (`kafka.`-prefixed client properties):
    the bootstrap servers and security of the router's Kafka settings (or just bootstrap
    servers, given as a string), then `extra` (from --kafka-option: no secrets)."""
    if isinstance(kafka, str):
        options = {"kafka.bootstrap.servers": kafka}
    else:
        options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, **security_options(kafka)}
    for key, value in (extra or {}).items():
        if any(word in key.lower() for word in SECRET_OPTIONS):
            raise argparse.ArgumentTypeError(
                f"--kafka-option {key}=... would put a secret on the command line: set "
                "kafka.client_config (sasl.username, sasl.mechanism, security.protocol) and "
                "ROUTER_KAFKA__SASL_PASSWORD or kafka.sasl_password_file instead"
            )
        options[key if key.startswith("kafka.") else f"kafka.{key}"] = value
    return options
