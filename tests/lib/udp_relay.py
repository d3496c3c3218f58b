#!/usr/bin/python3
# udp_relay.py - a lossy, reordering UDP relay between two esptun endpoints.
#
#   A (peer_a) <-> [side_a socket]  relay  [side_b socket] <-> B (peer_b)
#
# Every datagram from peer_a to side_a leaves side_b for peer_b and the other
# way round. A seeded RNG drops --loss of them and holds back --reorder of
# them until --hold later datagrams in the same direction went out (or
# 20 ms passed), so they arrive behind newer ones. Prints {"ready": true}
# once bound and, on SIGTERM, one JSON line of counts per direction.
"""Lossy, reordering UDP relay for the netns tests."""

import argparse
import json
import random
import select
import signal
import socket
import sys
import time


def endpoint(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("side_a")
    ap.add_argument("peer_a")
    ap.add_argument("side_b")
    ap.add_argument("peer_b")
    ap.add_argument("--loss", type=float, default=0.01)
    ap.add_argument("--reorder", type=float, default=0.05)
    ap.add_argument("--hold", type=int, default=3)
    ap.add_argument("--seed", type=int, default=4303)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    socks = {}
    for name, ep in (("a", args.side_a), ("b", args.side_b)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.bind(endpoint(ep))
        s.setblocking(False)
        socks[name] = s
    # direction "ab": in on side a, out on side b to peer b; "ba" the reverse.
    out = {"ab": (socks["b"], endpoint(args.peer_b)), "ba": (socks["a"], endpoint(args.peer_a))}
    held = {"ab": [], "ba": []}  # [datagram, datagrams still to pass it, deadline]
    counts = {d: {"in": 0, "out": 0, "dropped": 0, "reordered": 0} for d in out}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print(json.dumps({"ready": True}), flush=True)

    def send(d, data):
        sock, to = out[d]
        try:
            sock.sendto(data, to)
            counts[d]["out"] += 1
        except OSError:
            counts[d]["dropped"] += 1

    def release(d, force=False):
        now = time.monotonic()
        keep = []
        for h in held[d]:
            if force or h[1] <= 0 or now >= h[2]:
                send(d, h[0])
            else:
                keep.append(h)
        held[d] = keep

    while not stop:
        try:
            r, _, _ = select.select([socks["a"], socks["b"]], [], [], 0.005)
        except InterruptedError:
            continue
        for s in r:
            d = "ab" if s is socks["a"] else "ba"
            for _ in range(64):
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    break
                counts[d]["in"] += 1
                x = rng.random()
                if x < args.loss:
                    counts[d]["dropped"] += 1
                    continue
                if x < args.loss + args.reorder:
                    counts[d]["reordered"] += 1
                    held[d].append([data, args.hold, time.monotonic() + 0.02])
                    continue
                send(d, data)
                for h in held[d]:
                    h[1] -= 1
                release(d)
        for d in held:
            release(d)
    for d in held:
        release(d, force=True)
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
