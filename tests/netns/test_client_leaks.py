#!/usr/bin/python3
# test_client_leaks.py - a route_all client keyed by IKEv2 sends nothing
# outside the tunnel: not the IPv6 it has no address for (issue 16, item 7),
# and with kill_switch = true not even after it was killed with SIGKILL.
#
#   netns C (et-leak-PID-c)          netns G (et-leak-PID-g)          netns S (et-leak-PID-s)
#  +---------------------------+    +----------------------------+   +---------------------+
#  | esptun-client up          |    | esptun-gateway run         |   | UDP target          |
#  |  no addresses: asks G     |    |  address_pool 10.77.0.0/24 |   |  198.18.0.2:9999    |
#  |  route_all (kill_switch)  |    |  (+ fd77::100/120, case 2) |   |  [fd02::2]:9999     |
#  |  allowed 0/0, ::/0        |    |  ip_forward = 1 (v4, v6)   |   |                     |
#  | default via 10.201.0.254  |    |                            |   | default via G       |
#  |  and fd01::254: the "ISP",|    |                            |   |                     |
#  |  whose MAC is ulg's       |    |                            |   |                     |
#  | ulc 10.201.0.1 fd01::1 ------ veth -- ulg 10.201.0.2 fd01::2 |   |                     |
#  |                           |    | srg 198.18.0.1 fd02::1 ---- veth -- srs .2, fd02::2 |
#  +---------------------------+    +----------------------------+   +---------------------+
#
# C's neighbour table has the pretend ISP router's addresses with ulg's MAC
# (permanent), so a packet C sends by its default routes really crosses the
# underlay, where a packet socket on ulg sees it. A probe is one UDP
# datagram with a fresh marker in its payload: seen in clear on ulg means
# leaked; inside ESP the marker is encrypted.
#
# Cases (fresh processes each; C's route tables are compared with the ones
# from before the first client, all tables, both families):
#  1. G hands out IPv4 only: C's IPv6 probe to S fails at once with
#     ENETUNREACH/EHOSTUNREACH and is not seen on ulg; IPv4 reaches S through
#     the tunnel (S sees the assigned address) and not in clear. SIGTERM:
#     exit 0, tables as before. (Before the fix the IPv6 probe left in clear.)
#  2. G hands out IPv4 and IPv6: the IPv6 probe reaches S from the assigned
#     IPv6 address, not in clear on ulg. SIGTERM: tables as before.
#  3. No kill switch, SIGKILL: the IPv4 probe leaves in clear (this is what
#     case 4 prevents, and shows that the capture sees a leak); `up` again
#     and SIGTERM give the tables back.
#  4. kill_switch = true, SIGKILL: the IPv4 and IPv6 probes fail with an
#     errno and are not seen on ulg; `up` again takes the routes over,
#     reaches S (`esptun-client cleanup` refuses meanwhile), and SIGTERM
#     gives the tables back exactly. Killed once more: still blocked, and
#     `esptun-client cleanup` gives the tables and normal routing back.
#  5. DNS where systemd-resolved runs: systemd-resolved itself cannot run in
#     a test namespace without touching the host, so the client runs in a
#     mount namespace of its own (`unshare -m`, inside `ip netns exec`)
#     where an overlay puts a stand-in resolvectl over /usr/bin; it records
#     its arguments. G hands out DNS 10.77.0.53: the tun gets it with the
#     routing domain ~. and default-route (every query to the VPN's server),
#     and `revert` on SIGTERM. The host's /usr/bin is untouched.
#
# usage: test_client_leaks.py BUILD_DIR   (root)
"""route_all and kill_switch: nothing leaves a client outside the tunnel."""

import errno
import json
import os
import re
import signal
import socket
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
from netns import TestError  # noqa: E402
from routes import diff, route_tables  # noqa: E402

ESTABLISH_TIMEOUT = 10
GW_UL, C_UL = "10.201.0.2", "10.201.0.1"
ISP4, ISP6 = "10.201.0.254", "fd01::254"
SERVER4, SERVER6, PORT = "198.18.0.2", "fd02::2", 9999
POOL4, POOL6 = "10.77.0.0/24", "fd77::100/120"
PSK = "leak-test-pre-shared-key-0123456789"
DNS = "10.77.0.53"
BLOCKED = (errno.ENETUNREACH, errno.EHOSTUNREACH)
ETH_P_ALL = 0x0003
CAPTURE_WAIT = 0.5  # a frame on a veth is there in microseconds: wide margin


