"""A TCP proxy to a Kafka broker that can empty the broker list of Metadata responses: the
response a single KRaft broker sends in the few milliseconds it is fenced at the end of a
controlled shutdown ("0 brokers, 1 topics"), on demand (librdkafka#5301).

librdkafka (2.10 and later) forgets every broker a Metadata response does not name; given
such a response by its only learned broker, still connected, a client decommissions it
and is left with no broker at all, and no re-bootstrap follows (the decommission is a
planned one). The proxy sits on the advertised port of one of the private stack's extra
broker listeners (`LocalStack.unit_listeners`), so a client bootstrapped through it is
sent back to it for every connection.

    with MetadataProxy(listen_port=advertised, broker_port=port) as proxy:
        proxy.empty_brokers(1)   # the next Metadata response names no broker

Requests are read as Kafka frames (a 4-byte size, then api key, version, correlation id);
a Metadata response (api key 3) to rewrite has its brokers array replaced by an empty one,
everything else kept byte for byte. Flexible versions (9 and later: compact arrays and
tagged fields) and the older ones are both handled.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType

METADATA = 3


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def empty_brokers(frame: bytes, version: int) -> tuple[bytes, int]:
    """A Metadata response (without its size prefix) with no broker; and how many it named."""
    flexible = version >= 9
    pos = 4  # correlation id
    if flexible:
        pos = _skip_tags(frame, pos)  # response header v1
    if version >= 3:
        pos += 4  # throttle time
    start = pos
    if flexible:
        n, pos = _uvarint(frame, pos)
        n -= 1
    else:
        (n,) = struct.unpack_from(">i", frame, pos)
        pos += 4
    for _ in range(max(n, 0)):
        pos += 4  # node id
        if flexible:
            size, pos = _uvarint(frame, pos)
            pos += size - 1  # host
            pos += 4  # port
            size, pos = _uvarint(frame, pos)
            pos += max(size - 1, 0)  # rack (nullable)
            pos = _skip_tags(frame, pos)
        else:
            (size,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + size + 4  # host, port
            if version >= 1:
                (size,) = struct.unpack_from(">h", frame, pos)
                pos += 2 + max(size, 0)  # rack (nullable)
    empty = b"\x01" if flexible else b"\x00\x00\x00\x00"
    return frame[:start] + empty + frame[pos:], n


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    body = _read_exactly(sock, size)
    return None if body is None else body


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class MetadataProxy:
    def __init__(self, listen_port: int, broker_port: int, host: str = "127.0.0.1") -> None:
        self.host, self.broker_port = host, broker_port
        self._server = socket.create_server((host, listen_port), reuse_port=False)
        self._lock = threading.Lock()
        self._to_empty = 0
        self._close_after = False
        self._down_until = 0.0
        self.emptied = 0  # Metadata responses rewritten so far
        self.metadata_seen = 0
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="metaproxy", daemon=True).start()

    def empty_brokers(self, count: int = 1, close_after: bool = False) -> None:
        """The next `count` Metadata responses (on any connection) name no broker; with
        `close_after`, the connection that carried one is closed right after it (the
        fenced broker's sockets close a few milliseconds later)."""
        with self._lock:
            self._to_empty += count
            self._close_after = close_after

    def down(self, seconds: float) -> None:
        """For `seconds`, every connection is closed (open ones now, new ones at once): the
        broker away, as while it restarts."""
        with self._lock:
            self._down_until = time.monotonic() + seconds
            conns, self._conns = self._conns, []
        for c in conns:
            _close(c)

    def __enter__(self) -> MetadataProxy:
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        # Closing alone leaves the port listening while the accept thread stays blocked in
        # accept() on it (Linux keeps the socket until that call returns: the next test's
        # proxy on the same port failed "address already in use"); shutdown wakes it.
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if time.monotonic() < self._down_until:
                _close(client)
                continue
            try:
                upstream = socket.create_connection((self.host, self.broker_port), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            versions: dict[int, int] = {}  # correlation id -> Metadata version
            threading.Thread(
                target=self._requests, args=(client, upstream, versions), daemon=True
            ).start()
            threading.Thread(
                target=self._responses, args=(upstream, client, versions), daemon=True
            ).start()

    def _requests(self, src: socket.socket, dst: socket.socket, versions: dict[int, int]) -> None:
        try:
            while (frame := _read_frame(src)) is not None:
                key, version, corr = struct.unpack_from(">hhi", frame, 0)
                if key == METADATA:
                    versions[corr] = version
                dst.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass
        finally:
            _close_both(src, dst)

    def _responses(self, src: socket.socket, dst: socket.socket, versions: dict[int, int]) -> None:
        try:
            while (frame := _read_frame(src)) is not None:
                rewrite = False
                (corr,) = struct.unpack_from(">i", frame, 0)
                version = versions.pop(corr, None)
                if version is not None:
                    with self._lock:
                        self.metadata_seen += 1
                        rewrite = self._to_empty > 0
                        if rewrite:
                            self._to_empty -= 1
                    if rewrite:
                        frame, _ = empty_brokers(frame, version)
                        with self._lock:
                            self.emptied += 1
                dst.sendall(struct.pack(">i", len(frame)) + frame)
                if rewrite and self._close_after:
                    break
        except OSError:
            pass
        finally:
            _close_both(src, dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()


def _close_both(a: socket.socket, b: socket.socket) -> None:
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
