"""How a query writes its checkpoint, chosen by where the checkpoint lives.

Spark writes each checkpoint file (the offset and commit logs, the state stores'
changelogs and snapshots, the file sink's log) as a temporary file renamed into place,
through Hadoop. By default it uses Hadoop's `FileContext` API. On a local file system
without Hadoop's native library (PySpark ships none), that API starts a process for each
check and permission change: `readlink` for the rename's checks of both paths, `chmod` for
each file and its `.crc`. In `make spark-bench` that was about 16 processes a second, each
taking 15-20 ms of the query's own thread or of its tasks: a third of the receiver's
micro-batch outside `addBatch` (JFR's process events, 2026-11-30).

For a local checkpoint (a path with no scheme, or `file:`) a query is started with Spark's
`FileSystemBasedCheckpointFileManager`: the same temporary file, renamed into place with
rename(2), after the same check that the target does not exist (on a local file system
`FileContext` makes that check in the same non-atomic way, by `readlink`; neither stops two
processes writing one checkpoint at the same instant, which Spark does not support on any
file system). Files keep their `.crc`. Any other scheme (HDFS, object stores) keeps
Spark's choice, and so does a session that sets `CHECKPOINT_MANAGER_CONF` itself.

The setting is applied around the query's start only: Spark copies the session's settings
into the query's own session then, so other queries of the session are not affected.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def is_local(path: str) -> bool:
    """Whether a checkpoint path is on the local file system: no scheme, or `file:`."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file")


@contextmanager
def manager_for(spark: Any, checkpoint: str) -> Iterator[str | None]:
    """Around a query's start: the checkpoint manager for `checkpoint` set on the session
    (yields the class set, or None when Spark's choice stands), the session's own value
    restored after."""
    if not is_local(checkpoint) or spark.conf.get(CHECKPOINT_MANAGER_CONF, None):
        yield None
        return
    spark.conf.set(CHECKPOINT_MANAGER_CONF, LOCAL_MANAGER)
    try:
        yield LOCAL_MANAGER
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_CONF)
