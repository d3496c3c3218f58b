#!/usr/bin/python3
# test_scapy_esp.py - esptun-gateway interoperates with an independent ESP
# implementation (scapy's SecurityAssociation, tunnel mode, NAT-T UDP header)
# for every cipher suite, ESN on and off, inner IPv4 and IPv6, underlay IPv4
# and IPv6.
#
#   netns A (et-scapy-PID-a)                       netns B (et-scapy-PID-b)
#  +-------------------------------+              +---------------------------+
#  | UDP sockets 10.99.0.1:5001    |              | scapy SA (this driver)    |
#  |             [fd99::1]:5002    |              |  UDP socket               |
#  | kernel (answers ICMP echo)    |              |   10.201.0.2:4500         |
#  |        |                      |              |   [fd01::2]:4500          |
#  |   tun esN (10.99.0.1/24,      |              |                           |
#  |            fd99::1/64)        |              | inner peer addresses:     |
#  |        |                      |              |   10.99.0.2, fd99::2      |
#  |   esptun-gateway run          |              |                           |
#  |    listen 0.0.0.0:4500 / [::] |              |                           |
#  |   ula 10.201.0.1/24 fd01::1/64+--- veth -----+ ulb 10.201.0.2/24         |
#  +-------------------------------+              |     fd01::2/64            |
#                                                 +---------------------------+
#
# One driver process holds sockets in both namespaces (created after setns);
# one gateway process per cipher configuration. Checks per configuration:
#  a) scapy seals inner UDP 10.99.0.2 -> 10.99.0.1 (and fd99::2 -> fd99::1)
#     of several sizes; the listener in A receives exactly the payload.
#  b) a socket in A sends UDP to 10.99.0.2 / fd99::2 (route via the tun);
#     scapy opens the ESP datagram B receives: SPI, sequence 1, 2, 3..., IV
#     (GCM: the 64-bit sequence number), padding 1, 2, 3... to the minimal
#     length, next header 4/41, the inner packet exactly as sent; a packet of
#     exactly the tun MTU fits the 1500-byte underlay unfragmented.
#  c) an ICMP/ICMPv6 echo request sealed by scapy is answered by A's kernel;
#     the echo reply comes back sealed by esptun and opens in scapy.
#  d) a packet sealed with the wrong ESN mode (ICV with/without seq_hi) is
#     dropped as auth_failed and not delivered; good traffic still flows.
#  e) status counters match exactly; SIGTERM exits 0 and removes tun and routes.
#  f) ESN on: the inbound sequence crosses 2^32 (scapy puts seq_hi 1 under
#     the ICV); the gateway infers the epoch, delivers, and still accepts a
#     late packet from the old epoch inside the window.
#  g) ECN (RFC 6040 normal mode): a packet A sends with DSCP EF and each ECN
#     field leaves with that ECN field and DSCP 0 in the outer header, the
#     inner header unchanged; scapy's packets sent with an outer ECN mark
#     arrive in A combined by RFC 6040's table (CE over ECT -> CE, ECT(1)
#     over ECT(0) -> ECT(1), nothing over CE changes it), DSCP kept, and a CE
#     mark over a Not-ECT packet drops it (counted as drops.ce_not_ect).
"""Interop of esptun-gateway with scapy's ESP, all suites."""

import os
import random
import socket
import struct
import sys

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
from esp_scapy import ScapyEsp, expected_padlen  # noqa: E402
from scapy.layers.inet import ICMP, IP, UDP  # noqa: E402
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, IPv6  # noqa: E402
from scapy.packet import Raw, raw  # noqa: E402

