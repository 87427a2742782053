"""The no-broker proxy (ops.harness.stack.metaproxy): its Metadata rewrite (the brokers
array emptied, every other byte kept, in flexible and older versions), and its close."""

from __future__ import annotations

import socket
import struct

from ops.harness.stack.localstack import free_port
from ops.harness.stack.metaproxy import MetadataProxy, empty_brokers


def compact_str(s: str) -> bytes:
    return bytes([len(s) + 1]) + s.encode()


def test_flexible_version_brokers_emptied_rest_kept() -> None:
    header = struct.pack(">i", 42) + b"\x00"  # correlation id, no tagged fields
    throttle = struct.pack(">i", 0)
    broker = struct.pack(">i", 1) + compact_str("127.0.0.1") + struct.pack(">i", 9092)
    broker += b"\x00" + b"\x01\x05\x02ab"  # rack null; one tagged field (tag 5, 2 bytes)
    rest = compact_str("cluster") + struct.pack(">i", 1) + b"\x02topics..."
    frame = header + throttle + b"\x02" + broker + rest  # one broker
    out, n = empty_brokers(frame, 12)
    assert n == 1
    assert out == header + throttle + b"\x01" + rest


def test_old_version_brokers_emptied_rest_kept() -> None:
    header = struct.pack(">i", 7)
    throttle = struct.pack(">i", 0)
    brokers = struct.pack(">i", 2)
    for node in (1, 2):
        host = b"host"
        brokers += struct.pack(">ih", node, len(host)) + host + struct.pack(">i", 9092)
        brokers += struct.pack(">h", -1)  # rack null
    rest = b"\xff\xfftail"
    out, n = empty_brokers(header + throttle + brokers + rest, 5)
    assert n == 2
    assert out == header + throttle + struct.pack(">i", 0) + rest


def test_a_closed_proxy_frees_its_port_at_once() -> None:
    # its accept thread blocked in accept(): closing alone left the port listening, and the
    # next test's proxy on the same port failed "address already in use"
    port = free_port()
    MetadataProxy(port, 1).close()
    socket.create_server(("127.0.0.1", port)).close()
