#!/usr/bin/python3
# test_ike_clients.py - road-warrior clients keyed by IKEv2, esptun against
# esptun. esptun-client has no [tunnel] addresses: it asks esptun-gateway for
# a virtual address and DNS servers (configuration payload, RFC 7296 section
# 3.15), puts the address on its tun, and reaches the gateway and a host on
# the network behind it. The gateway hands each client the host address of
# its allowed_ips that lies in [tunnel] address_pool, or, for a client
# without allowed_ips, leases it a free address of the pool.
#
#      netns A (et-ikecl-PID-N-a)              netns B (et-ikecl-PID-N-b)
#    +------------------------------+        +------------------------------+
#    | tun icaN  10.77.0.10/32      |        | tun icbN  10.77.0.11/32      |
#    |   (assigned by the gateway)  |        |   (assigned by the gateway)  |
#    |   10.77.0.0/24 and           |        |   10.77.0.0/24 and           |
#    |   192.168.200.0/24 -> tun    |        |   192.168.200.0/24 -> tun    |
#    | esptun-client                |        | esptun-client                |
#    |   local_id alice@example.com |        |   local_id bob@example.com   |
#    |   listen 0.0.0.0:4500        |        |   listen 10.202.0.3:4500     |
#    |   peer gw 10.202.0.1:4500    |        |   peer gw 10.202.0.1:4500    |
#    | ula 10.202.0.2/24            |        | ulb 10.202.0.3/24            |
#    +-------------|----------------+        +---------------|--------------+
#                  | veth                                    | veth
#    +-------------|-----------------------------------------|--------------+
#    |            ga ---------------- br0 ------------------ gb             |
#    |                           10.202.0.1/24                              |
#    | esptun-gateway  local_id gw.example, listen 10.202.0.1:4500, IKE :500|
#    |   tun igwN 10.77.0.1/24; address_pool 10.77.0.0/24, dns 10.77.0.53   |
#    |   peer alice: 10.77.0.10/32, remote_id alice@example.com, no endpoint|
#    |   peer bob:   10.77.0.11/32, remote_id bob@example.com, no endpoint  |
#    |   peers dave, erin: no allowed_ips (a lease from the pool each)       |
#    | ip_forward = 1                       netns G (et-ikecl-PID-N-g)      |
#    | gh 192.168.200.1/24   (G owns .1; this kernel has no dummy links)    |
#    +-------------|--------------------------------------------------------+
#                  | veth: "the network behind the gateway"
#    +-------------|----------------+
#    | hg 192.168.200.2/24          |  netns H (et-ikecl-PID-N-h)
#    | 10.77.0.0/24 via .1          |  a host behind the gateway
#    +------------------------------+
#
# Cases (fresh namespaces and processes each; the gateway config is the same
# in all of them):
#  1. alice alone: her tun gets 10.77.0.10/32; her status shows the IKE SA
#     established with 10.77.0.10 and DNS 10.77.0.53; ping H and the
#     gateway's 10.77.0.1; 20 MB checksummed TCP A -> H (H sees 10.77.0.10).
#  2. alice and bob at once: 10.77.0.10 and 10.77.0.11; both ping H at the
#     same time; the gateway shows two established IKE SAs (alice, bob); two
#     concurrent 20 MB transfers to H, checksums equal, each from its own
#     address.
#  3. wrong PSK (alice's identity, bob's key): "authentication failed" in
#     both logs, nothing established, no address on the client's tun.
#  4. unknown identity (carol@example.com): the gateway logs that the
#     identity is not configured, the client logs authentication failed.
#  5. SIGTERM to alice (bob connected too): exit 0, her tun with its address
#     and routes gone; within 5 s the gateway has no IKE SA for alice any more
#     (her Delete), while bob's stays and still reaches H.
#  6. dave and erin (no fixed addresses) at once: each gets its own address
#     leased from the pool, none of .0, .1 (the gateway), .10, .11 (alice's
#     and bob's) or .255; both ping H; 20 MB dave -> H, which sees his leased
#     address. The gateway's status counts 2 leases. SIGTERM to dave: within
#     5 s the lease has ended (1 lease, "lease ended" logged) and erin still
#     reaches H; dave started again gets his previous address back.
# Namespaces are deleted at the end of each case (and on any failure or
# signal); the test checks with `ip netns list` that none is left.
# ESPTUN_IKE_CASES=1,6 runs only those cases (diagnostics).
#
# usage: test_ike_clients.py BUILD_DIR   (root; BUILD_DIR holds esptun-gateway
#        and esptun-client)
"""IKEv2 road-warrior clients: esptun-client against esptun-gateway."""

import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping as ping_lib  # noqa: E402
import report  # noqa: E402
import transfer as transfer_lib  # noqa: E402
from esptun_ike import established, ike_sas, pool_leases  # noqa: E402
from esptun_proc import log_line, wait_log_line  # noqa: E402
from netns import TestError  # noqa: E402

XFER_BYTES = 20 * 1000 * 1000
XFER_TIMEOUT = 30
ESTABLISH_TIMEOUT = 10   # client started -> IKE SA established and address on the tun
LOG_TIMEOUT = 8          # wait for an authentication failure to be logged
DELETE_TIMEOUT = 5       # client stopped -> the gateway has dropped its IKE SA