class Capture:
    """Capture - every frame crossing G's ulg, through a packet socket in G."""

    def __init__(self, g):
        with g.entered():
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind(("ulg", 0))
        self.sock.setblocking(False)

    def drain(self):
        """drain() - the frames received since the last drain."""
        frames = []
        while True:
            try:
                frames.append(self.sock.recv(65536))
            except BlockingIOError:
                return frames

    def close(self):
        self.sock.close()


def build_topology(ctx):
    c = netns.Netns(netns.unique("leak", "c"))
    g = netns.Netns(netns.unique("leak", "g"))
    s = netns.Netns(netns.unique("leak", "s"))
    ctx.c, ctx.g, ctx.s = c, g, s
    netns.veth(c, g, "ulc", "ulg", [f"{C_UL}/24", "fd01::1/64"], [f"{GW_UL}/24", "fd01::2/64"])
    netns.veth(g, s, "srg", "srs", ["198.18.0.1/24", "fd02::1/64"],
               [f"{SERVER4}/24", f"{SERVER6}/64"])
    c.ip("-4", "route", "add", "default", "via", ISP4, "dev", "ulc", "onlink")
    c.ip("-6", "route", "add", "default", "via", ISP6, "dev", "ulc", "onlink")
    mac = json.loads(g.ip("-j", "link", "show", "dev", "ulg").stdout)[0]["address"]
    for isp in (ISP4, ISP6):
        c.ip("neigh", "replace", isp, "lladdr", mac, "dev", "ulc", "nud", "permanent")
    s.ip("-4", "route", "add", "default", "via", "198.18.0.1", "dev", "srs")
    s.ip("-6", "route", "add", "default", "via", "fd02::1", "dev", "srs")
    g.sysctl({"net.ipv4.ip_forward": 1, "net.ipv6.conf.all.forwarding": 1})
    netns.wait_until(lambda: re.search(r"inet6 fe80::\S+ scope link(?! tentative)",
                                       c.ip("-6", "addr", "show", "dev", "ulc").stdout),
                     5, what="link-local address on ulc")
    sfx = os.getpid() % 100000
    ctx.ctun = f"lkc{sfx}"
    for name, pools, addrs, dns in (("g4", [POOL4], ["10.77.0.1/24"], None),
                                    ("g46", [POOL4, POOL6], ["10.77.0.1/24", "fd77::1/64"], None),
                                    ("g4dns", [POOL4], ["10.77.0.1/24"], [DNS])):
        tunnel = {"interface": f"lkg{sfx}", "addresses": addrs, "listen": f"{GW_UL}:4500",
                  "ike_port": 0, "local_id": "gw.example", "address_pool": pools, "dns": dns,
                  "tun_io": "direct", "control_socket": os.path.join(ctx.tmp, "g.sock"),
                  "state_dir": os.path.join(ctx.tmp, "state-g")}
        peer = dict(name="alice", psk=PSK, remote_id="alice@example.com")
        ctx.gcfg[name] = conf.write_private(os.path.join(ctx.tmp, f"{name}.toml"),
                                            conf.render_ike_config(tunnel, [peer]))
    for name, kill in (("c", None), ("ck", True)):
        tunnel = {"interface": ctx.ctun, "listen": f"{C_UL}:4500", "local_id": "alice@example.com",
                  "route_all": True, "kill_switch": kill, "tun_io": "direct",
                  "control_socket": os.path.join(ctx.tmp, "c.sock"),
                  "state_dir": os.path.join(ctx.tmp, "state-c")}
        peer = dict(name="gw", endpoint=f"{GW_UL}:4500", allowed_ips=["0.0.0.0/0", "::/0"],
                    psk=PSK, remote_id="gw.example")
        ctx.ccfg[name] = conf.write_private(os.path.join(ctx.tmp, f"{name}.toml"),
                                            conf.render_ike_config(tunnel, [peer]))


