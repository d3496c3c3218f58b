#!/usr/bin/python3
# test_logging.py - what esptun writes to its log (issue 17).
#
#   netns G (lgg-PID)                              netns C (lgc-PID)
#   esptun-gateway -v, tun 10.76.0.1/24            esptun-client -v, address from the pool
#   pool 10.76.0.128/25, IKE on 4500 only           peer "gw" -> 10.204.0.1:4500
#   ulg 10.204.0.1/24 ----------- veth ------------ ulc 10.204.0.2/24
#
# 1. With -v both ends write one debug line per IKE message: IKE_SA_INIT and
#    IKE_AUTH, each way, with message ID, SPIs and payload names; and the
#    set-up steps (UDP socket bound, tun opened, routes, seccomp) at debug.
#    Neither log holds the PSK (as text or hex), nor any long hex run (a
#    nonce, KE value or key would be one); a ping through the tunnel works.
#    5000 junk IKE messages from the client's address give no more debug
#    lines than the unauthenticated budget allows (20, then one a second).
# 2. Without -v, no debug line at all.
# 3. stderr that is the journal stream systemd announces in JOURNAL_STREAM
#    (device:inode of that very file): every line starts with the sd-daemon
#    priority, <6> for info and <7> for debug, and has no timestamp of ours.
#    JOURNAL_STREAM naming another file: the human format, level in words.
"""Log lines: -v debug lines for IKE and set-up, no secrets, journald priorities."""

import os
import re
import socket
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping  # noqa: E402
import report  # noqa: E402

GW_UL, C_UL = "10.204.0.1", "10.204.0.2"
GW_IN, POOL = "10.76.0.1", "10.76.0.128/25"
PSK = "logging-test-pre-shared-key-0123456789"
HUMAN = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} esptun-(gateway|client) (error|warning|info|debug): ")


class Ctx:
    def __init__(self, build):
        self.build = build
        self.tmp = netns.make_tempdir("logging")
        self.g = netns.Netns(netns.unique("lgg"))
        self.c = netns.Netns(netns.unique("lgc"))
        netns.veth(self.g, self.c, "ulg", "ulc", [f"{GW_UL}/24"], [f"{C_UL}/24"])
        sfx = os.getpid() % 100000
        gw = {"interface": f"lgg{sfx}", "addresses": [f"{GW_IN}/24"], "listen": f"{GW_UL}:4500",
              "ike_port": 0, "local_id": "gw.example", "address_pool": [POOL], "tun_io": "direct",
              "control_socket": os.path.join(self.tmp, "g.sock"),
              "state_dir": os.path.join(self.tmp, "state-g")}
        self.gcfg = conf.write_private(os.path.join(self.tmp, "g.toml"), conf.render_ike_config(
            gw, [dict(name="alice", psk=PSK, remote_id="alice@example.com")]))
        cl = {"interface": f"lgc{sfx}", "listen": f"{C_UL}:4500", "local_id": "alice@example.com",
              "tun_io": "direct", "control_socket": os.path.join(self.tmp, "c.sock"),
              "state_dir": os.path.join(self.tmp, "state-c")}
        self.ccfg = conf.write_private(os.path.join(self.tmp, "c.toml"), conf.render_ike_config(
            cl, [dict(name="gw", endpoint=f"{GW_UL}:4500", allowed_ips=[f"{GW_IN}/32"], psk=PSK,
                      remote_id="gw.example")]))
        self.n = 0

    def pair(self, rep, args=(), genv=None, log_prep=None):
        """Starts gateway and client (args for both, genv for the gateway);
        returns (gateway, client, gateway log, client log) once the client's
        CHILD_SA is up. log_prep(path): called on the gateway's log before it starts."""
        self.n += 1
        glog = os.path.join(self.tmp, f"g{self.n}.log")
        clog = os.path.join(self.tmp, f"c{self.n}.log")
        open(glog, "wb").close()
        env = log_prep(glog) if log_prep else genv
        g = esptun_proc.Endpoint(self.build, self.g, self.gcfg, glog, args=args, env=env)
        c = esptun_proc.Endpoint(self.build, self.c, self.ccfg, clog, "client", args=args)
        rep.on_failure.append(lambda: print(f"\n--- gateway:\n{netns.tail(glog)}\n"
                                            f"--- client:\n{netns.tail(clog)}"))
        g.start()
        netns.on_cleanup(lambda: g.alive() and g.stop())
        c.start()
        netns.on_cleanup(lambda: c.alive() and c.stop())

        def up():
            sas = c.status_or_empty().get("ike", {}).get("sas", [])
            return any(sa.get("state") == "established" and sa.get("children") for sa in sas)
        netns.wait_until(up, 15, what="the client's IKE SA and CHILD_SA")
        return g, c, glog, clog

    def stop(self, rep, tag, *eps):
        for e in eps:
            rep.equal(e.stop(), 0, f"[{tag}] {os.path.basename(e.binary)}: SIGTERM -> exit code 0")


