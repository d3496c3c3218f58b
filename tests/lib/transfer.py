# transfer.py - drive one checksummed TCP transfer through a tunnel: the
# receiver (tcp_xfer.py recv) in one namespace, the sender in another, both
# bounded by a timeout. Shared by the netns tests.
"""One checksummed TCP transfer between two namespaces."""

import json
import os
import subprocess
import time

import netns
from netns import TestError

XFER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tcp_xfer.py")


def run(src_ns, dst_ns, dst_addr, port, nbytes, timeout, on_progress=None):
    """run() - send nbytes from src_ns to dst_addr:port (a listener in dst_ns).

    on_progress(bytes_sent) is called for each progress line of the sender.
    Returns (sender result, receiver result, seconds): each result is the
    tool's last JSON line ({"bytes": N, "sha256": ..., ...}) or {} / None.
    """
    recv = dst_ns.spawn("timeout", str(timeout), "/usr/bin/python3", XFER, "recv", dst_addr,
                        str(port), stdout=subprocess.PIPE, text=True)
    line = netns.read_line(recv.stdout, 10)
    if not line or not json.loads(line).get("ready"):
        netns.stop_process(recv)
        raise TestError(f"transfer receiver did not start: {line!r}")
    t0 = time.monotonic()
    send = src_ns.spawn("timeout", str(timeout), "/usr/bin/python3", XFER, "send", dst_addr,
                        str(port), str(nbytes), stdout=subprocess.PIPE, text=True)
    sent = None
    deadline = t0 + timeout + 5
    while time.monotonic() < deadline:
        line = netns.read_line(send.stdout, max(0.1, deadline - time.monotonic()))
        if not line:
            break
        msg = json.loads(line)
        if "progress" in msg and on_progress:
            on_progress(msg["progress"])
        if "bytes" in msg or "error" in msg:
            sent = msg
            break
    try:
        out, _ = recv.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        recv.kill()
        out = ""
    secs = time.monotonic() - t0
    got = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    netns.stop_process(send, timeout=10)
    return sent, got, secs


def check(rep, what, sent, got, nbytes, secs):
    """check() - the transfer's check: both ends moved nbytes with equal
    SHA-256. what: "[tag] 100 MB TCP A -> B (10.99.0.2)"; the rate is added."""
    return rep.check(sent and got and sent.get("bytes") == nbytes and got.get("bytes") == nbytes
                     and sent.get("sha256") == got.get("sha256"),
                     f"{what}: SHA-256 equal on both ends ({secs:.1f} s, "
                     f"{nbytes * 8 / secs / 1e6:.0f} Mbit/s)", f"sender {sent}, receiver {got}")
