"""Segmentation proof (`make segments-100mb`): one large payload through the whole path.

    .venv/bin/python -m ops.segments_proof                 # 100 MiB
    .venv/bin/python -m ops.segments_proof --mib 20 --keep

A fresh topology on the stack named by the router settings (`--config`, ROUTER_*
variables), one send unit and one receive unit as processes; a sender process sends one
payload of random bytes (`Sender.send`, in segments); a receiver process (`Receiver`) gets
it back whole. The run checks it byte for byte (SHA-256 computed by the sender and by the
receiver, besides the receiver's own check against `segment-sha256`), checks with a plain
read_committed consumer that its segments lie contiguous and in order on one receive
queue, and reports the time and each process's peak memory (RSS high-water mark: the
sender's and receiver's own `getrusage`, the units' `VmHWM`). Exits 1 if anything differs.
The sender and receiver subcommands (`send`, `receive`) are what the run starts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import resource
import secrets
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from ops.harness.signals import exit_on_sigterm
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router.config import RouterSettings, load_settings
from router.contract import segments

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
log = logging.getLogger("ops.segments_proof")


def rss_kib(pid: int | str = "self", field_name: str = "VmHWM") -> int:
    """A process's resident memory from /proc (KiB): its high-water mark by default."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field_name} for process {pid}")


def peak_kib() -> int:
    """This process's peak RSS (KiB, Linux's ru_maxrss)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# ---------------------------------------------------------------------- the two clients


def send(bootstrap: str, topology: str, size: int, segment_bytes: int | None) -> dict[str, Any]:
    """Send `size` random bytes as one ordinary message; what happened, as JSON."""
    from router.sender import Sender  # noqa: PLC0415  (kept out of the driver's memory)

    size_of = segment_bytes or segments.DEFAULT_SEGMENT_BYTES
    with Sender({"bootstrap.servers": bootstrap}, topology, segment_bytes=size_of) as sender:
        before = rss_kib(field_name="VmRSS")  # the clients, before the payload
        payload = os.urandom(size)
        digest = hashlib.sha256(payload).hexdigest()
        started = time.time()
        receipt = sender.send(payload)
        sender.flush(300)
        flushed = time.time()
    return {
        "sha256": digest,
        "bytes": size,
        "segments": receipt.segments,
        "segment_id": receipt.segment_id,
        "started_at": started,
        "send_s": round(flushed - started, 3),
        "rss_before_payload_kib": before,
        "peak_kib": peak_kib(),
    }


def receive(bootstrap: str, topology: str, size: int, timeout: float) -> dict[str, Any]:
    """Wait for one message of `size` bytes; its SHA-256 and when it came, as JSON."""
    from router.receiver import Receiver  # noqa: PLC0415

    started = time.time()
    conf = {"bootstrap.servers": bootstrap, "group.id": f"proof-{secrets.token_hex(4)}"}
    with Receiver(conf, topology) as receiver:
        idle = rss_kib(field_name="VmRSS")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = receiver.poll(1.0)
            if m is None:
                continue
            receiver.done(m)
            if m.value is not None and len(m.value) == size:
                got = time.time()
                return {
                    "sha256": hashlib.sha256(m.value).hexdigest(),
                    "bytes": len(m.value),
                    "records": len(m.parts) or 1,
                    "got_at": got,
                    "idle_rss_kib": idle,
                    "peak_kib": peak_kib(),
                    "waited_s": round(got - started, 3),
                }
    raise TimeoutError(f"no {size}-byte message within {timeout}s")


# ---------------------------------------------------------------------- the run


@dataclass
class Report:
    bytes: int
    segments: int = 0
    identical: bool = False
    contiguous: bool = False
    end_to_end_s: float = 0.0
    send_s: float = 0.0
    peak_mib: dict[str, float] = field(default_factory=dict)  # process -> peak RSS
    idle_mib: dict[str, float] = field(default_factory=dict)  # ... before the payload
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.identical and self.contiguous and not self.problems

    def table(self) -> str:
        rows = [
            f"payload: {self.bytes / MIB:.1f} MiB in {self.segments} segments; "
            f"byte-identical: {self.identical}; contiguous on one queue: {self.contiguous}",
            f"time: send+flush {self.send_s:.2f} s, end to end {self.end_to_end_s:.2f} s "
            f"({self.bytes / MIB / max(self.end_to_end_s, 1e-9):.1f} MiB/s)",
            f"{'process':<16}{'idle RSS MiB':>14}{'peak RSS MiB':>14}",
        ]
        for name, peak in self.peak_mib.items():
            idle = self.idle_mib.get(name)
            rows.append(f"{name:<16}{(f'{idle:.1f}' if idle else '-'):>14}{peak:>14.1f}")
        rows += [f"PROBLEM: {p}" for p in self.problems]
        return "\n".join(rows)


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ops.segments_proof", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str], what: str, timeout: float) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the {what} failed ({proc.returncode}):\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def check_queues(settings: RouterSettings, segment_id: str, count: int) -> str | None:
    """Why the message's segments are not contiguous and in order on one receive queue
    (None: they are), from what a plain read_committed consumer reads."""
    queues = {q: TopicPartition(q, 0) for q in settings.topology.receive_queues}
    held = read_to_end(settings.kafka, queues)
    sid = segment_id.encode()
    where = {}
    for queue, records in held.items():
        marks = [
            i for i, m in enumerate(records) if dict(m.headers() or []).get("segment-id") == sid
        ]
        if marks:
            where[queue] = (marks, records)
    if len(where) != 1:
        return f"segments on {len(where)} queues: {sorted(where)}"
    [(marks, records)] = where.values()
    if len(marks) != count or marks[-1] - marks[0] + 1 != count:
        return f"{len(marks)} segments over {marks[-1] - marks[0] + 1} records: not contiguous"
    indexes = [int(dict(records[i].headers() or [])["segment-index"]) for i in marks]
    if indexes != list(range(count)):
        return f"segment indexes out of order: {indexes[:20]}"
    return None


def _measure(
    p: Pipeline, report: Report, size: int, segment_bytes: int | None, timeout: float
) -> None:
    """Run the sender and receiver processes through `p`'s units; fill in `report`."""
    units = {f"{x.role}": x.popen.pid for x in p.fleet.procs}
    report.idle_mib = {n: rss_kib(pid, "VmRSS") / 1024 for n, pid in units.items()}
    bootstrap, name = p.settings.kafka.bootstrap_servers, p.settings.topology.name
    receiver = _child("receive", bootstrap, name, str(size), "--timeout", str(timeout))
    extra = [] if segment_bytes is None else ["--segment-bytes", str(segment_bytes)]
    sender = _child("send", bootstrap, name, str(size), *extra)
    try:
        sent = _result(sender, "sender", timeout)
        got = _result(receiver, "receiver", timeout)
    finally:
        for child in (sender, receiver):
            if child.poll() is None:
                child.kill()
                child.wait(10)
    report.peak_mib = {"sender": sent["peak_kib"] / 1024}
    report.peak_mib.update({n: rss_kib(pid) / 1024 for n, pid in units.items()})
    report.peak_mib["receiver"] = got["peak_kib"] / 1024
    report.idle_mib["sender"] = sent["rss_before_payload_kib"] / 1024
    report.idle_mib["receiver"] = got["idle_rss_kib"] / 1024
    report.segments, report.send_s = sent["segments"], sent["send_s"]
    report.end_to_end_s = round(got["got_at"] - sent["started_at"], 3)
    report.identical = got["sha256"] == sent["sha256"] and got["bytes"] == size
    if got["records"] != sent["segments"]:
        report.problems.append(f"{got['records']} records read, {sent['segments']} sent")
    why = check_queues(p.settings, sent["segment_id"], sent["segments"])
    report.contiguous = why is None
    if why:
        report.problems.append(why)


