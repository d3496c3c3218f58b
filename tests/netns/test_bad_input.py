#!/usr/bin/python3
# test_bad_input.py - esptun-gateway survives hostile input and accounts for
# every datagram: garbage, truncated ESP, NAT keepalives, non-ESP markers,
# unknown SPIs, flipped bits under the ICV, replays (exact and too old),
# inner sources outside allowed_ips, dummy (next header 59) packets, bad
# padding, and good packets in between. Each drop/ignore counter must move by
# exactly the expected amount, udp_rx_packets by the total, and good traffic
# must still be delivered afterwards. Then `check` on broken configs exits
# non-zero with a message and never crashes.
#
#   netns A (et-bad-PID-a)                      netns B (et-bad-PID-b)
#  +-------------------------------+           +-----------------------------+
#  | UDP listener 10.99.0.1:5001   |           | this driver: scapy SA with  |
#  |   (counts what is delivered)  |           | the gateway's inbound keys, |
#  | tun ebadN 10.99.0.1/24        |           | raw UDP sockets             |
#  |   (IPv6 off: no kernel chatter|           |   10.201.0.2:4500 (peer)    |
#  |    so counters are exact)     |           |   10.201.0.2:5555 (stranger)|
#  | esptun-gateway run            |           |                             |
#  |   peer "site-b" 10.99.0.2/32  |           |   10.201.0.2:4501 (site-c)  |
#  |   peer "site-c" 10.99.0.3/32  |           |                             |
#  | ula 10.201.0.1/24 ------------ veth ------ ulb 10.201.0.2/24           |
#  +-------------------------------+           +-----------------------------+
"""Hostile datagrams and broken configs against esptun-gateway."""

import json
import os
import random
import socket
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
from esp_scapy import ScapyEsp  # noqa: E402
from netns import TestError  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.packet import Raw, raw  # noqa: E402

A_UL, B_UL = "10.201.0.1", "10.201.0.2"
A_IN, B_IN, C_IN = "10.99.0.1", "10.99.0.2", "10.99.0.3"
PORT = 5001
SPI_IN, SPI_OUT = 0x3001, 0x3002  # site-b
SPI_IN_C, SPI_OUT_C = 0x4001, 0x4002  # site-c: a second peer behind the same B address
WINDOW = 1024
SUITES = [("aes256-gcm", True), ("aes128-cbc-hmac-sha256", False), ("aes128-cbc-hmac-sha1", True)]


class Injector:
    """Sends datagrams from B and keeps the expected accounting."""

    def __init__(self, rep, ctx, cipher, esn):
        self.rep, self.ctx, self.cipher, self.esn = rep, ctx, cipher, esn
        self.suite = conf.SUITES[cipher]
        self.keys = conf.SaKeys.random(cipher, SPI_IN)
        self.esp = ScapyEsp(cipher, self.keys, esn, B_UL, A_UL)
        self.keys_c = conf.SaKeys.random(cipher, SPI_IN_C)
        self.esp_c = ScapyEsp(cipher, self.keys_c, esn, B_UL, A_UL)
        self.sent = 0
        self.expect = {}  # "drops.x" / "ignored.x" -> count
        self.delivered = []  # payloads the listener must see, in order
        # Payloads sent from another socket (another 4-tuple): the kernel may
        # hash them to another worker, so only their arrival is checked.
        self.unordered = set()

    def send(self, data, sock=None):
        (sock or self.ctx.peer_sock).sendto(data, (A_UL, 4500))
        self.sent += 1

    def bad(self, counter, data, sock=None):
        self.expect[counter] = self.expect.get(counter, 0) + 1
        self.send(data, sock)

    def inner(self, src=B_IN, payload=None):
        payload = os.urandom(random.randint(1, 300)) if payload is None else payload
        ip = IPv6 if ":" in src else IP
        dst = "fd99::1" if ":" in src else A_IN
        return ip(src=src, dst=dst) / UDP(sport=7777, dport=PORT) / Raw(payload), payload

    def good(self, seq, src=B_IN, esp=None, sock=None):
        pkt, payload = self.inner(src)
        data = (esp or self.esp).seal(pkt, seq)
        self.send(data, sock)
        self.delivered.append(payload)
        if sock is not None:
            self.unordered.add(payload)
        return data

    def sealed(self, seq, src=B_IN, esp=None):
        return (esp or self.esp).seal(self.inner(src)[0], seq)


