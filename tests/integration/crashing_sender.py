"""A sending process for `test_sender_resume`: opens groups under a sender ID, and is
SIGKILLed by the test while some members are unacknowledged; run again, it resumes them.

    python -m tests.integration.crashing_sender open|finish BOOTSTRAP TOPOLOGY SENDER_ID \
        REDIS_URL PREFIX GROUPS

`open`: member 0 of every group (flushed, so the groups' records and first members are
durable), then member 1 of the first half, acknowledged by Kafka, then member 1 of the
second half, left in the producer's buffer (`linger.ms` 60 s); prints `MID` and blocks.
`finish`: a Sender with the same ID lists its open groups (`RESUMED gid topic partition
next_seq` lines), sends each one's remaining members up to its final, prints `DONE`.
Group `g<i>` has 3 + i % 3 members; each value is `<gid>:<seq>`.
"""

from __future__ import annotations

import sys

from router.sender import Sender


def size(i: int) -> int:
    return 3 + i % 3


def main(argv: list[str]) -> None:
    phase, bootstrap, topology, sender_id, redis_url, prefix, count = argv
    groups = [f"g{i}" for i in range(int(count))]
    config: dict[str, object] = {"bootstrap.servers": bootstrap}
    if phase == "open":  # member 1 of the second half stays buffered until the kill
        config["linger.ms"] = 60_000
    sender = Sender(config, topology, sender_id=sender_id, state=redis_url, state_prefix=prefix)
    if phase == "open":
        for gid in groups:
            r = sender.send(f"{gid}:0".encode(), guarantee_id=gid)
            print(f"LANE {gid} {r.topic} {r.partition}", flush=True)
        sender.flush()
        half = len(groups) // 2
        for gid in groups[:half]:
            sender.send(f"{gid}:1".encode(), guarantee_id=gid)
        # Kafka acknowledges these; the sender's own checkpoint of them may or may not be
        # written before the kill (once a second): resuming must not depend on it.
        sender._out.producer.flush(30)
        for gid in groups[half:]:
            sender.send(f"{gid}:1".encode(), guarantee_id=gid)  # still buffered at the kill
        print("MID", flush=True)
        sys.stdin.read()  # blocks until killed
        return
    with sender:
        for gid, g in sorted(sender.open_groups().items()):
            print(f"RESUMED {gid} {g.topic} {g.partition} {g.next_seq}", flush=True)
            n = size(int(gid[1:]))
            for seq in range(g.next_seq, n):
                sender.send(f"{gid}:{seq}".encode(), guarantee_id=gid, final=seq == n - 1)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
