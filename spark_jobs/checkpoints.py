"""How a query writes its checkpoint, chosen by where the checkpoint lives.

Spark writes each checkpoint file (the offset and commit logs, the state stores'
changelogs and snapshots, the file sink's log) as a temporary file renamed into place,
through Hadoop. By default it uses Hadoop's `FileContext` API. On a local file system
without Hadoop's native library (PySpark ships none), that API starts a process for each
check and permission change: `readlink` for the rename's checks of both paths, `chmod` for
each file and its `.crc`. In `make spark-bench` that was about 16 processes a second, each
taking 15-20 ms of the query's own thread or of its tasks; the receiver's offset and commit
log writes took 74-144 and 83-103 ms a micro-batch, 25 and 23 ms without them (JFR's
process events and the queries' progress, 2026-11-30).

A query whose checkpoint, and file sink output if it has one (the sink's own log is written
by the same manager), are on the local file system is started with Spark's
`FileSystemBasedCheckpointFileManager`: the same temporary file, renamed into place with
rename(2), after the same check that the target does not exist (on a local file system
`FileContext` makes that check in the same non-atomic way, by `readlink`; neither stops two
processes writing one checkpoint at the same instant, which Spark does not support on any
file system). Files keep their `.crc`. A path is local when Hadoop resolves it to `file:`
(a path without a scheme against `fs.defaultFS`, as Spark does). Any other file system
(HDFS, object stores) keeps Spark's choice, and so does a session whose settings or Hadoop
configuration (`spark.hadoop.*`, `core-site.xml`) name a manager, and a Spark Connect
session (the server resolves its paths).

The setting is applied around the query's start only: Spark copies the session's settings
into the query's own session then, so other queries of the session are not affected.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spark_jobs.session import is_connect

CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def choose(schemes: list[str], configured: str | None) -> str | None:
    """The manager to start a query with (pure): `LOCAL_MANAGER` when every path it writes
    resolves to `file:` and no manager is configured, else None (Spark's choice)."""
    if configured or not schemes or any(scheme != "file" for scheme in schemes):
        return None
    return LOCAL_MANAGER


def _resolved(spark: Any, paths: list[str]) -> tuple[list[str], str | None] | None:
    """Each path's scheme as Hadoop resolves it for this session, and the manager its
    Hadoop configuration names (None if none); None under Spark Connect."""
    if is_connect(spark):
        return None
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    hadoop_fs = spark.sparkContext._jvm.org.apache.hadoop.fs
    default = hadoop_fs.FileSystem.getDefaultUri(conf).getScheme()
    schemes = [hadoop_fs.Path(p).toUri().getScheme() or default for p in paths]
    return [str(s).lower() for s in schemes], conf.get(CHECKPOINT_MANAGER_CONF)


@contextmanager
def manager_for(spark: Any, checkpoint: str, *written: str) -> Iterator[str | None]:
    """Around a query's start: the checkpoint manager for a query with `checkpoint` (and
    `written`: its file sink's output) set on the session (yields the class set, or None
    when Spark's choice stands), the session's own value restored after."""
    resolved = _resolved(spark, [checkpoint, *written])
    manager = choose(*resolved) if resolved is not None else None
    if manager is None:
        yield None
        return
    spark.conf.set(CHECKPOINT_MANAGER_CONF, manager)
    try:
        yield manager
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_CONF)
