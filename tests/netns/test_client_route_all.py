#!/usr/bin/python3
# test_client_route_all.py - `esptun-client up` with route_all = true sends
# everything through the gateway and gives the routing table back: while it
# runs, 0.0.0.0/1 + 128.0.0.0/1 and ::/1 + 8000::/1 go into the tun, a host
# route keeps the gateway's underlay address on the veth, the "ISP" default
# routes stay in place, and ping (IPv4, IPv6) plus a TCP transfer reach a
# server behind the gateway; after SIGTERM, and again after SIGINT, the client
# exits 0 and C's route tables (all tables, both families) are exactly what
# they were before it started. `check` refuses route_all without a /0.
#
#   netns C (et-ra-PID-c)           netns G (et-ra-PID-g)          netns S (et-ra-PID-s)
#  +--------------------------+    +---------------------------+   +----------------------+
#  | esptun-client up         |    | esptun-gateway run        |   | ping / TCP target    |
#  |  route_all = true        |    |  peer "laptop": endpoint  |   |                      |
#  |  peer "gateway"          |    |  learned, allowed_ips     |   |                      |
#  |   10.201.0.2:4500        |    |  10.99.0.2/32 fd99::2/128 |   |                      |
#  |   allowed 0/0, ::/0      |    |  ip_forward = 1 (v4, v6)  |   |                      |
#  | tun racN 10.99.0.2/24    |    | tun ragN 10.99.0.1/24     |   |                      |
#  |          fd99::2/64      |    |          fd99::1/64       |   |                      |
#  | default via 10.201.0.254 |    |                           |   | default via          |
#  |   (and fd01::254) onlink:|    |                           |   |   198.18.0.1, fd02::1|
#  |   a pretend ISP router   |    |                           |   |                      |
#  | ulc 10.201.0.1/24 ------ veth -- ulg 10.201.0.2/24       |   |                      |
#  |     fd01::1/64           |    |     fd01::2/64            |   |                      |
#  |                          |    | srg 198.18.0.1/24 ------ veth -- srs 198.18.0.2/24  |
#  |                          |    |     fd02::1/64            |   |     fd02::2/64       |
#  +--------------------------+    +---------------------------+   +----------------------+
#
# S is not on any tunnel network: C reaches it only through the /1 routes,
# the tunnel, and G forwarding.
"""esptun-client route_all: routes installed while up, restored exactly after."""

import json
import os
import re
import signal
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping as ping_lib  # noqa: E402
import report  # noqa: E402
from routes import diff, route_get_dev, route_tables, routes_json  # noqa: E402
import transfer as transfer_lib  # noqa: E402
from netns import TestError  # noqa: E402

XFER_BYTES = 8 * 1000 * 1000
XFER_TIMEOUT = 60
CIPHER = "aes256-gcm"
SERVER4, SERVER6 = "198.18.0.2", "fd02::2"
GW_UNDERLAY = "10.201.0.2"
ISP4, ISP6 = "10.201.0.254", "fd01::254"
HALVES4, HALVES6 = ("0.0.0.0/1", "128.0.0.0/1"), ("::/1", "8000::/1")


class Topo:
    pass