UL = {4: ("10.201.0.1", "10.201.0.2"), 6: ("fd01::1", "fd01::2")}  # underlay A, B
IN = {4: ("10.99.0.1", "10.99.0.2"), 6: ("fd99::1", "fd99::2")}  # inner A, B
FAM = {4: socket.AF_INET, 6: socket.AF_INET6}
LISTEN_PORT = {4: 5001, 6: 5002}
B_PORT = {4: 6001, 6: 6002}
SIZES = [0, 1, 13, 14, 200, 1000]
SPI_IN, SPI_OUT = 0x2001, 0x1001  # gateway's in (scapy sends) / out (scapy receives)
RECV_TIMEOUT = 2.0
# Socket options by number: not every Python names them all.
IP_TOS, IP_RECVTOS = 1, 13
IPV6_RECVTCLASS, IPV6_TCLASS = 66, 67
ECN_NAME = ["Not-ECT", "ECT(1)", "ECT(0)", "CE"]
DSCP_EF = 0xb8  # DSCP 46 in the TOS byte: must not leak into the outer header
# g) inbound: (inner ECN, outer ECN, ECN delivered in A or None: dropped)
ECN_IN = [(2, 3, 3), (2, 1, 1), (1, 2, 1), (3, 0, 3), (0, 2, 0), (0, 3, None)]


def tos_of(ancdata):
    """The TOS (IP_TOS, one byte) or traffic class (IPV6_TCLASS, an int) in @ancdata, or None."""
    for level, kind, data in ancdata:
        if level == socket.IPPROTO_IP and kind == IP_TOS and len(data) >= 1:
            return data[0]
        if level == socket.IPPROTO_IPV6 and kind == IPV6_TCLASS and len(data) >= 4:
            return struct.unpack("i", data[:4])[0]
    return None


def recv_tos(sock):
    """Let @sock report each datagram's TOS / traffic class."""
    if sock.family == socket.AF_INET:
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    else:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVTCLASS, 1)

# (cipher, esn, underlay family, crypto_impl): every suite with ESN on and off
# over IPv4 (the CBC-HMAC ones with both the stitched one-pass and the
# two-pass implementation), and one CBC and one GCM suite over IPv6.
CASES = [(c, esn, 4, impl) for c in conf.SUITES for esn in (True, False)
         for impl in (("auto",) if conf.SUITES[c]["aead"] else ("stitched", "two-pass"))] + [
    ("aes128-cbc-hmac-sha256", True, 6, "auto"), ("aes256-gcm", False, 6, "auto")]