def lines_of(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def find(lines, *patterns):
    """The first line matching every regex in patterns, or None."""
    for line in lines:
        if all(re.search(p, line) for p in patterns):
            return line
    return None


def secret_hits(text):
    """What of the PSK or long hex (32+ digits: nonces, KE values, keys) the text holds."""
    hits = []
    for form in (PSK, PSK.encode().hex(), PSK.encode().hex().upper()):
        if form in text:
            hits.append(f"PSK as {form[:12]}...")
    hits += [f"hex run {m[:16]}..." for m in re.findall(r"[0-9a-fA-F]{32,}", text)]
    return hits


def flood(rep, ctx, g, glog):
    """5000 junk IKE messages (behind the non-ESP marker) to the gateway: its
    debug lines about them stay within the unauthenticated budget (20 at
    once, one a second) and the IKE SA and tunnel are unharmed."""
    start = time.monotonic()
    s = ctx.c.socket(socket.AF_INET, socket.SOCK_DGRAM, bind=(C_UL, 0))
    junk = bytes(4) + bytes(range(8)) * 12  # marker, then no valid IKE header (version 0)
    for _ in range(5000):
        s.sendto(junk, (GW_UL, 4500))
    s.close()
    netns.wait_until(lambda: g.status()["ike"]["counters"]["malformed"] > 0, 5,
                     what="the gateway counting the junk as malformed")
    time.sleep(0.5)
    elapsed = time.monotonic() - start
    dropped = [l for l in lines_of(glog) if re.search(r"debug: dropped .* from " + re.escape(C_UL), l)]
    counters = g.status()["ike"]["counters"]
    rep.check(1 <= len(dropped) <= 20 + int(elapsed) + 2,
              f"[-v] flood: {counters['malformed']} junk messages reached IKE in {elapsed:.1f} s, "
              f"{len(dropped)} debug lines about them", "\n".join(dropped[-3:]))
    ping.expect_replies(rep, f"[-v] ping {GW_IN} from the client after the flood",
                        ping.run(ctx.c, GW_IN, 3), 3)


def check_verbose(rep, ctx):
    rep.section("-v: debug lines for every IKE message and the set-up steps, no secrets")
    g, c, glog, clog = ctx.pair(rep, args=("-v",))
    ping.expect_replies(rep, f"[-v] ping {GW_IN} from the client", ping.run(ctx.c, GW_IN, 3), 3)
    flood(rep, ctx, g, glog)
    ctx.stop(rep, "-v", c, g)
    gl, cl = lines_of(glog), lines_of(clog)
    spis = r"SPIs [0-9a-f]{16}/[0-9a-f]{16}"
    wants = [
        ("client", cl, ("debug: peer gw: sent IKE_SA_INIT request #0", spis, r"\[SA KE No N\(NAT_DETECTION",
                        rf"to {GW_UL}:4500")),
        ("gateway", gl, ("debug: received IKE_SA_INIT request #0", spis, r"\d+ bytes: \[SA KE No",
                         rf"from {C_UL}:4500")),
        ("gateway", gl, (rf"debug: IKE from {C_UL}:4500: sent IKE_SA_INIT response #0", r"\[SA KE No")),
        ("client", cl, ("debug: received IKE_SA_INIT response #0",)),
        ("client", cl, ("debug: peer gw: sent IKE_AUTH request #1", r"\[IDi .*AUTH")),
        ("gateway", gl, ("debug: .*received IKE_AUTH request #1", r"IDi", r"TSi TSr")),
        ("gateway", gl, ("debug: peer alice: sent IKE_AUTH response #1", r"IDr", r"AUTH")),
        ("client", cl, ("debug: peer gw: received IKE_AUTH response #1", r"IDr")),
        ("gateway", gl, ("debug: worker 0: UDP socket bound to " + re.escape(f"{GW_UL}:4500"),)),
        ("gateway", gl, (r"debug: tun lgg\d+ opened",)),
        ("gateway", gl, (r"debug: route 10\.76\.0\.128/25 added",)),
        ("gateway", gl, (r"debug: seccomp filter installed: \d+ system calls",)),
        ("gateway", gl, (r"debug: IKE: engine ready",)),
    ]
    for who, lines, pats in wants:
        line = find(lines, *pats)
        rep.check(line is not None, f"[-v] {who} logs {' ... '.join(pats)}: {line!r}",
                  "\n".join(l for l in lines if "IKE_" in l)[:1500])
    rep.check(all(HUMAN.match(l) for l in gl + cl),
              "[-v] every line: time, program, level in words (stderr is not the journal)",
              "\n".join(l for l in gl + cl if not HUMAN.match(l))[:800])
    for who, path in (("gateway", glog), ("client", clog)):
        hits = secret_hits(open(path, encoding="utf-8", errors="replace").read())
        rep.check(not hits, f"[-v] {who}'s log holds no PSK and no long hex", str(hits[:5]))
        raw = open(path, "rb").read()
        rep.check(PSK.encode() not in raw, f"[-v] {who}'s log bytes hold no PSK")


def check_quiet(rep, ctx):
    rep.section("without -v: no debug lines")
    g, c, glog, clog = ctx.pair(rep)
    ctx.stop(rep, "quiet", c, g)
    for who, path in (("gateway", glog), ("client", clog)):
        lines = lines_of(path)
        dbg = [l for l in lines if " debug: " in l]
        rep.check(lines and not dbg, f"[quiet] {who}: {len(lines)} lines, none at debug", "\n".join(dbg[:5]))


def stream_env(path):
    st = os.stat(path)
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def check_journal(rep, ctx):
    rep.section("stderr is the journal stream: sd-daemon priorities, no timestamps of ours")
    g, c, glog, clog = ctx.pair(rep, args=("-v",), log_prep=stream_env)
    ctx.stop(rep, "journal", c, g)
    lines = lines_of(glog)
    bad = [l for l in lines if not re.match(r"^<[3467]>\S", l)]
    rep.check(lines and not bad, f"[journal] all {len(lines)} gateway lines start with <3>, <4>, <6> or <7>",
              "\n".join(bad[:5]))
    rep.check(find(lines, r"^<7>received IKE_SA_INIT request #0") is not None,
              "[journal] IKE debug lines at priority 7", "\n".join(lines[:10]))
    rep.check(find(lines, r"^<6>.* up: mtu ") is not None, "[journal] the up line at priority 6 (info)")
    rep.check(find(lines, r"\d\d:\d\d:\d\d\.\d{3}") is None and find(lines, "esptun-gateway") is None,
              "[journal] no timestamp or program name of ours (journald adds both)")

    other = os.path.join(ctx.tmp, "elsewhere")
    open(other, "wb").close()
    g, c, glog, clog = ctx.pair(rep, genv=stream_env(other))
    ctx.stop(rep, "not journal", c, g)
    lines = lines_of(glog)
    rep.check(lines and all(HUMAN.match(l) for l in lines),
              "[not journal] JOURNAL_STREAM of another file: the human format",
              "\n".join(lines[:5]))


def body(rep, build):
    ctx = Ctx(build)
    check_verbose(rep, ctx)
    check_quiet(rep, ctx)
    check_journal(rep, ctx)


if __name__ == "__main__":
    report.main("netns/logging", body, tools=("ip", "ping"))
