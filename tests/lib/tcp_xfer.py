#!/usr/bin/python3
# tcp_xfer.py - a bulk TCP sender/receiver for the wire tests: run one end in
# each namespace (ip netns exec NS tcp_xfer.py ...). Both print one JSON line
# with the byte count and SHA-256 they saw, so the test compares the two.
#
#   tcp_xfer.py recv BIND_ADDR PORT        prints {"ready": true} once listening,
#                                          then {"bytes": N, "sha256": "...", "secs": S}
#   tcp_xfer.py send DEST_ADDR PORT BYTES  random data; prints the same fields
#                                          (plus "progress" lines every 8 MiB)
"""Bulk TCP transfer with SHA-256 on both ends."""

import hashlib
import json
import os
import socket
import sys
import time

CHUNK = 256 * 1024
IO_TIMEOUT = 30  # seconds without progress before giving up


def emit(**kw):
    print(json.dumps(kw), flush=True)


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def recv(bind, port):
    srv = socket.socket(family(bind), socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(IO_TIMEOUT)
    emit(ready=True)
    conn, peer = srv.accept()
    conn.settimeout(IO_TIMEOUT)
    h, n, t0 = hashlib.sha256(), 0, time.monotonic()
    while True:
        b = conn.recv(CHUNK)
        if not b:
            break
        h.update(b)
        n += len(b)
    emit(bytes=n, sha256=h.hexdigest(), secs=round(time.monotonic() - t0, 3), peer=peer[0])


def send(dest, port, total):
    s = socket.create_connection((dest, port), timeout=IO_TIMEOUT)
    s.settimeout(IO_TIMEOUT)
    h, n, t0, next_report = hashlib.sha256(), 0, time.monotonic(), 8 << 20
    block = os.urandom(4 << 20)
    while n < total:
        # Fresh random data per 4 MiB (a repeated block would hide reordering bugs).
        if n % len(block) == 0 and n:
            block = os.urandom(len(block))
        off = n % len(block)
        b = block[off:off + min(CHUNK, total - n, len(block) - off)]
        s.sendall(b)
        h.update(b)
        n += len(b)
        if n >= next_report:
            emit(progress=n)
            next_report += 8 << 20
    s.shutdown(socket.SHUT_WR)
    # Wait for the receiver to close: all data was read on the other side.
    while s.recv(CHUNK):
        pass
    s.close()
    emit(bytes=n, sha256=h.hexdigest(), secs=round(time.monotonic() - t0, 3))


if __name__ == "__main__":
    try:
        if sys.argv[1] == "recv":
            recv(sys.argv[2], int(sys.argv[3]))
        elif sys.argv[1] == "send":
            send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        else:
            raise SystemExit(f"unknown mode {sys.argv[1]!r}")
    except (OSError, socket.timeout) as e:
        emit(error=f"{type(e).__name__}: {e}")
        sys.exit(1)