GW_UL, A_UL, B_UL = "10.202.0.1", "10.202.0.2", "10.202.0.3"
GW_IN, POOL, DNS = "10.77.0.1", "10.77.0.0/24", "10.77.0.53"
BEHIND_NET, BEHIND_GW, H_ADDR = "192.168.200.0/24", "192.168.200.1", "192.168.200.2"
GW_ID = "gw.example"

USERS = {
    "alice": dict(id="alice@example.com", vip="10.77.0.10",
                  psk="alice-pre-shared-key-0123456789"),
    "bob": dict(id="bob@example.com", vip="10.77.0.11",
                psk="bob-pre-shared-key-0123456789ab"),
}
# Clients without a fixed address: the gateway leases them one from the pool.
POOL_USERS = {
    "dave": dict(id="dave@example.com", vip=None, psk="dave-pre-shared-key-0123456789ab"),
    "erin": dict(id="erin@example.com", vip=None, psk="erin-pre-shared-key-0123456789ab"),
}
USERS.update(POOL_USERS)
FIXED = [USERS["alice"]["vip"], USERS["bob"]["vip"]]
CAROL = dict(id="carol@example.com", psk="carol-pre-shared-key-0123456789a")
# A peer keyed statically on the same gateway (it never connects): its keys
# are loaded, turned into SAs and shown in the status, so the leak check
# covers static keys too. Fresh random keys per run.
STATIC_PEER = dict(spi_out=0x7001, spi_in=0x7002,
                   keys=[secrets.token_hex(16), secrets.token_hex(20),
                         secrets.token_hex(16), secrets.token_hex(20)])

CASES = [
    dict(kind="one", title="alice alone: virtual address and DNS from the gateway, ping H "
                           "and 10.77.0.1, 20 MB A -> H"),
    dict(kind="two", title="alice and bob at once: own addresses, concurrent pings and "
                           "20 MB transfers to H"),
    dict(kind="wrong_psk", title="wrong PSK: alice's identity with bob's key"),
    dict(kind="unknown_id", title="unknown identity carol@example.com"),
    dict(kind="stop", title="SIGTERM to alice while bob is connected: exit 0, tun gone, "
                            "the gateway drops her IKE SA"),
    dict(kind="pool", title="dave and erin without fixed addresses: leases from the pool, "
                            "ping and 20 MB to H, lease ended by a SIGTERM, same address again"),
]


class Site:
    """One namespace with (optionally) one esptun endpoint in it."""

    def __init__(self, label, ns):
        self.label, self.ns = label, ns
        self.ep, self.tun, self.user, self.vip = None, None, None, None


class Reported(TestError):
    """A failure already recorded as a failed check: the case ends, nothing more to say."""


class ConfigRefused(TestError):
    """esptun refuses the road-warrior config (check or run): every case would fail alike.
    reported: the failed check is already in the report."""
    reported = False


# ---------------------------------------------------------------------------
# Configs.

def gateway_config(ctx, idx):
    tunnel = {
        "interface": f"igw{ctx.sfx}x{idx}",
        "addresses": [f"{GW_IN}/24"],
        "listen": f"{GW_UL}:4500",
        "ike_port": 500,
        "local_id": GW_ID,
        "address_pool": [POOL],
        "dns": [DNS],
        "tun_io": "direct",
        "control_socket": os.path.join(ctx.tmp, f"g{idx}.sock"),
        "state_dir": os.path.join(ctx.tmp, f"state-g{idx}"),
    }
    peers = [dict(name=name, allowed_ips=[f"{u['vip']}/32"] if u["vip"] else None, psk=u["psk"],
                  remote_id=u["id"])
             for name, u in USERS.items()]
    k = STATIC_PEER["keys"]
    static = ("\n[[peer]]\nname = \"branch\"\nendpoint = \"10.202.0.99:4500\"\n"
              "allowed_ips = [\"192.168.77.0/24\"]\ncipher = \"aes128-cbc-hmac-sha1\"\n"
              f"[peer.out]\nspi = {STATIC_PEER['spi_out']:#x}\n"
              f"enc_key = \"0x{k[0]}\"\nauth_key = \"0x{k[1]}\"\n"
              f"[peer.in]\nspi = {STATIC_PEER['spi_in']:#x}\n"
              f"enc_key = \"0x{k[2]}\"\nauth_key = \"0x{k[3]}\"\n")
    path = conf.write_private(os.path.join(ctx.tmp, f"g{idx}.toml"),
                              conf.render_ike_config(tunnel, peers) + static)
    return path, tunnel["interface"]


def client_config(ctx, idx, label, local_id, psk, listen):
    tun = f"ic{label.lower()}{ctx.sfx}x{idx}"
    tunnel = {
        "interface": tun,
        # no addresses: the client asks the gateway for one
        "listen": listen,
        "local_id": local_id,
        "tun_io": "direct",
        "control_socket": os.path.join(ctx.tmp, f"{label.lower()}{idx}.sock"),
        "state_dir": os.path.join(ctx.tmp, f"state-{label.lower()}{idx}"),
    }
    peer = dict(name="gw", endpoint=f"{GW_UL}:4500", allowed_ips=[POOL, BEHIND_NET], psk=psk,
                remote_id=GW_ID)
    path = conf.write_private(os.path.join(ctx.tmp, f"{label.lower()}{idx}.toml"),
                              conf.render_ike_config(tunnel, [peer]))
    return path, tun


