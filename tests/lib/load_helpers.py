#!/usr/bin/python3
# load_helpers.py - load for the IKE cases that run while traffic flows: a
# paced TCP transfer (sender and receiver run as this file in the two
# namespaces; the parent side, paced_transfer(), checks both ends), a flood
# of junk IKE datagrams, and the delay relay of tests/lib/udp_relay.py.
#
# usage (inside a namespace, from paced_transfer() or a test):
#   load_helpers.py --recv BIND PORT
#   load_helpers.py --paced-send DEST PORT BYTES RATE_BITS_PER_S
#   load_helpers.py --flood SRC DST N_NATT N_IKE SECS SEED
#   load_helpers.py --delay-relay ARGS...   (udp_relay.delay_main)
# Each prints one JSON line ({"ready": true} first for --recv) and exits.
"""Paced TCP, junk IKE flood and delay relay helpers for the IKE tests."""

import json
import os
import subprocess
import sys
import time

import netns
from netns import TestError

SELF = os.path.abspath(__file__)
PACED_RATE = 27_000_000  # bit/s: 100 MB take ~30 s
SLOW_FACTOR = 1.5  # a paced transfer may take at most this times its plan
MAX_GAP_S = 5.0  # longest pause of the receiver's byte stream


def delta(after, before, key):
    """delta() - how far counter `key` moved between two dicts of counters."""
    return (after.get(key) or 0) - (before.get(key) or 0)


def snmp(ns):
    """snmp() - the namespace's /proc/net/snmp and /proc/net/netstat as
    {"Tcp.RetransSegs": n, "TcpExt.TCPTimeouts": n, ...}."""
    p = ns.run("cat", "/proc/net/snmp", "/proc/net/netstat", check=False)
    out, lines = {}, p.stdout.splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        proto, _, names = head.partition(":")
        _, _, nums = vals.partition(":")
        for k, v in zip(names.split(), nums.split()):
            try:
                out[f"{proto}.{k}"] = int(v)
            except ValueError:
                pass
    return out


def _emit(**kw):
    print(json.dumps(kw), flush=True)


def _helper_recv(bind, port):
    """Accept one TCP connection, hash everything; report bytes, SHA-256 and
    the longest pause between two reads (a stall shows up here)."""
    import hashlib
    import socket
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(30)
    _emit(ready=True)
    conn, _ = srv.accept()
    conn.settimeout(30)
    h, n, t0 = hashlib.sha256(), 0, time.monotonic()
    last, max_gap, gap_at = None, 0.0, 0.0
    while True:
        b = conn.recv(256 * 1024)
        now = time.monotonic()
        if not b:
            break
        if last is not None and now - last > max_gap:
            max_gap, gap_at = now - last, last - t0
        last = now
        h.update(b)
        n += len(b)
    _emit(bytes=n, sha256=h.hexdigest(), secs=round(time.monotonic() - t0, 3),
          max_gap=round(max_gap, 3), gap_at=round(gap_at, 2))


def _helper_paced_send(dest, port, total, rate):
    """Send `total` random bytes at `rate` bit/s (token schedule: byte n is
    due at n*8/rate s); report bytes, SHA-256 and how far it fell behind."""
    import hashlib
    import socket
    s = socket.create_connection((dest, port), timeout=30)
    s.settimeout(30)
    h, n, t0, behind = hashlib.sha256(), 0, time.monotonic(), 0.0
    block, chunk = os.urandom(4 << 20), 32 * 1024
    while n < total:
        due = t0 + n * 8 / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        else:
            behind = max(behind, now - due)
        if n and n % len(block) == 0:
            block = os.urandom(len(block))  # fresh data: a repeat could hide reordering
        off = n % len(block)
        b = block[off:off + min(chunk, total - n, len(block) - off)]
        s.sendall(b)
        h.update(b)
        n += len(b)
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):
        pass
    s.close()
    _emit(bytes=n, sha256=h.hexdigest(), secs=round(time.monotonic() - t0, 3),
          max_behind=round(behind, 3))


