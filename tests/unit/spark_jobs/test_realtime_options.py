"""The real-time sender's settings and command line, refused before any Spark starts."""

from __future__ import annotations

import pytest

from spark_jobs import realtime, sender

KAFKA = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_a_config_that_cannot_work_is_refused() -> None:
    ok = realtime.RealTimeConfig(("sq",), "rejects", KAFKA, "/tmp/cp")
    assert ok.checkpoint_seconds == 5.0 and ok.max_record_bytes == realtime.RECORD_LIMIT
    for bad, words in (
        ({"send_queues": ()}, "no send queues"),
        ({"rejects_topic": ""}, "rejects topic"),
        ({"checkpoint_seconds": 0}, "checkpoint_seconds"),
        ({"max_record_bytes": 4096}, "max_record_bytes"),
        ({"max_record_bytes": realtime.RECORD_LIMIT + 1}, "max_record_bytes"),
    ):
        args = {
            "send_queues": ("sq",),
            "rejects_topic": "rejects",
            "kafka": KAFKA,
            "checkpoint": "/tmp/cp",
            **bad,
        }
        with pytest.raises(ValueError, match=words):
            realtime.RealTimeConfig(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--source", "kafka", "--rejects", "r"], "--upstream is required"),
        (
            ["--source", "files", "--input", "i", "--real-time", "5", "--rejects-topic", "r"],
            "--real-time needs --source kafka",
        ),
        (
            ["--source", "kafka", "--upstream", "u", "--real-time", "5"],
            "--rejects-topic is required",
        ),
        (
            ["--source", "kafka", "--upstream", "u", "--real-time", "2", "--rejects-topic", "r"],
            "at least 5",
        ),
        (["--source", "kafka", "--upstream", "u"], "--rejects is required"),
    ],
)
def test_the_command_line_refuses_what_cannot_run(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        sender.main(["--checkpoint", "/tmp/cp", *argv])
    assert exit_.value.code == 2
    assert words in capsys.readouterr().err