def run_proof(
    settings: RouterSettings,
    size: int,
    run_dir: Path,
    *,
    segment_bytes: int | None = None,
    unit_env: dict[str, str] | None = None,
    keep: bool = False,
    timeout: float = 600.0,
) -> Report:
    """Send one `size`-byte payload through a fresh topology's unit processes (`unit_env`:
    their settings, e.g. ROUTER_UNIT__MAX_BATCH_BYTES); the report of what came out."""
    spec = PipelineSpec(
        send_units=1,
        receive_units=1,
        sweepers=0,
        send_queues=1,
        send_queue_partitions=1,
        transfer_partitions=2,
        receive_queues=2,
        extra_env=unit_env or {},
    )
    report = Report(size)
    p = Pipeline(settings, spec, run_dir, name=f"seg-{secrets.token_hex(3)}", keep=keep)
    try:  # stopped and cleaned up however it ends, a failed start included
        p.start()
        _measure(p, report, size, segment_bytes, timeout)
    finally:
        p.stop()
        if not keep:
            p.cleanup()
    (run_dir / "report.json").write_text(json.dumps(asdict(report), indent=2))
    return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ops.segments_proof",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--mib", type=float, default=100.0, help="payload size, MiB")
    p.add_argument("--segment-bytes", type=int, default=None, help="the Sender's segment size")
    p.add_argument("--max-batch-bytes", type=int, default=None, help="unit.max_batch_bytes")
    p.add_argument("--run-dir", type=Path, default=Path(".results/segments"))
    p.add_argument("--keep", action="store_true", help="keep the run's topics and tables")
    p.add_argument("--config", type=Path, default=None, help="router TOML (servers)")
    p.add_argument("--timeout", type=float, default=600.0)
    return p


def _client(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m ops.segments_proof send|receive")
    p.add_argument("role", choices=["send", "receive"])
    p.add_argument("bootstrap")
    p.add_argument("topology")
    p.add_argument("bytes", type=int)
    p.add_argument("--segment-bytes", type=int, default=None)
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)
    if a.role == "send":
        result = send(a.bootstrap, a.topology, a.bytes, a.segment_bytes)
    else:
        result = receive(a.bootstrap, a.topology, a.bytes, a.timeout)
    print(json.dumps(result), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    if argv[:1] in (["send"], ["receive"]):
        return _client(argv)
    args = parser().parse_args(argv)
    env = {}
    if args.max_batch_bytes is not None:
        env["ROUTER_UNIT__MAX_BATCH_BYTES"] = str(args.max_batch_bytes)
    run_dir = args.run_dir / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    report = run_proof(
        load_settings(args.config),
        int(args.mib * MIB),
        run_dir,
        segment_bytes=args.segment_bytes,
        unit_env=env,
        keep=args.keep,
        timeout=args.timeout,
    )
    print(report.table())
    print(f"report: {run_dir / 'report.json'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