# ---------------------------------------------------------------------------
# Topology.

def build_topology(ctx, idx, labels):
    """G (bridge to the clients, veth to H), H, and one namespace per label."""
    g = Site("G", netns.Netns(netns.unique("ikecl", f"{idx}-g")))
    h = Site("H", netns.Netns(netns.unique("ikecl", f"{idx}-h")))
    ctx.case_ns = [g.ns, h.ns]
    g.ns.sysctl({"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 0,
                 "net.ipv4.conf.default.rp_filter": 0})
    g.ns.ip("link", "add", "br0", "type", "bridge")
    g.ns.ip("addr", "add", f"{GW_UL}/24", "dev", "br0")
    g.ns.ip("link", "set", "br0", "up")
    netns.veth(g.ns, h.ns, "gh", "hg", [f"{BEHIND_GW}/24"], [f"{H_ADDR}/24"])
    h.ns.ip("route", "add", POOL, "via", BEHIND_GW)
    sites = {}
    for label in labels:
        ul = {"A": A_UL, "B": B_UL}[label]
        s = Site(label, netns.Netns(netns.unique("ikecl", f"{idx}-{label.lower()}")))
        ctx.case_ns.append(s.ns)
        gdev, cdev = f"g{label.lower()}", f"ul{label.lower()}"
        netns.veth(g.ns, s.ns, gdev, cdev, [], [f"{ul}/24"])
        g.ns.ip("link", "set", gdev, "master", "br0")
        s.ul = ul
        sites[label] = s
    return g, h, sites


def start_gateway(ctx, idx, g):
    path, tun = gateway_config(ctx, idx)
    g.tun = tun
    g.ep = esptun_proc.Endpoint(ctx.build, g.ns, path, os.path.join(ctx.tmp, f"g{idx}.log"))
    ctx.case_logs.append(g.ep.log)
    ctx.all_logs.append(g.ep.log)
    if idx == 0:
        check_accepted(ctx, path, "esptun-gateway")
    try:
        g.ep.start()
    except TestError as e:
        raise refused("esptun-gateway", path, g.ep.log, e, idx)


def make_client(ctx, idx, s, local_id, psk, user=None):
    """Writes the client config of site s (listen: A the wildcard, B its own address)."""
    listen = "0.0.0.0:4500" if s.label == "A" else f"{s.ul}:4500"
    path, tun = client_config(ctx, idx, s.label, local_id, psk, listen)
    s.tun, s.user, s.local_id = tun, user, local_id
    s.vip = USERS[user]["vip"] if user else None  # None: leased, learnt when it is up
    s.ep = esptun_proc.Endpoint(ctx.build, s.ns, path,
                                os.path.join(ctx.tmp, f"{s.label.lower()}{idx}.log"), "client")
    ctx.case_logs.append(s.ep.log)
    ctx.all_logs.append(s.ep.log)
    if idx == 0:
        check_accepted(ctx, path, "esptun-client")
    return s


def start_client(ctx, idx, s, tolerate_exit=False):
    """Starts the client; tolerate_exit: a client that gives up (auth failure) may exit."""
    try:
        s.ep.start()
    except TestError as e:
        if tolerate_exit and s.ep.proc and s.ep.proc.poll() is not None:
            return False
        raise refused("esptun-client", s.ep.config, s.ep.log, e, idx)
    return True


def check_accepted(ctx, path, prog):
    """`PROG check` on the first case's config; esptun's own words when it says no."""
    p = esptun_proc.run_check(ctx.build, path, prog)
    out = (p.stdout + p.stderr).strip()
    ok = ctx.rep.check(p.returncode == 0,
                       f"{prog} check accepts the road-warrior config ({os.path.basename(path)})"
                       + ("" if p.returncode == 0 else
                          f": exit {p.returncode}: {out.splitlines()[0] if out else '(no output)'}"),
                       f"config {path}:\n{open(path).read()}\noutput:\n{out}")
    if not ok:
        e = ConfigRefused(f"{prog} refuses the road-warrior config: "
                          f"{out.splitlines()[0] if out else '(no output)'}")
        e.reported = True
        raise e


def refused(prog, path, log, e, idx):
    lines = netns.tail(log, 8).strip().splitlines()
    last = lines[-1] if lines else str(e).splitlines()[0]
    cls = ConfigRefused if idx == 0 else TestError
    return cls(f"{prog} run -c {os.path.basename(path)} did not come up: {last}\n{e}")


# ---------------------------------------------------------------------------
# Status JSON and interface state, read defensively.

