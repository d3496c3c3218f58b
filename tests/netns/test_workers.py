#!/usr/bin/python3
# test_workers.py - two data-path workers per gateway (issue 5: "all cores",
# and "the 100 MB checksum transfer passes with every offload on and with
# workers = 2"), once with each underlay engine.
#
#   netns A: tun (2 queues) esptun workers=2  ula 10.212.0.1 ==veth== ulb 10.212.0.2  esptun workers=2 tun (2 queues) :netns B
#
# Per engine (mmsg, uring): a 100 MB TCP transfer A -> B with tun offloads on,
# SHA-256 equal on both ends; then 16 TCP connections at once, which the
# tun's queue selection spreads over A's two workers (both must have read
# packets from the tun); B authenticates everything although A's two workers
# interleave their sequence numbers on the wire (no drops at all).
"""Two data-path workers per gateway, both underlay engines."""

import json
import os
import socket
import sys
import threading
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping  # noqa: E402
import report  # noqa: E402
import static_pair  # noqa: E402
import transfer as transfer_lib  # noqa: E402
from netns import TestError  # noqa: E402

XFER_BYTES = 100 * 1000 * 1000
XFER_TIMEOUT = 180
FLOWS = 16


def many_flows(a, b, port):
    """FLOWS short TCP connections a -> b:port at once; returns bytes received."""
    got = []
    srv = b.socket(socket.AF_INET, socket.SOCK_STREAM, bind=("10.99.0.2", port))
    srv.listen(FLOWS)

    def serve():
        for _ in range(FLOWS):
            c, _ = srv.accept()
            with c:
                n = 0
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    n += len(d)
                got.append(n)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conns = []
    for _ in range(FLOWS):
        c = a.socket(socket.AF_INET, socket.SOCK_STREAM, timeout=10)
        c.connect(("10.99.0.2", port))
        conns.append(c)
    for c in conns:
        c.sendall(b"x" * 200000)
        c.close()
    t.join(30)
    srv.close()
    return got


def run_engine(rep, build, tmp, engine, idx):
    opts = {"workers": 2, "io_engine": engine}
    a, b, ea, eb = static_pair.start(rep, build, tmp, "wk", idx, "10.212.0", 0x6000, "w", opts, opts)
    try:
        st = ea.status()
        rep.check(st["workers"] == 2 and len(st["per_worker"]) == 2 and st["io_engine"]["name"] == engine
                  and "tso4" in st["tun_io"]["offloads"],
                  f"[{engine}] A runs 2 workers on io_engine {engine} with tun offloads "
                  f"({st['tun_io']['offloads']})", json.dumps({k: st[k] for k in ("workers", "io_engine")}))
        res = ping.run(a, "10.99.0.2")
        rep.check(res.returncode == 0, f"[{engine}] ping A -> B", res.output[-200:])

        sent, got, secs = transfer_lib.run(a, b, "10.99.0.2", 5201, XFER_BYTES, XFER_TIMEOUT)
        rep.check(sent and got and sent.get("bytes") == XFER_BYTES and got.get("bytes") == XFER_BYTES
                  and sent.get("sha256") == got.get("sha256"),
                  f"[{engine}] 100 MB TCP A -> B with 2 workers and offloads: SHA-256 equal "
                  f"({secs:.1f} s)", f"sender {sent}, receiver {got}")

        before = [w["tun_rx_packets"] for w in ea.status()["per_worker"]]
        got = many_flows(a, b, 5301)
        rep.check(len(got) == FLOWS and all(n == 200000 for n in got),
                  f"[{engine}] {FLOWS} TCP connections at once, 200 kB each, all complete", str(got))
        time.sleep(0.2)
        st_a, st_b = ea.status(), eb.status()
        spread = [w["tun_rx_packets"] - b0 for w, b0 in zip(st_a["per_worker"], before)]
        rep.check(len(spread) == 2 and all(n > 0 for n in spread),
                  f"[{engine}] both of A's workers read from the tun: {spread} packets", json.dumps(st_a["per_worker"]))
        for name, s in (("A", st_a), ("B", st_b)):
            bad = esptun_proc.fault_drops(s["drops"])
            rep.check(not bad, f"[{engine}] {name}: no drops (no replay, no auth failure)",
                      json.dumps(s["drops"]))
        pa, pb = esptun_proc.peer(st_a, "site-b"), esptun_proc.peer(st_b, "site-a")
        shed = esptun_proc.rx_shed(st_b)
        rep.equal(pb["sa_in"]["packets"] + shed, pa["sa_out"]["packets"],
                  f"[{engine}] B authenticated every packet A's two workers sealed"
                  f" ({shed} shed unopened by the receive queue limit)")
        rep.info(f"[{engine}] B sa_in.reordered {pb['sa_in']['reordered']} (A's workers interleave)")
    finally:
        static_pair.stop(rep, engine, ea, eb)


def body(rep, build):
    tmp = netns.make_tempdir("workers")
    for idx, engine in enumerate(("mmsg", "uring")):
        rep.section(f"io_engine = {engine}, workers = 2")
        try:
            run_engine(rep, build, tmp, engine, idx)
        except TestError as e:
            rep.check(False, f"[{engine}] {str(e).splitlines()[0]}", str(e)[:2000])


if __name__ == "__main__":
    report.main("netns/workers", body, tools=("ip", "ping", "timeout"))