def flip(data, index, bit=0):
    b = bytearray(data)
    b[index] ^= 1 << bit
    return bytes(b)


def inject_all(inj):
    """The hostile sequence; returns a list of (what, counter, n) for the report."""
    s = inj.suite
    iv, icv = s["iv"], s["icv"]
    stranger = inj.ctx.stranger_sock

    for seq in range(1, 21):  # 20 good packets
        inj.good(seq)
    # Sequence number 0 is never sent (RFC 4303 3.3.3: the counter starts at
    # 1 and must not cycle), so it is never valid, even inside the window.
    inj.bad("drops.replay", inj.sealed(0))
    good3 = inj.sealed(3)  # never sent: a *different* valid packet with seq 3 (replay below)

    # Garbage too short to be ESP (RFC 3948: a single 0xFF is a keepalive, 4
    # zero bytes a non-ESP marker; anything else under 8 bytes cannot be ESP).
    for g in (b"", b"\x01", b"\xff\xff", b"\x00\x00\x00", b"\x5a" + os.urandom(6)):
        inj.bad("drops.malformed", g)
    # Truncated ESP with our SPI: header only, header + IV, one byte short of IV + ICV.
    t = inj.sealed(30)
    for n in (8, 8 + iv, 8 + iv + icv - 1):
        inj.bad("drops.malformed", t[:n])

    for _ in range(3):
        inj.bad("ignored.nat_keepalive", b"\xff")
    for _ in range(2):  # an IKE message behind the non-ESP marker
        inj.bad("ignored.non_esp_marker", b"\x00\x00\x00\x00" + os.urandom(28))

    # Unknown SPI: properly sealed under another SPI, and random bytes.
    other = ScapyEsp(inj.cipher, conf.SaKeys(0x0badf00d, inj.keys.enc, inj.keys.auth), inj.esn,
                     B_UL, A_UL)
    inj.bad("drops.unknown_spi", other.seal(inj.inner()[0], 31))
    inj.bad("drops.unknown_spi", other.seal(inj.inner()[0], 32), sock=stranger)
    for _ in range(2):
        inj.bad("drops.unknown_spi", b"\x7e" + os.urandom(99), sock=stranger)

    # One bit flipped under the ICV: in the ICV, in the ciphertext, in the
    # sequence number (seq 102 -> 103). None of them may advance the window.
    p100 = inj.sealed(100)
    inj.bad("drops.auth_failed", flip(p100, len(p100) - 1, 7))
    p101 = inj.sealed(101)
    inj.bad("drops.auth_failed", flip(p101, 8 + iv + 3, 2))
    inj.bad("drops.auth_failed", flip(inj.sealed(102), 7, 0))
    inj.send(p100)  # the untouched seq 100 still gets in: failed ICVs commit nothing
    inj.delivered.append(None)  # payload unknown here: counted, not compared

    # Replays: exact copies, a different packet with an old number, too old.
    inj.bad("drops.replay", p100)
    inj.bad("drops.replay", good3)
    last = inj.sealed(20)
    inj.bad("drops.replay", last)
    inj.good(2000)
    # Below the window. Without ESN that is a replay; with ESN the receiver
    # must assume the low 32 bits wrapped (RFC 4303 Appendix A2.2: seq_hi =
    # Th + 1), so the ICV computed with seq_hi 0 fails: auth_failed.
    too_old = "drops.auth_failed" if inj.esn else "drops.replay"
    inj.bad(too_old, inj.sealed(2000 - WINDOW - 400))
    in_window = inj.good(2000 - WINDOW // 2)  # inside the window, never seen: accepted

    # Authenticated, but the inner source is not in allowed_ips (RFC 4301 5.2).
    inj.bad("drops.policy", inj.sealed(2001, src="10.99.0.77"))
    inj.bad("drops.policy", inj.sealed(2002, src="fd99::2"))
    # Two peers: each SA may only carry its own peer's addresses (no
    # cross-peer spoofing), and the second peer's own traffic gets through.
    inj.bad("drops.policy", inj.sealed(2008, src=C_IN))
    inj.good(1, src=C_IN, esp=inj.esp_c, sock=inj.ctx.c_sock)
    inj.bad("drops.policy", inj.sealed(2, src=B_IN, esp=inj.esp_c), sock=inj.ctx.c_sock)
    # Authenticated, but what is inside is not the IP packet next header names.
    body4 = raw(inj.inner()[0])
    body6 = raw(inj.inner("fd99::2")[0])
    inj.bad("drops.malformed", inj.esp.seal_raw(body4, 41, 2009))  # IPv4 labelled IPv6
    inj.bad("drops.malformed", inj.esp.seal_raw(body6, 4, 2010))  # IPv6 labelled IPv4
    inj.bad("drops.malformed", inj.esp.seal_raw(body4[20:], 6, 2011))  # transport-mode TCP
    inj.bad("drops.malformed",  # IPv4 total length 1500, far past the payload
            inj.esp.seal_raw(body4[:2] + b"\x05\xdc" + body4[4:], 4, 2012))
    # Dummy packet (next header 59, RFC 4303 2.6): dropped silently, counted.
    inj.bad("ignored.dummy_packet", inj.esp.seal_raw(os.urandom(40), 59, 2013))
    # Pad length larger than the payload in front of it.
    body = raw(inj.inner()[0])
    inj.bad("drops.padding", inj.esp.seal_raw(body[:20], 4, 2014, padlen=250))
    # Padding bytes not 1, 2, 3... (RFC 4303 2.4 default padding).
    align = s["block"]
    minimal = -(len(body) + 2) % align
    inj.bad("drops.padding", inj.esp.seal_raw(body, 4, 2015, padding=b"\x00" * (minimal + align),
                                              padlen=minimal + align))

    # From a stranger's address: a replayed and a forged packet must not move
    # the peer's endpoint (only authenticated, fresh packets may, RFC 3948 /
    # RFC 4301 roaming): otherwise a replay hijacks the tunnel.
    inj.bad("drops.replay", in_window, sock=stranger)
    inj.bad("drops.auth_failed", flip(inj.sealed(2016), 9, 1), sock=stranger)

    inj.good(2020)  # good traffic still flows afterwards


def run_suite(rep, ctx, idx, cipher, esn):
    tag = f"{cipher} esn={'on' if esn else 'off'}"
    inj = Injector(rep, ctx, cipher, esn)
    tun = f"ebad{os.getpid() % 100000}{idx}"
    ep = conf.Endpoint(
        interface=tun, addresses=[f"{A_IN}/24"],
        control_socket=os.path.join(ctx.tmp, f"{tun}.sock"),
        peers=[conf.Peer(name="site-b", cipher=cipher, out=conf.SaKeys.random(cipher, SPI_OUT),
                         inb=inj.keys, allowed_ips=[f"{B_IN}/32"], endpoint=f"{B_UL}:4500",
                         esn=esn, replay_window=WINDOW),
               conf.Peer(name="site-c", cipher=cipher, out=conf.SaKeys.random(cipher, SPI_OUT_C),
                         inb=inj.keys_c, allowed_ips=[f"{C_IN}/32"], endpoint=f"{B_UL}:4501",
                         esn=esn, replay_window=WINDOW)])
    cfg = ep.write(os.path.join(ctx.tmp, f"{tun}.toml"))
    gw = esptun_proc.Endpoint(ctx.build, ctx.a, cfg, os.path.join(ctx.tmp, f"{tun}.log"))
    ctx.log = gw.log
    gw.start()
    try:
        netns.wait_until(lambda: f"{A_IN}/24" in ctx.a.ip("-4", "addr", "show", "dev", tun).stdout,
                         5, what=f"address on {tun}")
        listener = ctx.a.socket(socket.AF_INET, socket.SOCK_DGRAM, bind=(A_IN, PORT), timeout=2)
        try:
            time.sleep(0.2)
            before = gw.status()
            inject_all(inj)
            got = []
            listener.settimeout(2)
            while len(got) < len(inj.delivered):
                try:
                    got.append(listener.recv(65535))
                except socket.timeout:
                    break
            listener.settimeout(0.3)
            try:
                extra = listener.recv(65535)
            except socket.timeout:
                extra = None
        finally:
            listener.close()
        # The counters move when the last datagram was processed: poll briefly.
        total = inj.sent

        def settled():
            st = gw.status()
            return st if st["counters"]["udp_rx_packets"] - before["counters"]["udp_rx_packets"] \
                >= total else None
        try:
            after = netns.wait_until(settled, 3, what="udp_rx_packets to count every datagram")
        except TestError:
            after = gw.status()
        d = esptun_proc.counters_delta(before, after)

        rep.check(gw.alive(), f"[{tag}] gateway still running after {total} hostile/good datagrams")
        want = [p for p in inj.delivered]
        # In order: the packets of the one underlay 4-tuple (one worker);
        # those from other sockets may interleave anywhere.
        in_order = [p for p in want if p is not None and p not in inj.unordered]
        known = set(in_order)
        same = (len(got) == len(want) and [g for g in got if g in known] == in_order
                and all(p in got for p in inj.unordered))
        rep.check(same and extra is None,
                  f"[{tag}] listener got exactly the {len(want)} good packets, in order "
                  f"(the {len(inj.unordered)} from other sockets anywhere), nothing else",
                  f"got {len(got)} (+extra {extra is not None}), want {len(want)}; "
                  f"in-order part equal: {[g for g in got if g in known] == in_order}")
        rep.equal(d["counters.udp_rx_packets"], total, f"[{tag}] udp_rx_packets moved by the total")
        rep.equal(d["counters.tun_tx_packets"], len(want), f"[{tag}] tun_tx_packets")
        rep.equal(d["counters.udp_tx_packets"], 0, f"[{tag}] nothing sent back to B")
        for key in sorted(k for k in d if k.startswith(("drops.", "ignored."))):
            rep.equal(d[key], inj.expect.get(key, 0), f"[{tag}] {key}")
        missing = set(inj.expect) - set(d)
        rep.check(not missing, f"[{tag}] status has every expected counter", str(missing))
        p = esptun_proc.peer(after, "site-b")
        rep.equal(p["sa_in"]["highest_seq"], 2020, f"[{tag}] sa_in.highest_seq")
        rep.equal(p["endpoint"], f"{B_UL}:4500",
                  f"[{tag}] peer endpoint unchanged (a stranger's replayed or forged packets "
                  "do not move it)")
        rep.equal(p["endpoint_changes"], 0, f"[{tag}] endpoint_changes")
        pc = esptun_proc.peer(after, "site-c")
        # highest_seq 2: the spoofing packet (seq 2) authenticated, so it moved
        # the window before the policy check dropped it (RFC 4303 3.4.3 order).
        rep.check(pc["sa_in"]["packets"] == 1 and pc["sa_in"]["highest_seq"] == 2
                  and pc["endpoint"] == f"{B_UL}:4501",
                  f"[{tag}] site-c: its one good packet counted on its own SA (highest_seq 2), "
                  f"endpoint {B_UL}:4501", json.dumps(pc))
    finally:
        rc = gw.stop()
        rep.equal(rc, 0, f"[{tag}] SIGTERM -> exit code")


# ---------------------------------------------------------------------------
# Broken configs: `check` must refuse them with a message, never crash.

GOOD = """[tunnel]
interface = "esp0"
addresses = ["10.99.0.1/24"]
listen = "0.0.0.0:4500"
control_socket = "{dir}/c.sock"

[[peer]]
name = "site-b"
endpoint = "10.201.0.2:4500"
allowed_ips = ["10.99.0.2/32"]
cipher = "aes128-gcm"
esn = true
replay_window = 1024
  [peer.out]
  spi = 0x1001
  key = "0x{k1}"
  [peer.in]
  spi = 0x2001
  key = "0x{k2}"
"""


def broken_configs(d):
    """(what, text or bytes, must name a line?) for each broken config."""
    good = GOOD.format(dir=d, k1="11" * 20, k2="22" * 20)
    sub = good.replace
    return [
        ("empty file", "", False),
        ("binary garbage", bytes(random.Random(7).randrange(256) for _ in range(300)), False),
        ("TOML syntax error", good + "\n[[peer\n", True),
        ("no peer", good.split("[[peer]]")[0], False),
        ("GCM key 10 bytes", sub("0x" + "11" * 20, "0x" + "11" * 10), True),
        ("key not hex", sub("0x" + "11" * 20, "0xzz" + "11" * 19), True),
        ("SPI 0", sub("spi = 0x1001", "spi = 0"), True),
        ("SPI too large", sub("spi = 0x1001", "spi = 0x1ffffffff"), True),
        ("interface name of 16 chars", sub('"esp0"', '"abcdefghijklmnop"'), True),
        ("bad prefix", sub('"10.99.0.2/32"', '"10.99.0.300/32"'), True),
        ("prefix length 33", sub('"10.99.0.2/32"', '"10.99.0.2/33"'), True),
        ("unknown cipher", sub('"aes128-gcm"', '"chacha20"'), True),
        ("esn not a bool", sub("esn = true", 'esn = "yes"'), True),
        ("negative replay window", sub("replay_window = 1024", "replay_window = -1"), True),
        ("huge replay window", sub("replay_window = 1024", "replay_window = 99999999999"), True),
        ("listen without port number", sub('"0.0.0.0:4500"', '"0.0.0.0:"'), True),
        ("listen port 70000", sub('"0.0.0.0:4500"', '"0.0.0.0:70000"'), True),
        ("endpoint not an address", sub('"10.201.0.2:4500"', '"site-b.example:4500"'), True),
        ("unknown tun_io", sub('listen = ', 'tun_io = "turbo"\nlisten = '), True),
        ("duplicate inbound SPI", good + good.split("[tunnel]")[1].split("\n\n", 1)[1]
         .replace('"site-b"', '"site-c"').replace("10.99.0.2/32", "10.99.0.3/32")
         .replace("0x1001", "0x1003"), True),
        ("nested arrays 100000 deep", good + "x = " + "[" * 100000 + "]" * 100000 + "\n", False),
        ("1 MB string value", sub('"site-b"', '"' + "b" * (1 << 20) + '"'), True),
        ("key file readable by others", sub('key = "0x' + "22" * 20 + '"', 'key_file = "k.hex"'),
         False),
    ]


def check_configs(rep, ctx):
    d = os.path.join(ctx.tmp, "cfg")
    os.mkdir(d, 0o700)
    with open(os.path.join(d, "k.hex"), "w") as f:
        f.write("0x" + "33" * 20 + "\n")
    os.chmod(os.path.join(d, "k.hex"), 0o644)

    good = os.path.join(d, "good.toml")
    with open(good, "w") as f:
        f.write(GOOD.format(dir=d, k1="11" * 20, k2="22" * 20))
    os.chmod(good, 0o600)  # it holds keys inline: esptun refuses it readable by others
    p = esptun_proc.run_check(ctx.build, good)
    rep.check(p.returncode == 0, "check accepts the reference config",
              (p.stdout + p.stderr)[-300:])

    for i, (what, text, has_line) in enumerate(broken_configs(d)):
        path = os.path.join(d, f"bad{i}.toml")
        with open(path, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        os.chmod(path, 0o600)
        p = esptun_proc.run_check(ctx.build, path)
        msg = (p.stderr or p.stdout).strip()
        named = f"{path}:" in msg if has_line else path in msg
        rep.check(0 < p.returncode < 128 and msg and named,
                  f"check refuses {what}: exit {p.returncode}, "
                  f"'{msg.splitlines()[0][len(d) + 1:][:90] if msg else ''}'",
                  f"exit {p.returncode} (negative or >= 128 = crash), output {msg[:300]!r}")

    # Random byte mutations of the good config: any exit code, but no crash.
    base = GOOD.format(dir=d, k1="11" * 20, k2="22" * 20).encode()
    rng = random.Random(4500)
    crashes = []
    for i in range(60):
        b = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            op = rng.randrange(3)
            pos = rng.randrange(len(b))
            if op == 0:
                b[pos] = rng.randrange(256)
            elif op == 1:
                del b[pos:pos + rng.randint(1, 20)]
            else:
                b[pos:pos] = bytes(rng.choice(b'[]{}="\\,.0x\n#') for _ in range(rng.randint(1, 5)))
        path = os.path.join(d, f"mut{i}.toml")
        with open(path, "wb") as f:
            f.write(bytes(b))
        os.chmod(path, 0o600)
        p = esptun_proc.run_check(ctx.build, path)
        if p.returncode < 0 or p.returncode >= 128 or (p.returncode != 0 and not p.stderr.strip()):
            crashes.append(f"{path}: exit {p.returncode} {p.stderr[-200:]!r}")
    rep.check(not crashes, "check on 60 randomly mutated configs: never a crash, every refusal "
              "has a message", "\n".join(crashes[:5]))


def body(rep, build):
    class Ctx:
        pass

    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.log = build, netns.make_tempdir("bad"), None
    rep.on_failure.append(lambda: ctx.log and print(f"\n--- {ctx.log}:\n{netns.tail(ctx.log, 30)}"))

    rep.section("topology")
    ctx.a = netns.Netns(netns.unique("bad", "a"))
    ctx.b = netns.Netns(netns.unique("bad", "b"))
    # IPv6 off on the tun: the kernel sends no MLD/RS into it, so every
    # counter below moves only because of what this test sends.
    ctx.a.sysctl({"net.ipv6.conf.default.disable_ipv6": 1})
    netns.veth(ctx.a, ctx.b, "ula", "ulb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    ctx.peer_sock = ctx.b.socket(socket.AF_INET, socket.SOCK_DGRAM, bind=(B_UL, 4500))
    ctx.stranger_sock = ctx.b.socket(socket.AF_INET, socket.SOCK_DGRAM, bind=(B_UL, 5555))
    ctx.c_sock = ctx.b.socket(socket.AF_INET, socket.SOCK_DGRAM, bind=(B_UL, 4501))
    rep.info(f"{ctx.a.name} <-> {ctx.b.name}")
    try:
        for idx, (cipher, esn) in enumerate(SUITES):
            rep.section(f"hostile datagrams: {cipher}, ESN {'on' if esn else 'off'}")
            try:
                run_suite(rep, ctx, idx, cipher, esn)
            except TestError as e:
                rep.check(False, f"[{cipher}] {str(e).splitlines()[0]}", str(e)[:2000])
        rep.section("broken configs")
        check_configs(rep, ctx)
    finally:
        ctx.peer_sock.close()
        ctx.stranger_sock.close()
        ctx.c_sock.close()


if __name__ == "__main__":
    report.main("netns/bad_input", body)
