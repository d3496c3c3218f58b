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


def open_sides(args):
    """open_sides() - the relay's two non-blocking sockets, "a" bound to
    args.side_a and "b" to args.side_b, with 8 MiB buffers."""
    socks = {}
    for name, ep in (("a", args.side_a), ("b", args.side_b)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.bind(endpoint(ep))
        s.setblocking(False)
        socks[name] = s
    return socks


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
    socks = open_sides(args)
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


# ---------------------------------------------------------------------------
# delay_main(): a fixed-delay relay (no loss, no reordering) for the IKE
# interop test's rekey collision case (tests/netns/test_ike_strongswan.py
# case 9). The same two sockets as main(), but every datagram waits --delay
# seconds (one way) in a FIFO per direction before it leaves, so requests of
# both peers cross on the wire. Optionally logs each IKE message it carries
# (UDP 4500 with the non-ESP marker, or any datagram on a port that is not
# 4500) with the wall-clock time it came in: direction, exchange, request or
# response, message ID. Run through the caller (it imports this module):
# delay_main(["A_SIDE", "PEER_A", "B_SIDE", "PEER_B", "--delay", "0.4"]).
# Prints {"ready": true} once bound and, on SIGTERM, one JSON line of counts
# per direction (in, out, dropped, ike, max_queued).

IKE_EXCHANGES = {34: "IKE_SA_INIT", 35: "IKE_AUTH", 36: "CREATE_CHILD_SA", 37: "INFORMATIONAL"}


def ike_summary(data, port):
    """ike_summary() - "EXCHANGE request|response mid N" for an IKE message
    (data as received on UDP port `port`), else None (ESP, keepalive)."""
    import struct
    if port == 4500:
        if len(data) < 4 or data[:4] != b"\0\0\0\0":
            return None  # ESP (or a NAT-T keepalive)
        data = data[4:]
    if len(data) < 28:
        return None
    exch, flags, mid = data[18], data[19], struct.unpack("!I", data[20:24])[0]
    name = IKE_EXCHANGES.get(exch, f"exchange {exch}")
    return (f"{name} {'response' if flags & 0x20 else 'request'} mid {mid} "
            f"({'original initiator' if flags & 0x08 else 'original responder'}, {len(data)} B)")


def delay_main(argv=None):
    import collections
    ap = argparse.ArgumentParser(prog="udp_relay delay_main")
    ap.add_argument("side_a")
    ap.add_argument("peer_a")
    ap.add_argument("side_b")
    ap.add_argument("peer_b")
    ap.add_argument("--delay", type=float, default=0.4, help="one-way delay in seconds")
    ap.add_argument("--ike-log", default=None, help="file: one line per IKE message relayed")
    args = ap.parse_args(argv)
    socks = open_sides(args)
    out = {"ab": (socks["b"], endpoint(args.peer_b)), "ba": (socks["a"], endpoint(args.peer_a))}
    port_in = {"ab": endpoint(args.side_a)[1], "ba": endpoint(args.side_b)[1]}
    queue = {"ab": collections.deque(), "ba": collections.deque()}  # (due, datagram)
    counts = {d: {"in": 0, "out": 0, "dropped": 0, "ike": 0, "max_queued": 0} for d in out}
    logf = open(args.ike_log, "a", buffering=1) if args.ike_log else None
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print(json.dumps({"ready": True}), flush=True)

    def flush(now, force=False):
        for d, q in queue.items():
            sock, to = out[d]
            while q and (force or q[0][0] <= now):
                data = q.popleft()[1]
                try:
                    sock.sendto(data, to)
                    counts[d]["out"] += 1
                except OSError:
                    counts[d]["dropped"] += 1

    while not stop:
        now = time.monotonic()
        due = [q[0][0] for q in queue.values() if q]
        wait = min(0.05, max(0.0, min(due) - now)) if due else 0.05
        try:
            r, _, _ = select.select([socks["a"], socks["b"]], [], [], wait)
        except InterruptedError:
            continue
        now = time.monotonic()
        for s in r:
            d = "ab" if s is socks["a"] else "ba"
            for _ in range(256):
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    break
                counts[d]["in"] += 1
                queue[d].append((now + args.delay, data))
                what = ike_summary(data, port_in[d])
                if what:
                    counts[d]["ike"] += 1
                    if logf:
                        wall = time.time()
                        logf.write(time.strftime("%H:%M:%S", time.localtime(wall))
                                   + f".{int(wall * 1000) % 1000:03d} {d.upper()} {what}\n")
            counts[d]["max_queued"] = max(counts[d]["max_queued"], len(queue[d]))
        flush(time.monotonic())
    flush(time.monotonic(), force=True)
    if logf:
        logf.close()
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