def start(ctx, role, cfg):
    ns = ctx.c if role == "client" else ctx.g
    ep = esptun_proc.Endpoint(ctx.build, ns, ctx.ccfg[cfg] if role == "client" else ctx.gcfg[cfg],
                              os.path.join(ctx.tmp, f"{role}.log"), role)
    ctx.live.append(ep)
    ep.start()
    return ep


def wait_assigned(ctx, cli, families):
    """The client's IKE SA established and its tun holding an assigned address
    of each of @families ("inet", "inet6"); returns {family: address}."""
    def ready():
        if not cli.alive():
            raise TestError(f"esptun-client exited with {cli.proc.returncode}; log:\n"
                            f"{netns.tail(cli.log, 15)}")
        st = cli.status_or_empty().get("ike") or {}
        if not any(s.get("state") == "established" for s in st.get("sas") or []):
            return None
        got = {}
        for link in json.loads(ctx.c.ip("-j", "addr", "show", "dev", ctx.ctun).stdout or "[]"):
            for a in link.get("addr_info", []):
                if a.get("scope") == "global" and "tentative" not in a:
                    got.setdefault(a.get("family"), a.get("local"))
        return got if all(f in got for f in families) else None
    try:
        return netns.wait_until(ready, ESTABLISH_TIMEOUT, interval=0.1,
                                what=f"an established IKE SA and {families} on {ctx.ctun}")
    except TestError as e:
        raise TestError(f"{e}\nclient log:\n{netns.tail(cli.log, 20)}")


def probe(ctx, cap, family, dst):
    """One UDP datagram from C to dst:PORT with a fresh marker. Returns
    (errno of sendto or 0, whether the marker crossed ulg in clear, marker)."""
    marker = os.urandom(12).hex().encode()
    cap.drain()
    s = ctx.c.socket(family, socket.SOCK_DGRAM)
    err = 0
    try:
        s.sendto(b"esptun-leak-probe " + marker, (dst, PORT))
    except OSError as e:
        err = e.errno
    finally:
        s.close()
    time.sleep(CAPTURE_WAIT)
    seen = any(marker in f for f in cap.drain())
    return err, seen, marker


def expect_blocked(rep, tag, ctx, cap, family, dst):
    err, seen, _ = probe(ctx, cap, family, dst)
    rep.check(err in BLOCKED and not seen,
              f"[{tag}] UDP C -> {dst}: sendto fails with "
              f"{errno.errorcode.get(err, err) if err else 'no error'} and nothing crosses the "
              "underlay in clear",
              f"sendto errno {err} ({os.strerror(err) if err else 'sent'}), seen in clear on "
              f"ulg: {seen}")


def expect_tunnelled(rep, tag, ctx, cap, family, dst, src):
    """The probe reaches S from @src (the assigned address) and is not seen in clear."""
    with ctx.s.entered():
        srv = socket.socket(family, socket.SOCK_DGRAM)
    try:
        srv.bind((dst, PORT))
        srv.settimeout(3)
        err, seen, marker = probe(ctx, cap, family, dst)
        try:
            data, frm = srv.recvfrom(2048)
        except socket.timeout:
            data, frm = b"", ("",)
    finally:
        srv.close()
    rep.check(err == 0 and marker in data and frm[0] == src and not seen,
              f"[{tag}] UDP C -> {dst}: S receives it from {src} (through the tunnel), "
              "nothing in clear on the underlay",
              f"sendto errno {err}, S got {data[:60]!r} from {frm[0]!r}, seen in clear: {seen}")


def stop_clean(rep, tag, ctx, cli, before):
    rep.equal(cli.stop(), 0, f"[{tag}] esptun-client: SIGTERM -> exit code")
    after = route_tables(ctx.c)
    rep.check(after == before, f"[{tag}] C's route tables (all, both families) as before the "
              "client", diff(before, after))