class Case:
    """One gateway configuration and the scapy peer that talks to it."""

    def __init__(self, rep, ctx, idx, cipher, esn, ulfam, impl):
        self.rep, self.ctx = rep, ctx
        self.cipher, self.esn, self.ulfam, self.impl = cipher, esn, ulfam, impl
        self.tag = f"{cipher} esn={'on' if esn else 'off'} underlay=IPv{ulfam} impl={impl}"
        self.tun = f"es{os.getpid() % 100000}x{idx}"
        self.gw_out = conf.SaKeys.random(cipher, SPI_OUT)  # gateway -> scapy
        self.gw_in = conf.SaKeys.random(cipher, SPI_IN)  # scapy -> gateway
        a_ul, b_ul = UL[ulfam]
        # scapy's SAs: it sends with the gateway's "in", receives on its "out".
        self.tx = ScapyEsp(cipher, self.gw_in, esn, b_ul, a_ul)
        self.rx = ScapyEsp(cipher, self.gw_out, esn, a_ul, b_ul)
        self.in_seq = 0  # last sequence number (low 32 bits) scapy sent
        self.in_highest = 0  # highest 64-bit sequence number the gateway accepted
        self.in_valid = 0  # packets the gateway must accept
        self.in_sent = 0  # datagrams sent to the gateway
        self.out_seq = 0  # packets the gateway must have sealed
        self.ecn_drops = 0  # g) packets the gateway must drop as ce_not_ect
        self.outer_tos = None  # TOS / traffic class of the last ESP datagram B received
        self.ivs = set()

    # -- set-up -------------------------------------------------------------

    def start(self):
        ctx, b_ul = self.ctx, UL[self.ulfam][1]
        ep = conf.Endpoint(
            interface=self.tun, addresses=["10.99.0.1/24", "fd99::1/64"],
            listen="0.0.0.0:4500" if self.ulfam == 4 else "[::]:4500",
            control_socket=os.path.join(ctx.tmp, f"{self.tun}.sock"), crypto_impl=self.impl,
            peers=[conf.Peer(name="scapy", cipher=self.cipher, out=self.gw_out, inb=self.gw_in,
                             allowed_ips=["10.99.0.2/32", "fd99::2/128"],
                             endpoint=(f"{b_ul}:4500" if self.ulfam == 4 else f"[{b_ul}]:4500"),
                             esn=self.esn, replay_window=1024)])
        cfg = ep.write(os.path.join(ctx.tmp, f"{self.tun}.toml"))
        self.gw = esptun_proc.Endpoint(ctx.build, ctx.a, cfg, os.path.join(ctx.tmp, "gateway.log"))
        self.gw.start()
        ctx.current_log = self.gw.log
        st = netns.wait_until(self._ready_status, 5, what=f"addresses on {self.tun}")
        self.mtu = st["mtu"]
        p = esptun_proc.peer(st, "scapy")
        self.rep.check(st.get("program") == "esptun-gateway" and st.get("interface") == self.tun
                       and p.get("cipher") == self.cipher and p.get("esn") == self.esn
                       and p["sa_out"]["spi"] == SPI_OUT and p["sa_in"]["spi"] == SPI_IN
                       and p.get("endpoint_source") == "configured",
                       f"[{self.tag}] gateway up; status names the interface, cipher, ESN, SPIs "
                       f"(mtu {self.mtu}, tun_io {st.get('tun_io', {}).get('mode')}, "
                       f"listen {st.get('listen')})", str(st)[:600])
        # The implementation asked for is the one in use (auto: stitched where
        # the CPU can, which the CI machines can; GCM with VAES where
        # /proc/cpuinfo lists what it needs).
        want = (conf.gcm_impl() if conf.SUITES[self.cipher]["aead"] else
                "two-pass" if self.impl == "two-pass" else "stitched")
        self.rep.equal(p.get("crypto_impl"), want, f"[{self.tag}] status: crypto_impl in use")
        link = ctx.a.ip("link", "show", "dev", self.tun).stdout
        self.rep.check(f" mtu {self.mtu} " in link, f"[{self.tag}] tun MTU in the kernel is the "
                       f"status mtu {self.mtu}", link.strip())
        self.before = st

    def _ready_status(self):
        out4 = self.ctx.a.ip("-4", "addr", "show", "dev", self.tun, check=False).stdout
        out6 = self.ctx.a.ip("-6", "addr", "show", "dev", self.tun, check=False).stdout
        if "10.99.0.1/24" in out4 and "fd99::1/64" in out6 and "tentative" not in out6:
            return self.gw.status()
        return None

    # -- a) scapy -> gateway -> listener in A -------------------------------

    def send_in(self, inner, seq=None, esn=None, seq_hi=0):
        if seq is None:
            self.in_seq += 1
            seq = self.in_seq
        data = self.tx.seal(inner, seq, esn=esn, seq_hi=seq_hi)
        self.ctx.bsock[self.ulfam].sendto(data, (UL[self.ulfam][0], 4500))
        self.in_sent += 1
        return data

    def inbound_udp(self, fam, size, seq_hi=0, seq=None, what=""):
        payload = os.urandom(size)
        sport = random.randint(20000, 30000)
        ip = IP if fam == 4 else IPv6
        inner = ip(src=IN[fam][1], dst=IN[fam][0]) / UDP(sport=sport, dport=LISTEN_PORT[fam]) / Raw(
            payload)
        if seq is not None:
            self.in_seq = seq
        self.send_in(inner, seq=seq, seq_hi=seq_hi)
        self.in_valid += 1
        self.in_highest = max(self.in_highest, (seq_hi << 32) | self.in_seq)
        try:
            got, src = self.ctx.listener[fam].recvfrom(65535)
        except socket.timeout:
            got, src = None, None
        self.rep.check(got == payload and src[0] == IN[fam][1] and src[1] == sport,
                       f"[{self.tag}] a) scapy->A inner IPv{fam} UDP {size} B delivered intact "
                       f"(seq {f'{seq_hi}:' if seq_hi else ''}{self.in_seq}){what}",
                       f"got {len(got) if got is not None else 'nothing'} bytes from {src}")

    # -- b) socket in A -> gateway -> scapy ---------------------------------

    def recv_out(self, what):
        s = self.ctx.bsock[self.ulfam]
        try:
            data, anc, _, src = s.recvmsg(65535, 64)
            self.outer_tos = tos_of(anc)
        except socket.timeout:
            self.rep.check(False, f"[{self.tag}] {what}: ESP datagram reaches B",
                           f"nothing within {RECV_TIMEOUT}s")
            return None
        self.out_seq += 1
        ok_src = src[0] == UL[self.ulfam][0] and src[1] == 4500
        try:
            o = self.rx.open(data)
        except Exception as e:
            self.rep.check(False, f"[{self.tag}] {what}: scapy verifies and decrypts the datagram",
                           f"{type(e).__name__}: {e}; {len(data)} bytes from {src}")
            return None
        s_ = conf.SUITES[self.cipher]
        inner_len = len(raw(o.inner))
        want_pad = expected_padlen(self.cipher, inner_len)
        problems = []
        if not ok_src:
            problems.append(f"source {src} != {UL[self.ulfam][0]}:4500")
        if o.spi != SPI_OUT:
            problems.append(f"SPI 0x{o.spi:x} != 0x{SPI_OUT:x}")
        if o.seq != self.out_seq:
            problems.append(f"seq {o.seq} != {self.out_seq}")
        if o.nh != (4 if o.inner.version == 4 else 41):
            problems.append(f"next header {o.nh} for IPv{o.inner.version}")
        if o.padding != bytes(range(1, o.padlen + 1)):
            problems.append(f"padding bytes {o.padding.hex()} are not 1,2,3..")
        if o.padlen != want_pad:
            problems.append(f"pad length {o.padlen} != minimal {want_pad}")
        if s_["aead"]:
            if o.iv != struct.pack("!Q", self.out_seq):
                problems.append(f"GCM IV {o.iv.hex()} != 64-bit seq {self.out_seq}")
        elif o.iv in self.ivs or o.iv == bytes(16):
            problems.append(f"CBC IV {o.iv.hex()} repeated or zero")
        self.ivs.add(o.iv)
        self.rep.check(not problems, f"[{self.tag}] {what}: ESP header/trailer right "
                       f"(SPI 0x{o.spi:x}, seq {o.seq}, pad {o.padlen}, nh {o.nh}, "
                       f"{len(data)} B from {src[0]}:{src[1]})", "; ".join(problems))
        return o, data

    def outbound_udp(self, fam, size, tos=0):
        payload = os.urandom(size)
        with self.ctx.a.entered():
            s = socket.socket(FAM[fam], socket.SOCK_DGRAM)
        try:
            if tos:
                s.setsockopt(*((socket.IPPROTO_IP, IP_TOS) if fam == 4
                               else (socket.IPPROTO_IPV6, IPV6_TCLASS)), tos)
            s.bind((IN[fam][0], 0))
            sport = s.getsockname()[1]
            s.sendto(payload, (IN[fam][1], B_PORT[fam]))
        finally:
            s.close()
        r = self.recv_out(f"b) A->scapy inner IPv{fam} UDP {size} B")
        if r is None:
            return None
        o, data = r
        inner = o.inner
        ipl = IP if fam == 4 else IPv6
        udp = inner.getlayer(UDP)
        got = raw(udp.payload) if udp is not None else None
        total = inner.len if fam == 4 else inner.plen + 40
        ok = (isinstance(inner, ipl) and inner.src == IN[fam][0] and inner.dst == IN[fam][1]
              and udp is not None and udp.sport == sport and udp.dport == B_PORT[fam]
              and got == payload and total == len(raw(inner)) and udp.len == size + 8)
        self.rep.check(ok, f"[{self.tag}] b) inner packet exactly as sent "
                       f"({IN[fam][0]}:{sport} -> {IN[fam][1]}:{B_PORT[fam]}, {size} B)",
                       inner.summary() if inner is not None else "no inner")
        self.inner_tos = inner.tos if fam == 4 else inner.tc
        return data

    def mtu_sized(self, fam):
        """A packet of exactly the tun MTU must fit the 1500-byte underlay."""
        hdr = 28 if fam == 4 else 48
        data = self.outbound_udp(fam, self.mtu - hdr)
        if data is not None:
            outer = len(data) + 8 + (20 if self.ulfam == 4 else 40)
            self.rep.check(1500 - 64 < outer <= 1500,
                           f"[{self.tag}] b) inner IPv{fam} packet of tun MTU {self.mtu} -> outer "
                           f"{outer} B fits the 1500 B underlay (and MTU is not needlessly low)",
                           f"outer {outer}")

    # -- c) ICMP echo through A's kernel ------------------------------------

    def echo(self, fam):
        ident, seq = random.randint(1, 65535), random.randint(1, 65535)
        payload = os.urandom(56)
        if fam == 4:
            req = IP(src=IN[4][1], dst=IN[4][0]) / ICMP(type=8, id=ident, seq=seq) / Raw(payload)
        else:
            req = IPv6(src=IN[6][1], dst=IN[6][0]) / ICMPv6EchoRequest(id=ident, seq=seq,
                                                                        data=payload)
        self.send_in(req)
        self.in_valid += 1
        self.in_highest = max(self.in_highest, self.in_seq)
        r = self.recv_out(f"c) ICMPv{fam} echo reply")
        if r is None:
            return
        inner = r[0].inner
        if fam == 4:
            icmp = inner.getlayer(ICMP)
            ok = (icmp is not None and icmp.type == 0 and icmp.id == ident and icmp.seq == seq
                  and raw(icmp.payload) == payload and inner.src == IN[4][0]
                  and inner.dst == IN[4][1])
        else:
            icmp = inner.getlayer(ICMPv6EchoReply)
            ok = (icmp is not None and icmp.id == ident and icmp.seq == seq
                  and icmp.data == payload and inner.src == IN[6][0] and inner.dst == IN[6][1])
        self.rep.check(ok, f"[{self.tag}] c) echo reply from A's kernel opens in scapy "
                       f"(id {ident}, seq {seq})", inner.summary())

    # -- d) wrong ESN mode --------------------------------------------------

    def wrong_esn(self):
        payload = os.urandom(32)
        inner = IP(src=IN[4][1], dst=IN[4][0]) / UDP(sport=4444, dport=LISTEN_PORT[4]) / Raw(payload)
        self.send_in(inner, esn=not self.esn)
        lst = self.ctx.listener[4]
        lst.settimeout(0.4)
        try:
            got = lst.recv(65535)
        except socket.timeout:
            got = None
        lst.settimeout(RECV_TIMEOUT)
        self.rep.check(got is None, f"[{self.tag}] d) packet sealed with ESN "
                       f"{'off' if self.esn else 'on'} (seq_hi {'missing from' if self.esn else 'added to'}"
                       f" the ICV) is not delivered", f"delivered {got!r}")

    # -- g) ECN ---------------------------------------------------------------

    def ecn_out(self, fam, ecn):
        tos = DSCP_EF | ecn
        if self.outbound_udp(fam, 100, tos=tos) is None:
            return
        want = ecn  # RFC 6040 4.1: the ECN field is copied, CE included; DSCP is not
        self.rep.check(self.outer_tos == want and self.inner_tos == tos,
                       f"[{self.tag}] g) A sends IPv{fam} with TOS 0x{tos:02x} ({ECN_NAME[ecn]}): "
                       f"outer TOS 0x{want:02x}, inner unchanged",
                       f"outer {self.outer_tos}, inner {self.inner_tos}")

    def ecn_in(self, fam, inner_ecn, outer_ecn, want):
        payload = os.urandom(40)
        sport = random.randint(20000, 30000)
        tos = DSCP_EF | inner_ecn
        hdr = (IP(src=IN[4][1], dst=IN[4][0], tos=tos) if fam == 4
               else IPv6(src=IN[6][1], dst=IN[6][0], tc=tos))
        self.in_seq += 1
        data = self.tx.seal(hdr / UDP(sport=sport, dport=LISTEN_PORT[fam]) / Raw(payload),
                            self.in_seq)
        # The underlay mark: B's socket sets the outer TOS / traffic class.
        mark = ((socket.IPPROTO_IP, IP_TOS) if self.ulfam == 4
                else (socket.IPPROTO_IPV6, IPV6_TCLASS))
        self.ctx.bsock[self.ulfam].sendmsg([data], [(*mark, struct.pack("i", outer_ecn))], 0,
                                           (UL[self.ulfam][0], 4500))
        self.in_sent += 1
        self.in_highest = max(self.in_highest, self.in_seq)  # the replay window takes drops too
        lst = self.ctx.listener[fam]
        lst.settimeout(0.4 if want is None else RECV_TIMEOUT)
        try:
            got, anc, _, _ = lst.recvmsg(65535, 64)
            got_tos = tos_of(anc)
        except socket.timeout:
            got, got_tos = None, None
        finally:
            lst.settimeout(RECV_TIMEOUT)
        what = (f"[{self.tag}] g) IPv{fam} inner {ECN_NAME[inner_ecn]} under outer "
                f"{ECN_NAME[outer_ecn]}: ")
        if want is None:
            self.ecn_drops += 1
            self.rep.check(got is None, what + "dropped (RFC 6040: CE on a Not-ECT packet)",
                           f"delivered with TOS {got_tos}")
            return
        self.in_valid += 1
        self.rep.check(got == payload and got_tos == DSCP_EF | want,
                       what + f"delivered as {ECN_NAME[want]}, DSCP kept",
                       f"got {len(got) if got is not None else 'nothing'}, TOS {got_tos}")

    # -- e) counters and shutdown -------------------------------------------

    def verify_status(self):
        st = self.gw.status()
        p = esptun_proc.peer(st, "scapy")
        d = esptun_proc.counters_delta(self.before, st)
        rep, tag = self.rep, self.tag
        rep.equal(d["counters.udp_rx_packets"], self.in_sent, f"[{tag}] e) udp_rx_packets")
        rep.equal(d["counters.udp_tx_packets"], self.out_seq, f"[{tag}] e) udp_tx_packets")
        rep.equal(d["counters.tun_tx_packets"], self.in_valid, f"[{tag}] e) tun_tx_packets")
        rep.check(d["counters.tun_rx_packets"] >= self.out_seq,
                  f"[{tag}] e) tun_rx_packets >= {self.out_seq}", str(d))
        rep.equal(p["sa_in"]["packets"], self.in_valid, f"[{tag}] e) sa_in.packets")
        rep.equal(p["sa_in"]["highest_seq"], self.in_highest, f"[{tag}] e) sa_in.highest_seq")
        rep.equal(p["sa_out"]["packets"], self.out_seq, f"[{tag}] e) sa_out.packets")
        rep.equal(p["sa_out"]["last_seq"], self.out_seq, f"[{tag}] e) sa_out.last_seq")
        rep.equal(d["drops.auth_failed"], 1, f"[{tag}] e) drops.auth_failed (the ESN mismatch)")
        rep.equal(d["drops.ce_not_ect"], self.ecn_drops, f"[{tag}] e) drops.ce_not_ect (g)")
        others = {k: v for k, v in d.items()
                  if (k.startswith("drops.") or k.startswith("ignored.")) and v
                  and k not in ("drops.auth_failed", "drops.ce_not_ect", "drops.no_route")}
        rep.check(not others, f"[{tag}] e) no other drops or ignores", str(others))
        if d.get("drops.no_route"):
            rep.info(f"drops.no_route = {d['drops.no_route']} (kernel IPv6 multicast on the tun: "
                     "MLD reports have no peer)")

    def stop(self):
        rc = self.gw.stop()
        self.rep.equal(rc, 0, f"[{self.tag}] e) SIGTERM: gateway exit code")
        links = self.ctx.a.links()
        routes = (self.ctx.a.ip("-4", "route", "show").stdout
                  + self.ctx.a.ip("-6", "route", "show").stdout)
        self.rep.check(self.tun not in links and "10.99.0." not in routes and "fd99::" not in routes,
                       f"[{self.tag}] e) tun {self.tun}, its addresses and routes are gone",
                       f"links {links}; routes:\n{routes}")

    def run(self):
        self.start()
        ctx = self.ctx
        try:
            # Listeners in A bind the tun addresses, so they exist only with the tun.
            ctx.listener = {f: ctx.a.socket(FAM[f], socket.SOCK_DGRAM,
                                            bind=(IN[f][0], LISTEN_PORT[f]),
                                            timeout=RECV_TIMEOUT) for f in (4, 6)}
            for sock in ctx.listener.values():
                recv_tos(sock)
            for fam in (4, 6):
                for size in SIZES:
                    self.inbound_udp(fam, size)
            for fam in (4, 6):
                for size in SIZES:
                    self.outbound_udp(fam, size)
                self.mtu_sized(fam)
            for fam in (4, 6):
                self.echo(fam)
            self.wrong_esn()
            self.inbound_udp(4, 64)  # good traffic after the bad packet
            for fam in (4, 6):
                for ecn in range(4):
                    self.ecn_out(fam, ecn)
                for inner_ecn, outer_ecn, want in ECN_IN:
                    self.ecn_in(fam, inner_ecn, outer_ecn, want)
            if self.esn:
                # f) ESN epoch change (RFC 4303 Appendix A2.2): jump close to
                # 2^32, then a low number that only verifies with seq_hi 1.
                self.inbound_udp(4, 48, seq=0xFFFFFFF0, what=", jump near 2^32")
                self.inbound_udp(6, 48, seq=3, seq_hi=1,
                                 what=", f) after the 32-bit wrap: seq_hi 1 under the ICV")
                self.inbound_udp(4, 48, seq=0xFFFFFFF8, seq_hi=0,
                                 what=", f) late packet from epoch 0 inside the window")
            self.verify_status()
        finally:
            for sock in ctx.listener.values():
                sock.close()
            ctx.listener = {}
            if self.gw.alive():
                self.stop()