def _junk(rnd):
    """_junk() - (kind, bytes): one datagram body that is no valid IKE message
    of any SA. Never an IKE_SA_INIT request with a zero responder SPI and
    message ID 0 (that one would open a half-open SA: a different test)."""
    import struct
    k = rnd.random()

    def header(exchange, flags, length, spi_r=None, version=0x20, first=46, mid=None):
        return struct.pack("!QQBBBBII", rnd.getrandbits(64) | 1,
                           rnd.getrandbits(64) | 1 if spi_r is None else spi_r,
                           first, version, exchange, flags,
                           rnd.getrandbits(32) if mid is None else mid, length)

    if k < 0.30:  # raw junk of any length
        return "random", rnd.randbytes(rnd.randint(1, 1400))
    if k < 0.55:  # a plausible header with an SK payload of an unknown SA
        body = rnd.randbytes(rnd.randint(0, 400))
        sk = struct.pack("!BBH", rnd.choice((0, 33, 35, 41, 42)), 0, 4 + len(body)) + body
        msg = header(rnd.choice((35, 36, 37)), rnd.choice((0x00, 0x08, 0x20, 0x28)),
                     28 + len(sk)) + sk
        return "sk_unknown_sa", msg
    if k < 0.70:  # the same, truncated: the length field claims more
        body = rnd.randbytes(rnd.randint(8, 400))
        sk = struct.pack("!BBH", 33, 0, 4 + len(body)) + body
        msg = header(rnd.choice((35, 36, 37)), 0x08, 28 + len(sk)) + sk
        return "truncated", msg[:rnd.randint(1, len(msg) - 1)]
    if k < 0.78:  # shorter than an IKE header
        return "short_header", header(37, 0x08, 28)[:rnd.randint(1, 27)]
    if k < 0.86:  # IKE_SA_INIT "request" with a responder SPI, payloads cut short
        body = rnd.randbytes(rnd.randint(4, 300))
        sa = struct.pack("!BBH", 34, 0, 4 + len(body) + 20) + body  # claims 20 more bytes
        return "init_bad_request", header(34, 0x08, 28 + len(sa), first=33, mid=0) + sa
    if k < 0.93:  # IKE_SA_INIT "response" for an SA nobody started
        body = rnd.randbytes(rnd.randint(0, 300))
        sa = struct.pack("!BBH", 0, 0, 4 + len(body)) + body
        return "init_stray_response", header(34, 0x20, 28 + len(sa), first=33, mid=0) + sa
    # wrong version (IKEv1 / 3.0), wrong length field, random payload type
    body = rnd.randbytes(rnd.randint(0, 200))
    return "bad_version_or_length", header(rnd.choice((35, 37)), 0x08,
                                           rnd.choice((0, 27, 28 + len(body) + 100)),
                                           version=rnd.choice((0x10, 0x30, 0x20)),
                                           first=rnd.randint(0, 255)) + body