def case_v4_only(rep, ctx, cap, before):
    tag = "IPv4 only assigned"
    gw = start(ctx, "gateway", "g4")
    cli = start(ctx, "client", "c")
    got = wait_assigned(ctx, cli, ("inet",))
    rep.check("inet6" not in got, f"[{tag}] the tun has {got.get('inet')} and no IPv6 address",
              json.dumps(got))
    expect_blocked(rep, tag, ctx, cap, socket.AF_INET6, SERVER6)
    expect_tunnelled(rep, tag, ctx, cap, socket.AF_INET, SERVER4, got["inet"])
    stop_clean(rep, tag, ctx, cli, before)
    rep.equal(gw.stop(), 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")


def case_dual(rep, ctx, cap, before):
    tag = "IPv4 and IPv6 assigned"
    gw = start(ctx, "gateway", "g46")
    cli = start(ctx, "client", "c")
    got = wait_assigned(ctx, cli, ("inet", "inet6"))
    rep.info(f"[{tag}] assigned {got['inet']} and {got['inet6']}")
    expect_tunnelled(rep, tag, ctx, cap, socket.AF_INET6, SERVER6, got["inet6"])
    expect_tunnelled(rep, tag, ctx, cap, socket.AF_INET, SERVER4, got["inet"])
    stop_clean(rep, tag, ctx, cli, before)
    rep.equal(gw.stop(), 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")


def case_killed(rep, ctx, cap, before, kill_switch):
    tag = "kill_switch, SIGKILL" if kill_switch else "no kill switch, SIGKILL"
    cfg = "ck" if kill_switch else "c"
    gw = start(ctx, "gateway", "g4")
    cli = start(ctx, "client", cfg)
    got = wait_assigned(ctx, cli, ("inet",))
    expect_tunnelled(rep, tag, ctx, cap, socket.AF_INET, SERVER4, got["inet"])
    cli.stop(sig=signal.SIGKILL)
    netns.wait_until(lambda: ctx.ctun not in ctx.c.links(), 5, what=f"{ctx.ctun} gone")
    if kill_switch:
        expect_blocked(rep, tag, ctx, cap, socket.AF_INET, SERVER4)
        expect_blocked(rep, tag, ctx, cap, socket.AF_INET6, SERVER6)
    else:
        err, seen, _ = probe(ctx, cap, socket.AF_INET, SERVER4)
        rep.check(err == 0 and seen, f"[{tag}] UDP C -> {SERVER4} leaves in clear by the ISP "
                  "default route (the capture sees a leak)", f"sendto errno {err}, seen {seen}")
    cli = start(ctx, "client", cfg)
    got = wait_assigned(ctx, cli, ("inet",))
    expect_tunnelled(rep, f"{tag}, up again", ctx, cap, socket.AF_INET, SERVER4, got["inet"])
    if kill_switch:
        p = cleanup(ctx, cfg)
        rep.check(p.returncode == 1 and "running" in p.stderr,
                  f"[{tag}] `esptun-client cleanup` refuses while the client runs",
                  f"exit {p.returncode}: {p.stdout}{p.stderr}")
    stop_clean(rep, f"{tag}, up again", ctx, cli, before)
    err, seen, _ = probe(ctx, cap, socket.AF_INET, SERVER4)
    rep.check(err == 0 and seen, f"[{tag}] after the clean stop C's normal routing is back "
              f"({SERVER4} by the ISP default route)", f"sendto errno {err}, seen {seen}")
    if kill_switch:
        cli = start(ctx, "client", cfg)
        wait_assigned(ctx, cli, ("inet",))
        cli.stop(sig=signal.SIGKILL)
        netns.wait_until(lambda: ctx.ctun not in ctx.c.links(), 5, what=f"{ctx.ctun} gone")
        expect_blocked(rep, f"{tag} again", ctx, cap, socket.AF_INET, SERVER4)
        p = cleanup(ctx, cfg)
        rep.check(p.returncode == 0 and p.stdout.count("removed route") == 5,
                  f"[{tag} again] `esptun-client cleanup` removes 4 unreachable routes and the "
                  "host route", f"exit {p.returncode}: {p.stdout}{p.stderr}")
        after = route_tables(ctx.c)
        rep.check(after == before, f"[{tag} again, cleanup] C's route tables as before the "
                  "client", diff(before, after))
        err, seen, _ = probe(ctx, cap, socket.AF_INET, SERVER4)
        rep.check(err == 0 and seen, f"[{tag} again, cleanup] C's normal routing is back",
                  f"sendto errno {err}, seen {seen}")
    rep.equal(gw.stop(), 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")


def cleanup(ctx, cfg):
    """`esptun-client cleanup -c FILE` in C."""
    return ctx.c.run(os.path.join(ctx.build, "esptun-client"), "cleanup", "-c", ctx.ccfg[cfg],
                     check=False)


def case_dns(rep, ctx):
    tag = "DNS, route_all"
    fake = os.path.join(ctx.tmp, "fakebin")
    calls = os.path.join(ctx.tmp, "resolvectl.calls")
    os.makedirs(fake)
    with open(os.path.join(fake, "resolvectl"), "w") as f:
        f.write(f"#!/bin/sh\necho \"$*\" >>'{calls}'\n")
    os.chmod(os.path.join(fake, "resolvectl"), 0o755)
    host_had = os.path.exists("/usr/bin/resolvectl")
    gw = start(ctx, "gateway", "g4dns")
    cli = esptun_proc.Endpoint(ctx.build, ctx.c, ctx.ccfg["c"],
                               os.path.join(ctx.tmp, "client.log"), "client")
    ctx.live.append(cli)
    # Read-only lower layers only: the overlay writes nothing anywhere, and
    # the mount lives and dies with the client's private mount namespace.
    script = (f"mount -t overlay esptun-test -o lowerdir={fake}:/usr/bin /usr/bin && "
              f"exec {cli.binary} up -c {cli.config}")
    cli._logf = open(cli.log, "ab")
    cli.proc = ctx.c.spawn("unshare", "-m", "--propagation", "private", "sh", "-c", script,
                           stdout=cli._logf, stderr=cli._logf)
    cli.wait_ready(10)
    wait_assigned(ctx, cli, ("inet",))
    st = netns.wait_until(lambda: (cli.status().get("ike") or {}).get("dns_applied"), 5,
                          what="ike.dns_applied in the client's status")
    rep.equal(st, "resolvectl", f"[{tag}] client status ike.dns_applied")
    with open(calls) as f:
        got = f.read().splitlines()
    want = [f"dns {ctx.ctun} {DNS}", f"domain {ctx.ctun} ~.", f"default-route {ctx.ctun} yes"]
    rep.equal(got, want, f"[{tag}] resolvectl calls while up")
    rep.equal(cli.stop(), 0, f"[{tag}] esptun-client: SIGTERM -> exit code")
    with open(calls) as f:
        got = f.read().splitlines()
    rep.equal(got[len(want):], [f"revert {ctx.ctun}"], f"[{tag}] resolvectl calls at the stop")
    rep.equal(os.path.exists("/usr/bin/resolvectl"), host_had,
              f"[{tag}] the host's /usr/bin/resolvectl exists (as before the test)")
    rep.equal(gw.stop(), 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")


def body(rep, build):
    netns.require_environment(("ip",))

    class Ctx:
        pass
    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.live, ctx.gcfg, ctx.ccfg = build, netns.make_tempdir("leak"), [], {}, {}
    for prog in ("esptun-client", "esptun-gateway"):
        if not os.access(os.path.join(build, prog), os.X_OK):
            raise TestError(f"{prog} not found in {build}: build it first")

    def dump_logs():
        for name in ("client.log", "gateway.log"):
            print(f"\n--- {name}:\n{netns.tail(os.path.join(ctx.tmp, name), 30)}")
    rep.on_failure.append(dump_logs)
    build_topology(ctx)
    cap = Capture(ctx.g)
    try:
        before = route_tables(ctx.c)
        rep.section("G hands out IPv4 only: IPv6 is blocked, not leaked")
        case_v4_only(rep, ctx, cap, before)
        rep.section("G hands out IPv4 and IPv6: both go through the tunnel")
        case_dual(rep, ctx, cap, before)
        rep.section("without the kill switch a killed client leaks (the control)")
        case_killed(rep, ctx, cap, before, False)
        rep.section("kill_switch = true: nothing leaks after SIGKILL")
        case_killed(rep, ctx, cap, before, True)
        rep.section("DNS with route_all: the VPN's servers for every name (resolvectl)")
        case_dns(rep, ctx)
    finally:
        cap.close()
        for ep in ctx.live:  # a failed check must not leave a process behind
            if ep.alive():
                ep.stop()


if __name__ == "__main__":
    report.main("netns/client_leaks", body, tools=("ip",))