class Ctx:
    pass


def body(rep, build):
    ctx = Ctx()
    ctx.build = build
    ctx.tmp = netns.make_tempdir("scapy")
    ctx.current_log = None
    ctx.listener = {}
    rep.on_failure.append(lambda: ctx.current_log and print(
        f"\n--- last gateway log ({ctx.current_log}):\n{netns.tail(ctx.current_log, 40)}"))

    rep.section("topology")
    ctx.a = netns.Netns(netns.unique("scapy", "a"))
    ctx.b = netns.Netns(netns.unique("scapy", "b"))
    netns.veth(ctx.a, ctx.b, "ula", "ulb", ["10.201.0.1/24", "fd01::1/64"],
               ["10.201.0.2/24", "fd01::2/64"])
    rep.info(f"namespaces {ctx.a.name} <-> {ctx.b.name} over veth ula/ulb")

    netns.wait_until(lambda: "tentative" not in ctx.a.ip("-6", "addr").stdout
                     + ctx.b.ip("-6", "addr").stdout, 5, what="underlay IPv6 addresses")
    ctx.bsock = {f: ctx.b.socket(FAM[f], socket.SOCK_DGRAM, bind=(UL[f][1], 4500),
                                 timeout=RECV_TIMEOUT) for f in (4, 6)}
    for s in ctx.bsock.values():
        recv_tos(s)
    try:
        for i, (cipher, esn, ulfam, impl) in enumerate(CASES):
            rep.section(f"case {i + 1}/{len(CASES)}: {cipher}, ESN {'on' if esn else 'off'}, "
                        f"underlay IPv{ulfam}, crypto_impl {impl}")
            case = Case(rep, ctx, i, cipher, esn, ulfam, impl)
            try:
                case.run()
            except netns.TestError as e:  # record it, go on with the next suite
                rep.check(False, f"[{case.tag}] {str(e).splitlines()[0]}", str(e)[:2000])
            finally:
                if getattr(case, "gw", None) is not None and case.gw.alive():
                    case.gw.stop()
    finally:
        for s in ctx.bsock.values():
            s.close()


if __name__ == "__main__":
    report.main("interop/scapy_esp", body)