def _helper_flood(src, dst, n_natt, n_ike, secs, seed):
    """Send n_natt junk datagrams (non-ESP marker first) to dst:4500 and n_ike
    to dst:500, interleaved, spread over secs seconds, from src:<ephemeral>."""
    import random
    import socket
    rnd = random.Random(seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    plan = [4500] * n_natt + [500] * n_ike
    rnd.shuffle(plan)
    sent, kinds, errors = {"4500": 0, "500": 0}, {}, 0
    t0 = time.monotonic()
    for i, port in enumerate(plan):
        if i % 50 == 0:
            due = t0 + secs * i / len(plan)
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
        kind, body = _junk(rnd)
        data = b"\0\0\0\0" + body if port == 4500 else body
        try:
            s.sendto(data, (dst, port))
        except OSError:
            errors += 1
            continue
        sent[str(port)] += 1
        kinds[kind] = kinds.get(kind, 0) + 1
    _emit(sent=sent, kinds=kinds, errors=errors, secs=round(time.monotonic() - t0, 3),
          src_port=s.getsockname()[1])


def helper_main(argv):
    mode = argv[1]
    if mode == "--recv":
        _helper_recv(argv[2], int(argv[3]))
    elif mode == "--paced-send":
        _helper_paced_send(argv[2], int(argv[3]), int(argv[4]), float(argv[5]))
    elif mode == "--flood":
        _helper_flood(argv[2], argv[3], int(argv[4]), int(argv[5]), float(argv[6]), int(argv[7]))
    elif mode == "--delay-relay":
        import udp_relay
        sys.exit(udp_relay.delay_main(argv[2:]))
    else:
        raise SystemExit(f"unknown helper mode {mode!r}")


TCP_STATS = ("Tcp.OutSegs", "Tcp.RetransSegs", "TcpExt.TCPTimeouts", "TcpExt.TCPLossProbes",
             "TcpExt.TCPFastRetrans", "TcpExt.TCPSackRecovery", "TcpExt.TCPDSACKRecv",
             "TcpExt.TCPSACKReorder", "TcpExt.TCPSpuriousRTOs")

def paced_transfer(rep, tag, src, dst, dst_addr, nbytes, rate=PACED_RATE, tick=None,
                   tick_every=1.0, port=5201):
    """paced_transfer() - nbytes from src to dst_addr at `rate` bit/s; calls
    tick(elapsed) about every tick_every s meanwhile. Checks the SHA-256 on
    both ends, the time (<= SLOW_FACTOR x plan) and the longest pause of the
    receiver. Returns (ok, secs, receiver result)."""
    planned = nbytes * 8 / rate
    limit = planned * SLOW_FACTOR + 10
    recv = dst.ns.spawn("timeout", str(int(limit + 15)), "/usr/bin/python3", SELF, "--recv",
                        dst_addr, str(port), stdout=subprocess.PIPE, text=True)
    line = netns.read_line(recv.stdout, 10)
    if not line or not json.loads(line).get("ready"):
        netns.stop_process(recv)
        raise TestError(f"transfer receiver did not start: {line!r}")
    t0 = time.monotonic()
    send = src.ns.spawn("timeout", str(int(limit + 10)), "/usr/bin/python3", SELF,
                        "--paced-send", dst_addr, str(port), str(nbytes), str(rate),
                        stdout=subprocess.PIPE, text=True)
    tcp0 = snmp(src.ns)
    sent, next_tick, deadline = None, t0, t0 + limit + 12
    while time.monotonic() < deadline:
        if tick and time.monotonic() >= next_tick:
            next_tick = time.monotonic() + tick_every
            tick(time.monotonic() - t0)
        line = netns.read_line(send.stdout, 0.1)
        if line is None:
            continue
        if line == "":  # EOF: the sender exited without its result line
            break
        sent = json.loads(line)
        break
    secs = time.monotonic() - t0
    try:
        out, _ = recv.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        recv.kill()
        out, _ = recv.communicate()
    got = json.loads(out.strip().splitlines()[-1]) if out and out.strip() else {}
    netns.stop_process(send, timeout=5)
    tcp1 = snmp(src.ns)
    real = delta(tcp1, tcp0, "Tcp.RetransSegs") - delta(tcp1, tcp0, "TcpExt.TCPDSACKRecv")
    rep.info(f"sender ({src.name}) TCP: " + ", ".join(
        f"{k.split('.')[1]} {delta(tcp1, tcp0, k)}" for k in TCP_STATS)
        + f"; retransmissions not proven spurious by a DSACK: {max(0, real)}")
    ok = rep.check(sent and got and sent.get("bytes") == nbytes and got.get("bytes") == nbytes
                   and sent.get("sha256") == got.get("sha256"),
                   f"[{tag}] {nbytes // 1000000} MB TCP {src.name} -> {dst.name} paced at "
                   f"{rate / 1e6:.0f} Mbit/s: SHA-256 equal on both ends",
                   f"sender {sent}, receiver {got}")
    rep.check(secs <= planned * SLOW_FACTOR,
              f"[{tag}] no stall: took {secs:.1f} s for a plan of {planned:.1f} s "
              f"(limit {SLOW_FACTOR}x = {planned * SLOW_FACTOR:.1f} s)", f"sender {sent}")
    gap = got.get("max_gap")
    rep.check(gap is not None and gap <= MAX_GAP_S,
              f"[{tag}] longest pause of the received stream {gap} s at t={got.get('gap_at')} s "
              f"(<= {MAX_GAP_S} s); the sender fell behind its schedule by at most "
              f"{(sent or {}).get('max_behind')} s", f"receiver {got}")
    return ok, secs, got


if __name__ == "__main__":
    helper_main(sys.argv)