def write_client_config(cfg, path, route_all=True):
    """write_client_config() - cfg rendered with route_all in [tunnel] (the shared
    renderer has no such key); returns (path, line number of route_all)."""
    if cfg.state_dir is None:
        cfg.state_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "state-client")
    lines = cfg.render().splitlines()
    at = lines.index("") if "" in lines else len(lines)  # end of the [tunnel] table
    lines.insert(at, f"route_all = {'true' if route_all else 'false'}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path, at + 1


def build_topology(ctx):
    t = Topo()
    t.c = netns.Netns(netns.unique("ra", "c"))
    t.g = netns.Netns(netns.unique("ra", "g"))
    t.s = netns.Netns(netns.unique("ra", "s"))
    netns.veth(t.c, t.g, "ulc", "ulg", ["10.201.0.1/24", "fd01::1/64"],
               [f"{GW_UNDERLAY}/24", "fd01::2/64"])
    netns.veth(t.g, t.s, "srg", "srs", ["198.18.0.1/24", "fd02::1/64"],
               [f"{SERVER4}/24", f"{SERVER6}/64"])
    # The default routes route_all must shadow, not replace; nothing answers there.
    t.c.ip("-4", "route", "add", "default", "via", ISP4, "dev", "ulc", "onlink")
    t.c.ip("-6", "route", "add", "default", "via", ISP6, "dev", "ulc", "onlink")
    t.s.ip("-4", "route", "add", "default", "via", "198.18.0.1", "dev", "srs")
    t.s.ip("-6", "route", "add", "default", "via", "fd02::1", "dev", "srs")
    t.g.sysctl({"net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1,
                "net.ipv6.conf.default.forwarding": 1})
    # The link-local address (and its local route) comes a moment after the
    # link is up: wait, so it cannot show up as a difference in the tables.
    netns.wait_until(lambda: re.search(r"inet6 fe80::\S+ scope link(?! tentative)",
                                       t.c.ip("-6", "addr", "show", "dev", "ulc").stdout),
                     5, what="link-local address on ulc")

    sfx = f"{os.getpid() % 100000}"
    c_out, g_out = conf.sa_pair(CIPHER, spi_base=0x5000)
    t.ctun, t.gtun = f"rac{sfx}", f"rag{sfx}"
    t.ccfg = conf.Endpoint(
        interface=t.ctun, addresses=["10.99.0.2/24", "fd99::2/64"],
        control_socket=os.path.join(ctx.tmp, "c.sock"),
        peers=[conf.Peer(name="gateway", cipher=CIPHER, out=c_out, inb=g_out,
                         allowed_ips=["0.0.0.0/0", "::/0"], endpoint=f"{GW_UNDERLAY}:4500")])
    gcfg = conf.Endpoint(
        interface=t.gtun, addresses=["10.99.0.1/24", "fd99::1/64"],
        control_socket=os.path.join(ctx.tmp, "g.sock"),
        peers=[conf.Peer(name="laptop", cipher=CIPHER, out=g_out, inb=c_out,
                         allowed_ips=["10.99.0.2/32", "fd99::2/128"])])
    t.cpath, t.route_all_line = write_client_config(t.ccfg, os.path.join(ctx.tmp, "client.toml"))
    t.gpath = gcfg.write(os.path.join(ctx.tmp, "gateway.toml"))
    return t


def start(ctx, t, who):
    ns, path, role, tun = ((t.c, t.cpath, "client", t.ctun) if who == "client"
                           else (t.g, t.gpath, "gateway", t.gtun))
    ep = esptun_proc.Endpoint(ctx.build, ns, path, os.path.join(ctx.tmp, f"{role}.log"), role)
    ep.start()
    netns.wait_until(lambda: "tentative" not in ns.ip("-6", "addr", "show", "dev", tun).stdout,
                     5, what=f"IPv6 address on {tun}")
    return ep


def ping(rep, tag, ns, addr, count=3):
    return ping_lib.expect_replies(rep, f"[{tag}] ping C -> {addr} (S, behind G)",
                                   ping_lib.run(ns, addr, count=count), count)


def check_routes_up(rep, tag, t):
    """The /1 halves into the tun, the host route to G beside it, defaults kept."""
    c = t.c
    for fam, halves in (("-4", HALVES4), ("-6", HALVES6)):
        for prefix in halves:
            rs = routes_json(c, fam, "table", "main", "exact", prefix)
            devs = [r.get("dev") for r in rs]
            rep.check(devs == [t.ctun] and not any(r.get("gateway") for r in rs),
                      f"[{tag}] route {prefix} dev {t.ctun}", json.dumps(rs))
    host = routes_json(c, "-4", "table", "main", "exact", f"{GW_UNDERLAY}/32")
    rep.check(len(host) == 1 and host[0].get("dev") == "ulc",
              f"[{tag}] host route {GW_UNDERLAY}/32 dev ulc (the gateway stays on the underlay)",
              json.dumps(host))
    dev = route_get_dev(c, GW_UNDERLAY)
    rep.equal(dev, "ulc", f"[{tag}] `ip route get {GW_UNDERLAY}` in C: dev")
    for addr in (SERVER4, SERVER6):
        dev = route_get_dev(c, addr)
        rep.equal(dev, t.ctun, f"[{tag}] `ip route get {addr}` in C: dev")
    for fam, via in (("-4", ISP4), ("-6", ISP6)):
        rs = routes_json(c, fam, "table", "main", "exact", "default")
        rep.check(any(r.get("gateway") == via and r.get("dev") == "ulc" for r in rs),
                  f"[{tag}] the original default via {via} dev ulc is still there",
                  json.dumps(rs))


def transfer(rep, tag, t):
    """XFER_BYTES over TCP from C to S through the tunnel; SHA-256 on both ends."""
    port = 5301
    sent, got, secs = transfer_lib.run(t.c, t.s, SERVER4, port, XFER_BYTES, XFER_TIMEOUT)
    rep.check(sent and got and sent.get("bytes") == XFER_BYTES
              and got.get("bytes") == XFER_BYTES and sent.get("sha256") == got.get("sha256")
              and got.get("peer") == "10.99.0.2",
              f"[{tag}] {XFER_BYTES // 1000000} MB TCP C -> S ({SERVER4}:{port}) from "
              f"10.99.0.2: SHA-256 equal on both ends ({secs:.1f} s)",
              f"sender {sent}, receiver {got}")


def check_status(rep, tag, cli, gw):
    pc = esptun_proc.peer(cli.status(), "gateway")
    rep.check(pc["sa_out"]["packets"] > 0 and pc["sa_in"]["packets"] > 0,
              f"[{tag}] client status: sa_out {pc['sa_out']['packets']}, "
              f"sa_in {pc['sa_in']['packets']} packets", json.dumps(pc))
    pg = esptun_proc.peer(gw.status(), "laptop")
    rep.check(pg["endpoint"] == "10.201.0.1:4500" and pg["endpoint_source"] == "learned",
              f"[{tag}] gateway status: laptop's endpoint 10.201.0.1:4500 (learned)",
              json.dumps(pg))


def stop_client(rep, tag, t, cli, sig, before):
    rc = cli.stop(sig=sig)
    rep.equal(rc, 0, f"[{tag}] esptun-client: {signal.Signals(sig).name} -> exit code")
    rep.check(t.ctun not in t.c.links(), f"[{tag}] tun {t.ctun} removed", str(t.c.links()))
    after = route_tables(t.c)
    rep.check(after == before, f"[{tag}] C's IPv4 and IPv6 route tables (all tables) exactly "
              f"as before the client started ({len(before['-4'])} + {len(before['-6'])} routes)",
              diff(before, after))


def round_trip(rep, ctx, t, sig, full):
    """One client run: start, check routes and traffic, stop with sig, check restore."""
    tag = f"up, {signal.Signals(sig).name}"
    before = route_tables(t.c)
    rep.info(f"C before the client: {len(before['-4'])} IPv4 + {len(before['-6'])} IPv6 routes")
    rep.check(any(line.startswith(f"default via {ISP4} dev ulc") for line in before["-4"])
              and any(line.startswith(f"default via {ISP6} dev ulc") for line in before["-6"]),
              f"[{tag}] C has its ISP default routes before the client starts",
              "\n".join(before["-4"] + before["-6"]))
    gw = start(ctx, t, "gateway")
    ctx.live.append(gw)
    cli = start(ctx, t, "client")
    ctx.live.append(cli)
    check_routes_up(rep, tag, t)
    ping(rep, tag, t.c, SERVER4)
    ping(rep, tag, t.c, SERVER6)
    if full:
        transfer(rep, tag, t)
    time.sleep(0.2)
    check_status(rep, tag, cli, gw)
    stop_client(rep, tag, t, cli, sig, before)
    # Fresh gateway for the next run: the restarted client's sequence numbers
    # start at 1 again, which the old gateway's replay window would refuse.
    rep.equal(gw.stop(), 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")


def crash_and_restart(rep, ctx, t):
    """A client killed with SIGKILL leaves its host route to G behind (the tun
    and its routes die with it); the next `up` takes that route over, works,
    and on exit leaves the table as it was before the first client."""
    tag = "SIGKILL, then up again"
    before = route_tables(t.c)
    gw = start(ctx, t, "gateway")
    ctx.live.append(gw)
    cli = start(ctx, t, "client")
    ctx.live.append(cli)
    cli.stop(sig=signal.SIGKILL)
    left = route_tables(t.c)
    rep.check(any(line.startswith(GW_UNDERLAY) for line in left["-4"]),
              f"[{tag}] the killed client left its host route to {GW_UNDERLAY}", diff(before, left))
    cli = start(ctx, t, "client")
    ctx.live.append(cli)
    check_routes_up(rep, tag, t)
    ping(rep, tag, t.c, SERVER4)
    stop_client(rep, tag, t, cli, signal.SIGTERM, before)
    rep.equal(gw.stop(), 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")


def check_refused(rep, ctx, t):
    """route_all without a default in allowed_ips: `check` exits 1 naming route_all."""
    tag = "check"
    p = esptun_proc.run_check(ctx.build, t.cpath, "esptun-client")
    rep.check(p.returncode == 0, f"[{tag}] esptun-client check on the route_all config exits 0",
              (p.stdout + p.stderr)[-300:])
    cases = [(["10.99.0.0/24", "::/0"], "0.0.0.0/0"),
             (["0.0.0.0/0"], "::/0")]  # the tun has an IPv6 address: ::/0 is needed too
    for i, (allowed, missing) in enumerate(cases):
        cfg = conf.Endpoint(**{**t.ccfg.__dict__, "peers": [
            conf.Peer(**{**t.ccfg.peers[0].__dict__, "allowed_ips": allowed})]})
        path, line = write_client_config(cfg, os.path.join(ctx.tmp, f"no-default-{i}.toml"))
        p = esptun_proc.run_check(ctx.build, path, "esptun-client")
        out = (p.stdout + p.stderr).strip()
        rep.check(p.returncode == 1 and "route_all" in out and f"{path}:{line}" in out
                  and missing in out,
                  f"[{tag}] route_all with allowed_ips {allowed}: exit {p.returncode}, names "
                  f"{os.path.basename(path)}:{line} (route_all) and {missing}",
                  f"exit {p.returncode}: {out[:300]}")


def body(rep, build):
    netns.require_environment(("ip", "ping", "timeout", "sysctl"))

    class Ctx:
        pass

    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.live = build, netns.make_tempdir("ra"), []
    if not os.access(os.path.join(build, "esptun-client"), os.X_OK):
        raise TestError(f"esptun-client not found in {build}")

    def dump_logs():
        for name in ("client.log", "gateway.log"):
            log = os.path.join(ctx.tmp, name)
            print(f"\n--- {log}:\n{netns.tail(log, 30)}")
    rep.on_failure.append(dump_logs)

    t = build_topology(ctx)
    rep.info(f"C {t.c.name}, G {t.g.name}, S {t.s.name}; {CIPHER}")
    try:
        rep.section("route_all client, stopped with SIGTERM")
        round_trip(rep, ctx, t, signal.SIGTERM, full=True)
        rep.section("again, stopped with SIGINT")
        round_trip(rep, ctx, t, signal.SIGINT, full=False)
        rep.section("client killed with SIGKILL, then started again")
        crash_and_restart(rep, ctx, t)
        rep.section("check refuses route_all without a default route in allowed_ips")
        check_refused(rep, ctx, t)
    finally:
        for ep in ctx.live:  # a failed check must not leave a process behind
            if ep.alive():
                ep.stop()


if __name__ == "__main__":
    report.main("netns/client_route_all", body, tools=("ip", "ping", "timeout", "sysctl"))