def ike_counter(status, name):
    c = status.get("ike", {}).get("counters", {}) if isinstance(status.get("ike"), dict) else {}
    v = c.get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def paths_of(obj, want, path=""):
    """paths_of() - JSON paths of every string equal to want (or want/len)."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths_of(v, want, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths_of(v, want, f"{path}[{i}]")
    elif isinstance(obj, str) and obj.split("/")[0] == want:
        out.append(path)
    return out


def routes_text(ns):
    return ns.ip("-4", "route", "show").stdout + ns.ip("-6", "route", "show").stdout


def short(obj, n=1500):
    return json.dumps(obj)[:n]


# ---------------------------------------------------------------------------
# Checks.

def ping(rep, tag, s, dst, count=3, expect=True):
    res = ping_lib.run(s.ns, dst, count=count)
    if expect:
        return ping_lib.expect_replies(rep, f"[{tag}] ping {s.label} -> {dst}", res, count)
    return ping_lib.expect_no_reply(rep, f"[{tag}] ping {s.label} -> {dst} gets no reply", res)


def wait_client_up(rep, tag, s):
    """Client status: an established IKE SA; tun: the virtual address. Returns the status."""
    t0 = time.monotonic()
    vip = s.vip or "a pool address"

    def up():
        if not s.ep.alive():
            raise TestError(f"esptun-client ({s.label}) exited with {s.ep.proc.returncode} "
                            f"before its IKE SA was up; log:\n{netns.tail(s.ep.log, 15)}")
        st = s.ep.status()
        addrs = s.ns.inet_addrs(s.tun) or []
        if s.vip is None and established(st) and len(addrs) == 1:
            s.vip = addrs[0][0]
        return st if established(st) and any(a == s.vip for a, _ in addrs) else None
    try:
        st = netns.wait_until(up, ESTABLISH_TIMEOUT, interval=0.1,
                              what=f"{s.label}'s IKE SA established and {vip} on {s.tun}")
    except TestError as e:
        st = s.ep.status_or_empty()
        rep.check(False, f"[{tag}] {s.label} ({s.local_id}): IKE SA established and {vip} on "
                  f"{s.tun} within {ESTABLISH_TIMEOUT} s ({str(e).splitlines()[0]})",
                  f"ike: {short(st.get('ike'))}\n{s.tun}: {s.ns.inet_addrs(s.tun)}\n"
                  f"log:\n{netns.tail(s.ep.log, 15)}")
        raise Reported(str(e))
    rep.info(f"{s.label} ({s.local_id}) up {time.monotonic() - t0:.2f} s after its control "
             "socket answered")
    return st


def check_client_up(rep, tag, s, st):
    """The tun's address, and what the client's status says about the IKE SA."""
    addrs = s.ns.inet_addrs(s.tun)
    rep.check(addrs == [(s.vip, 32)],
              f"[{tag}] {s.label}: `ip -j addr show dev {s.tun}`: exactly {s.vip}/32",
              f"IPv4 addresses {addrs}")
    sas = ike_sas(st)
    est = established(st)
    first = sas[0] if sas else {}
    rep.check(str(first.get("state", "")).lower() == "established" and len(est) == 1,
              f"[{tag}] {s.label} status: ike.sas[0].state == \"established\" "
              f"(peer {first.get('peer')!r}, remote {first.get('remote')!r}, {len(sas)} IKE SA(s))",
              short(st.get("ike")))
    sa = est[0] if est else first
    for what, want, key in (("virtual address", s.vip, "virtual_ips"), ("DNS server", DNS, "dns")):
        in_sa = paths_of(sa, want)
        anywhere = paths_of(st, want)
        designed = key in sa and any(x.split("/")[0] == want for x in sa.get(key) or []
                                     if isinstance(x, str))
        rep.check(bool(in_sa),
                  f"[{tag}] {s.label} status: {what} {want} in its IKE SA at "
                  + (", ".join(f"ike.sas[{sas.index(sa)}].{p}" for p in in_sa) if in_sa
                     else "(nowhere)")
                  + ("" if designed or not in_sa else f" (not in ike.sas[].{key})"),
                  f"found in the whole status at {anywhere or 'no path'}; IKE SA: {short(sa)}")
    ike = st.get("ike") if isinstance(st.get("ike"), dict) else {}
    if "dns_applied" in ike:
        rep.info(f"{s.label}: ike.dns_applied = {ike['dns_applied']!r}")
    routes = s.ns.ip("-4", "route", "show", "dev", s.tun, check=False).stdout
    rep.check(POOL in routes and BEHIND_NET in routes,
              f"[{tag}] {s.label}: routes {POOL} and {BEHIND_NET} via {s.tun} (its allowed_ips)",
              routes)


def check_gateway_sas(rep, tag, g, users, vips=None):
    """Gateway status: one established IKE SA per user, each with its own remote,
    and (when the status has virtual_ips) the address handed to it."""
    st = g.ep.status()
    est = established(st)
    peers = sorted(s.get("peer") for s in est)
    remotes = {s.get("peer"): s.get("remote") for s in est}
    want = sorted(users)
    rep.check(peers == want and len(set(remotes.values())) == len(want),
              f"[{tag}] gateway status: {len(want)} established IKE SA(s), peers {want}, "
              f"remotes {[remotes.get(p) for p in want]}",
              short(st.get("ike")))
    for name in users:
        sa = next((s for s in est if s.get("peer") == name), None)
        if sa is None:
            continue
        vip = USERS[name]["vip"] or (vips or {}).get(name)
        if "virtual_ips" in sa:
            rep.check(any(isinstance(x, str) and x.split("/")[0] == vip for x in sa["virtual_ips"]),
                      f"[{tag}] gateway status: {name}'s IKE SA virtual_ips holds {vip}",
                      short(sa))
        else:
            rep.info(f"gateway status has no ike.sas[].virtual_ips for {name}")
        p = esptun_proc.peer(st, name)
        rep.check(p.get("sa_out") and p.get("sa_in"),
                  f"[{tag}] gateway status: peer {name} has ESP SAs both ways "
                  f"(endpoint {p.get('endpoint')}, keying {p.get('keying')})", short(p))
    return st


def transfer_one(site, h, port):
    return transfer_lib.run(site.ns, h.ns, H_ADDR, port, XFER_BYTES, XFER_TIMEOUT)


def check_transfer(rep, tag, site, result):
    if isinstance(result, Exception):
        rep.check(False, f"[{tag}] {XFER_BYTES // 1000000} MB TCP {site.label} -> H: "
                  f"{str(result).splitlines()[0]}", str(result)[:1000])
        return
    sent, got, secs = result
    vip = site.vip
    transfer_lib.check(rep, f"[{tag}] {XFER_BYTES // 1000000} MB TCP {site.label} -> H ({H_ADDR})",
                       sent, got, XFER_BYTES, secs)
    if got:
        rep.equal(got.get("peer"), vip, f"[{tag}] H saw {site.label}'s transfer come from")


def transfers(rep, tag, sites, h):
    """One transfer per site to H, all at the same time (threads)."""
    results = {}

    def go(s, port):
        try:
            results[s.label] = transfer_one(s, h, port)
        except Exception as e:  # reported by the main thread
            results[s.label] = e
    threads = [threading.Thread(target=go, args=(s, 5201 + i), daemon=True)
               for i, s in enumerate(sites)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(XFER_TIMEOUT + 20)
    for s in sites:
        check_transfer(rep, tag, s, results.get(s.label, TestError("transfer thread hung")))


def concurrent_pings(rep, tag, sites, dst, count=5):
    procs = [(s, ping_lib.spawn(s.ns, dst, count=count)) for s in sites]
    for s, p in procs:
        ping_lib.expect_replies(rep, f"[{tag}, at the same time] ping {s.label} -> {dst}",
                                ping_lib.finish(p), count)


def stop_client(rep, tag, s):
    """SIGTERM: exit 0; the tun, its address and the routes through it are gone."""
    rc = s.ep.stop()
    rep.equal(rc, 0, f"[{tag}] esptun-client {s.label}: SIGTERM -> exit code")
    links = s.ns.links()
    addrs = s.ns.ip("-j", "addr", "show").stdout
    routes = routes_text(s.ns)
    left = [x for x in ("10.77.0.", "192.168.200.") if x in addrs + routes]
    rep.check(s.tun not in links and not left,
              f"[{tag}] {s.label}: tun {s.tun} removed, with its address and routes",
              f"links {links}, left over: {left}\n{routes}")


def stop_gateway(rep, tag, g):
    rc = g.ep.stop()
    rep.equal(rc, 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")
    rep.check(g.tun not in g.ns.links(), f"[{tag}] gateway's tun {g.tun} removed",
              str(g.ns.links()))


# ---------------------------------------------------------------------------
# Cases.

def case_up(rep, ctx, idx, tag, labels, users=None):
    """Gateway plus clients (A alice, B bob by default), all up. Returns (g, h, [sites])."""
    g, h, sites = build_topology(ctx, idx, labels)
    ctx.running = [g]
    start_gateway(ctx, idx, g)
    users = users or {"A": "alice", "B": "bob"}
    clients = []
    for label in labels:
        u = USERS[users[label]]
        s = make_client(ctx, idx, sites[label], u["id"], u["psk"], users[label])
        start_client(ctx, idx, s)
        ctx.running.append(s)
        clients.append(s)
    for s in clients:
        st = wait_client_up(rep, tag, s)
        check_client_up(rep, tag, s, st)
    return g, h, clients


def check_show(rep, ctx, tag, g, name):
    """`esptun-gateway show -c` on the running gateway: the IKE peer's fields
    as the status JSON has them (its IKE SA, suite, remote, CHILD_SA and
    selectors, virtual address), one by one."""
    st = g.ep.status()
    sa = next(s for s in established(st) if s.get("peer") == name)
    p = subprocess.run(g.ep.ns.cmd(g.ep.binary, "show", "-c", g.ep.config), capture_output=True,
                       text=True, timeout=10)
    out = p.stdout
    ctx.outputs.append(("show of " + os.path.basename(g.ep.config), out + p.stderr))
    rep.check(p.returncode == 0 and f"peer: {name}" in out, f"[{tag}] show lists peer {name}",
              p.stderr[-300:])
    block = out[out.find(f"peer: {name}"):]
    wants = [f"ike sa: established (peer initiated), {sa['suite']}, {sa['remote']}"]
    for ch in sa["children"]:
        wants.append(f"child: {ch['spi_in']}/{ch['spi_out']} {ch['cipher']}")
        wants.append(", ".join(ch["local_ts"]) + " === " + ", ".join(ch["remote_ts"]))
    if sa.get("virtual_ips"):
        wants.append("virtual ips: " + ", ".join(sa["virtual_ips"]))
    missing = [w for w in wants if w not in block]
    rep.check(not missing, f"[{tag}] show: {name}'s IKE SA, suite, remote, CHILD_SA and "
              "selectors as in the status JSON", f"missing {missing} in:\n{block[:800]}")


def case_one(rep, ctx, idx, tag):
    g, h, (a,) = case_up(rep, ctx, idx, tag, ["A"])
    check_gateway_sas(rep, tag, g, ["alice"])
    ping(rep, tag, a, H_ADDR)
    ping(rep, tag, a, GW_IN)
    transfers(rep, tag, [a], h)
    check_show(rep, ctx, tag, g, "alice")


def case_two(rep, ctx, idx, tag):
    g, h, (a, b) = case_up(rep, ctx, idx, tag, ["A", "B"])
    check_gateway_sas(rep, tag, g, ["alice", "bob"])
    concurrent_pings(rep, tag, [a, b], H_ADDR)
    transfers(rep, tag, [a, b], h)
    st = g.ep.status()
    rep.check(sorted(s.get("peer") for s in established(st)) == ["alice", "bob"],
              f"[{tag}] gateway: both IKE SAs still established after the transfers",
              short(st.get("ike")))


def case_auth_failure(rep, ctx, idx, tag, kind):
    g, h, sites = build_topology(ctx, idx, ["A"])
    ctx.running = [g]
    start_gateway(ctx, idx, g)
    a = sites["A"]
    if kind == "wrong_psk":
        make_client(ctx, idx, a, USERS["alice"]["id"], USERS["bob"]["psk"])
        gw_patterns = (r"authentication failed", r"\balice\b")
        gw_what = "/authentication failed/ naming peer alice"
    else:
        make_client(ctx, idx, a, CAROL["id"], CAROL["psk"])
        gw_patterns = (r"not configured", re.escape(CAROL["id"]))
        gw_what = f"that identity {CAROL['id']} is not configured"
    ctx.running.append(a)
    t0 = time.monotonic()
    if not start_client(ctx, idx, a, tolerate_exit=True):
        rep.info(f"esptun-client exited with {a.ep.proc.returncode} right away")
    gw_line = wait_log_line(g.ep.log, LOG_TIMEOUT, *gw_patterns)
    cl_line = wait_log_line(a.ep.log, LOG_TIMEOUT, r"authentication failed")
    rep.check(gw_line is not None, f"[{tag}] gateway logs {gw_what}: {gw_line!r}",
              netns.tail(g.ep.log, 15))
    rep.check(cl_line is not None, f"[{tag}] client logs /authentication failed/: {cl_line!r}",
              netns.tail(a.ep.log, 15))
    if kind == "unknown_id":
        auth_line = log_line(g.ep.log, r"authentication failed")
        rep.info(f"gateway's authentication failure line: {auth_line!r}")
    rep.info(f"log lines looked for during {time.monotonic() - t0:.2f} s")
    addrs = a.ns.inet_addrs(a.tun)
    rep.check(not addrs, f"[{tag}] client's tun {a.tun} has no IPv4 address "
              f"({'tun absent' if addrs is None else 'tun present, no address'})", str(addrs))
    st_g = g.ep.status()
    rep.check(not established(st_g), f"[{tag}] gateway status: no established IKE SA",
              short(st_g.get("ike")))
    n = ike_counter(st_g, "auth_failed")
    if n is not None:
        rep.check(n >= 1, f"[{tag}] gateway status: ike.counters.auth_failed = {n} (>= 1)",
                  short(st_g.get("ike")))
    else:
        rep.info("gateway status has no ike.counters.auth_failed")
    if a.ep.alive():
        st_a = a.ep.status()
        rep.check(not established(st_a), f"[{tag}] client status: no established IKE SA",
                  short(st_a.get("ike")))
        n = ike_counter(st_a, "auth_failed")
        rep.info(f"client: ike.counters.auth_failed = {n}; ike.sas states "
                 f"{[s.get('state') for s in ike_sas(st_a)]}; still running (retries)")
        ping(rep, tag, a, H_ADDR, count=1, expect=False)
    else:
        rep.info(f"client exited with {a.ep.proc.returncode} after the failure")


def case_stop(rep, ctx, idx, tag):
    g, h, (a, b) = case_up(rep, ctx, idx, tag, ["A", "B"])
    check_gateway_sas(rep, tag, g, ["alice", "bob"])
    ping(rep, tag, a, H_ADDR, count=1)
    t0 = time.monotonic()
    stop_client(rep, tag, a)
    ctx.running.remove(a)

    def alice_gone():
        st = g.ep.status()
        return st if not [s for s in ike_sas(st) if s.get("peer") == "alice"] else None
    try:
        st = netns.wait_until(alice_gone, DELETE_TIMEOUT, interval=0.1, what="alice's IKE SA gone")
    except TestError:
        st = g.ep.status()
    rep.check(not [x for x in ike_sas(st) if x.get("peer") == "alice"],
              f"[{tag}] gateway: alice's IKE SA gone from ike.sas[] {time.monotonic() - t0:.2f} s "
              f"after the SIGTERM (limit {DELETE_TIMEOUT} s)", short(st.get("ike")))
    line = log_line(g.ep.log, r"\balice\b", r"IKE SA", r"delet")
    rep.check(line is not None, f"[{tag}] gateway log says alice's IKE SA was deleted "
              f"(/alice/, /IKE SA/, /delet/): {line!r}", netns.tail(g.ep.log, 15))
    pa = esptun_proc.peer(st, "alice")
    rep.info(f"gateway peer alice now: sa_out {short(pa.get('sa_out'), 120)}, "
             f"{len(pa.get('sas_in') or [])} inbound SA(s)")
    rep.check([s.get("peer") for s in established(st)] == ["bob"],
              f"[{tag}] gateway: bob's IKE SA still established", short(st.get("ike")))
    ping(rep, tag, b, H_ADDR)


def case_pool(rep, ctx, idx, tag):
    g, h, (d, e) = case_up(rep, ctx, idx, tag, ["A", "B"], {"A": "dave", "B": "erin"})
    vips = {"dave": d.vip, "erin": e.vip}
    bad = {ip for ip in (GW_IN, *FIXED, "10.77.0.0", "10.77.0.255")}
    rep.check(d.vip != e.vip and d.vip.startswith("10.77.0.") and not ({d.vip, e.vip} & bad),
              f"[{tag}] leased addresses: dave {d.vip}, erin {e.vip} (distinct, in {POOL}, not "
              f"the gateway's, a fixed client's, network or broadcast)", str(vips))
    st = check_gateway_sas(rep, tag, g, ["dave", "erin"], vips)
    leased, usable = pool_leases(st)
    # 256 addresses - network - broadcast - the gateway's - alice's - bob's
    rep.check(leased == 2 and usable == 251,
              f"[{tag}] gateway status: ike.address_pool leased {leased} of {usable} "
              "(want 2 of 251)", short(st.get("ike")))
    concurrent_pings(rep, tag, [d, e], H_ADDR)
    transfers(rep, tag, [d], h)
    first = d.vip
    t0 = time.monotonic()
    stop_client(rep, tag, d)
    ctx.running.remove(d)
    try:
        netns.wait_until(lambda: pool_leases(g.ep.status())[0] == 1, DELETE_TIMEOUT,
                         interval=0.1, what="dave's lease ended")
    except TestError:
        pass
    st = g.ep.status()
    rep.check(pool_leases(st)[0] == 1, f"[{tag}] gateway: dave's lease ended "
              f"{time.monotonic() - t0:.2f} s after his SIGTERM (1 lease left; limit "
              f"{DELETE_TIMEOUT} s)", short(st.get("ike")))
    line = log_line(g.ep.log, r"\bdave\b", r"lease ended", re.escape(first))
    rep.check(line is not None, f"[{tag}] gateway log: {line!r}", netns.tail(g.ep.log, 15))
    ping(rep, tag, e, H_ADDR)
    # Back again: the same address, as long as nobody took it meanwhile.
    d.vip = None
    start_client(ctx, idx, d)
    ctx.running.append(d)
    wait_client_up(rep, tag, d)
    rep.equal(d.vip, first, f"[{tag}] dave, started again, leases the address he had")
    ping(rep, tag, d, H_ADDR)


def run_case(rep, ctx, idx, case):
    tag = f"case {idx + 1}"
    ctx.case_logs, ctx.running, ctx.case_ns = [], [], []
    try:
        if case["kind"] == "one":
            case_one(rep, ctx, idx, tag)
        elif case["kind"] == "two":
            case_two(rep, ctx, idx, tag)
        elif case["kind"] in ("wrong_psk", "unknown_id"):
            case_auth_failure(rep, ctx, idx, tag, case["kind"])
        elif case["kind"] == "stop":
            case_stop(rep, ctx, idx, tag)
        elif case["kind"] == "pool":
            case_pool(rep, ctx, idx, tag)
    finally:
        teardown(rep, ctx, tag)


def teardown(rep, ctx, tag):
    """Clients first (their Delete reaches a live gateway), then the gateway,
    then the namespaces; `ip netns list` must not show them any more."""
    try:
        for s in reversed(ctx.running):
            if s.ep is None or s.ep.proc is None:
                continue
            if not s.ep.alive():
                s.ep.stop()  # already gone (a failure says why); closes the log
            elif s.label == "G":
                stop_gateway(rep, tag, s)
            elif s.user:  # a client that authenticated
                stop_client(rep, tag, s)
            else:
                rc = s.ep.stop()
                rep.equal(rc, 0, f"[{tag}] esptun-client {s.label} (never authenticated): "
                          "SIGTERM -> exit code")
    except TestError as e:
        rep.check(False, f"[{tag}] stopping esptun: {str(e).splitlines()[0]}", str(e)[:1000])
    finally:
        for ns in reversed(ctx.case_ns):
            ns.delete()
        names = set(ns.name for ns in ctx.case_ns)
        listed = netns.run(["ip", "netns", "list"], check=False).stdout
        left = [ln.split()[0] for ln in listed.splitlines() if ln.split() and ln.split()[0] in names]
        rep.check(not left, f"[{tag}] its {len(names)} namespaces are gone (`ip netns list`)",
                  f"left: {left}")


def secret_forms():
    """secret_forms() - every PSK and static key of this test in each form it
    could leak in: as written, hex of its bytes (either case), and raw bytes."""
    forms = []
    for psk in [u["psk"] for u in USERS.values()] + [CAROL["psk"]]:
        raw = psk.encode()
        forms += [(f"psk {psk[:5]}...", raw), (f"psk {psk[:5]}... as hex", raw.hex().encode()),
                  (f"psk {psk[:5]}... as HEX", raw.hex().upper().encode())]
    for i, k in enumerate(STATIC_PEER["keys"]):
        forms += [(f"static key {i}", k.encode()), (f"static key {i} upper", k.upper().encode()),
                  (f"static key {i} raw", bytes.fromhex(k))]
    return forms


def check_no_secret_leaks(rep, ctx):
    """Issue 16: no key or PSK in any log, status JSON or error of the run.
    The error texts come from `check` on configs with bad keys and PSKs and
    on the gateway config made readable by others."""
    texts = [(os.path.basename(p), open(p, "rb").read()) for p in ctx.all_logs if os.path.exists(p)]
    texts += [(what, out.encode()) for what, out in ctx.outputs]
    k = STATIC_PEER["keys"]
    good, _ = gateway_config(ctx, 99)
    base = open(good).read()
    bad = {
        "a static key one byte short": base.replace(f"0x{k[0]}", f"0x{k[0][:-2]}"),
        "a static key with a non-hex digit": base.replace(f"0x{k[2]}", f"0x{k[2][:-1]}g"),
        "a PSK given as bad hex": base.replace(USERS["alice"]["psk"], "0x" + k[1] + "zz"),
        "a PSK too short": base.replace(USERS["bob"]["psk"], USERS["bob"]["psk"][:10]),
    }
    for i, (what, text) in enumerate(bad.items()):
        path = conf.write_private(os.path.join(ctx.tmp, f"leak{i}.toml"), text)
        p = esptun_proc.run_check(ctx.build, path)
        rep.check(p.returncode == 1, f"check refuses a config with {what}", p.stderr[-300:])
        texts.append((f"error for {what}", (p.stdout + p.stderr).encode()))
    os.chmod(good, 0o644)
    p = esptun_proc.run_check(ctx.build, good)
    rep.check(p.returncode == 1 and "chmod 600" in p.stderr,
              "check refuses the gateway config (inline keys) at mode 0644, saying chmod 600",
              p.stderr[-300:])
    texts.append(("error for mode 0644", (p.stdout + p.stderr).encode()))
    forms = secret_forms()
    leaks = [f"{what} in {where}" for where, blob in texts for what, needle in forms
             if needle in blob]
    rep.check(not leaks and len(texts) > 8,
              f"no PSK or static key in {len(texts)} logs, status outputs and error texts "
              f"({len(forms)} forms searched)", "; ".join(leaks[:20]))


def body(rep, build):
    netns.require_environment(("ip", "ping", "timeout"))
    for prog in ("esptun-client",):
        if not os.access(os.path.join(build, prog), os.X_OK):
            raise TestError(f"{prog} not found in {build}: build it first")

    class Ctx:
        pass

    ctx = Ctx()
    ctx.rep, ctx.build, ctx.tmp = rep, build, netns.make_tempdir("ikecl")
    ctx.sfx = f"{os.getpid() % 100000}"
    ctx.failed_logs = []
    ctx.all_logs, ctx.outputs = [], []
    # Every status JSON the cases read (the control socket's output) is
    # kept for the leak check at the end.
    real_status = esptun_proc.Endpoint.status

    def recorded_status(ep):
        st = real_status(ep)
        ctx.outputs.append(("status of " + os.path.basename(ep.config), json.dumps(st)))
        return st
    esptun_proc.Endpoint.status = recorded_status

    def dump_logs():
        for log in ctx.failed_logs:
            if os.path.exists(log):
                print(f"\n--- {log}:\n{netns.tail(log, 40)}")
    rep.on_failure.append(dump_logs)

    t_all = time.monotonic()
    only = os.environ.get("ESPTUN_IKE_CASES", "").strip()
    chosen = {int(x) for x in only.split(",") if x.strip()} if only else None
    for idx, case in enumerate(CASES):
        if chosen is not None and idx + 1 not in chosen:
            continue
        rep.section(f"case {idx + 1}/{len(CASES)}: {case['title']}")
        t0, failed0 = time.monotonic(), len(rep.failed)
        try:
            run_case(rep, ctx, idx, case)
        except ConfigRefused as e:
            first, _, rest = str(e).partition("\n")
            if not e.reported:
                rep.check(False, f"[case {idx + 1}] {first}", rest.strip()[:2000])
            ctx.failed_logs += ctx.case_logs
            rep.check(False, f"cases {idx + 2}-{len(CASES)} not run: esptun refused or did not "
                      "come up with the road-warrior config in case 1 (address_pool/dns on the "
                      "gateway, a client without addresses); see above")
            break
        except Reported:
            pass
        except TestError as e:
            first, _, rest = str(e).partition("\n")
            rep.check(False, f"[case {idx + 1}] {first}", rest.strip()[:2000])
        if len(rep.failed) > failed0:
            ctx.failed_logs += ctx.case_logs
        rep.info(f"case {idx + 1} took {time.monotonic() - t0:.1f} s")
    check_no_secret_leaks(rep, ctx)
    prefix = netns.unique("ikecl") + "-"
    listed = netns.run(["ip", "netns", "list"], check=False).stdout
    left = [ln.split()[0] for ln in listed.splitlines() if ln.startswith(prefix)]
    rep.check(not left, f"no namespace {prefix}* left (`ip netns list`), "
              f"{time.monotonic() - t_all:.1f} s for all cases", f"left: {left}")


if __name__ == "__main__":
    report.main("netns/ike_clients", body, tools=("ip", "ping", "timeout"))
