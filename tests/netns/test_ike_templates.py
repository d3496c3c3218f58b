#!/usr/bin/python3
# test_ike_templates.py - one gateway [[peer]] template serving many road
# warriors (issue 18): 50 esptun-clients, 25 logging in by EAP-MSCHAPv2 and
# 25 by certificate, connect to one esptun-gateway at the same time. The
# gateway has two templates, remote_id "*@eap.example" (auth eap-mschapv2,
# users_file users.toml) and "*@cert.example" (auth cert, ca_dir, users_file
# cert-users.toml for per-user data); each user that authenticates becomes an
# instance, a peer of its own named "<template>/<user>" with its own IKE SA,
# CHILD_SA and virtual address, gone again with its last IKE SA.
#
#  50 client netns (et-tmpl-PID-cN), one esptun-client each: their tuns route
#  the same prefixes, so each needs its own namespace.
#  +----------------------------+       +----------------------------+
#  | tun tpcN  (pool address)   |  ...  | tun tpcN  (pool address)   |
#  |   10.88.0.0/22 -> tun      |       |   10.88.0.0/22 -> tun      |
#  | esptun-client              |       | esptun-client              |
#  |  user00..24: IDi userNN@   |       |  user25..49: IDi userNN@   |
#  |  eap.example, EAP-MSCHAPv2 |       |  cert.example, certificate |
#  |  as userNN                 |       |  (email SAN = the IDi)     |
#  | ul 10.203.0.(10+N)/24      |       | ul 10.203.0.(10+N)/24      |
#  +------------|---------------+       +------------|---------------+
#               | veth                               | veth
#  +------------|------------------------------------|---------------+
#  |           vN --------------- br0 -------------- vN              |
#  |                          10.203.0.1/24                          |
#  | esptun-gateway, local_id gw.example (ECDSA certificate under an |
#  |   intermediate), listen 10.203.0.1:4500, IKE :500               |
#  |   tun tplgw 10.88.0.1/22, address_pool 10.88.0.0/22             |
#  |   [[peer]] eap-users   remote_id *@eap.example   users.toml     |
#  |   [[peer]] cert-users  remote_id *@cert.example  cert-users.toml|
#  |                                     netns G (et-tmpl-PID-g)     |
#  +-----------------------------------------------------------------+
#  Also on br0: five more client namespaces for the refusals (case 3) and
#  strongSwan's (case 4).
#
# users.toml gives user07 the fixed address 10.88.3.7; cert-users.toml gives
# user31@cert.example the network 192.168.77.0/24 (its namespace owns
# 192.168.77.1, on lo). One gateway and one set of clients for all cases:
#  1. all 50 started at once: every one established (gateway status: 50
#     established IKE SAs named eap-users/userNN and cert-users/userNN@
#     cert.example, each with a CHILD_SA and its client's address; the same
#     names in peers[]); 50 distinct addresses in the pool, user07's the
#     fixed one, 49 pool leases; every client pings 10.88.0.1 (all at once);
#     the gateway pings 192.168.77.1 through user31's tunnel.
#  2. SIGTERM to 5 clients: exit 0; within a few seconds their instances are
#     gone (ike.sas[] and peers[]) and the pool's leases drop by 5; the other
#     45 still pass traffic; the 5 started again come back.
#  3. refusals, five clients at once: an identity no template matches
#     (mallory@other.example), a wrong EAP password, an EAP user not in
#     users.toml, a certificate user whose IDi matches the EAP template, a
#     certificate of another CA. The gateway logs each ("authentication
#     failed" with the reason), holds no IKE SA from them and no instance for
#     them; no client is established or has an address; the 50 stay
#     established. (Not here: a certificate that does not name the IDi;
#     esptun-client refuses to start with one, so it cannot send it.)
#  4. strongSwan 5.9 as an EAP-MSCHAPv2 road warrior (user50) against the
#     eap-users template: virtual address from the pool, ping 10.88.0.1.
#  5. users.toml edited while everyone is connected (user03's password
#     changed, user04 removed, user09 given the fixed address 10.88.3.9),
#     then `esptun-gateway reload`: it reports the new users file and 3
#     users ended; those 3 IKE SAs go, the other 47 users keep theirs (same
#     IKE SPIs) and still ping, cert-users is untouched. Then user09 comes
#     back with 10.88.3.9, user03 is refused with its old password and gets
#     in with the new one, user04 is refused as not in the users file.
# Then every client and the gateway stop with exit 0 and no namespace is
# left. The whole run takes about a minute on two busy cores: the namespaces
# are made with few processes (ip -batch) and the 50 clients are read
# through their control sockets and ioctls, not one process per look.
# ESPTUN_IKE_CASES=1,3 runs only those cases (case 1 always: the others need
# its clients); ESPTUN_IKE_LOGDIR=DIR keeps every log there.
#
# usage: test_ike_templates.py BUILD_DIR   (root; BUILD_DIR holds esptun-gateway
#        and esptun-client; strongSwan as for test_ike_strongswan_eap.py)
"""One [[peer]] template, many road warriors: 50 esptun-clients against one esptun-gateway."""

import ipaddress
import json
import os
import secrets
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping as ping_lib  # noqa: E402
import report  # noqa: E402
import strongswan  # noqa: E402
import sw_eap  # noqa: E402
import test_pki  # noqa: E402
from esptun_ike import established, ike_sas, pool_leases  # noqa: E402
from esptun_proc import wait_log_line  # noqa: E402
from netns import TestError  # noqa: E402

N_EAP, N_CERT = 25, 25
ALL_UP_TIMEOUT = 45   # all 50 started -> all established (two busy cores)
CLIENT_TIMEOUT = 10   # the gateway shows it established -> the client's tun has its address
DELETE_TIMEOUT = 5    # client stopped -> its instance and lease gone
STOP_TIMEOUT = 15     # SIGTERM to many clients at once -> all exited
REFUSE_TIMEOUT = 10   # refused client started -> the gateway's log line
STATUS_TIMEOUT = 15   # the gateway's status, while it is busy with 50 handshakes
PINGS = 3
PING_DEADLINE = 10    # s to get PINGS replies (ping -w: it sends until it has them)
WORKERS = 8           # threads driving namespaces, status reads, stops

GW_UL, GW_IN, POOL = "10.203.0.1", "10.88.0.1", "10.88.0.0/22"
GW_ID = "gw.example"
EAP_T, CERT_T = "eap-users", "cert-users"
EAP_DOMAIN, CERT_DOMAIN = "eap.example", "cert.example"
FIXED_USER, FIXED_ADDR = "user07", "10.88.3.7"
NET_USER, NET, NET_HOST = "user31", "192.168.77.0/24", "192.168.77.1"
STOPPED = ("user01", "user02", "user26", "user27", "user28")
SW_USER = "user50"
# Case 5: what the edited users.toml changes.
RELOAD_PW, RELOAD_GONE, RELOAD_ADDR, RELOAD_FIXED = "user03", "user04", "user09", "10.88.3.9"
# Case 3: (key, title, kind, IDi, the gateway's reason as a regex).
REFUSALS = [
    ("nomatch", "identity matching no template", "cert", "mallory@other.example",
     r"mallory@other\.example"),
    ("wrongpw", "wrong EAP password", "eap", f"user60@{EAP_DOMAIN}",
     r"wrong password for user 'user60'"),
    ("nouser", "EAP user not in users.toml", "eap", f"user88@{EAP_DOMAIN}",
     r"user 'user88' is not in the users file"),
    ("crossed", "certificate user with an IDi of the EAP template", "cert",
     f"user70@{EAP_DOMAIN}", r"must use EAP"),
    ("otherca", "certificate of another CA", "cert", f"user71@{CERT_DOMAIN}",
     r"unknown CA"),
]


class Client:
    """One esptun-client in its own namespace."""

    def __init__(self, key, kind, user, ident, ul):
        self.key, self.kind, self.user, self.ident, self.ul = key, kind, user, ident, ul
        self.ns, self.ep, self.vip, self.sock = None, None, None, None
        self.tun = f"tpc{key}"

    @property
    def instance(self):
        """The gateway's name for this user's instance of its template."""
        return f"{EAP_T}/{self.user}" if self.kind == "eap" else f"{CERT_T}/{self.ident}"


class Ctx:
    pass


def each(fn, items):
    """each() - fn(item) for every item, WORKERS at a time; the results in order."""
    with ThreadPoolExecutor(WORKERS) as ex:
        return list(ex.map(fn, items))


def short(obj, n=1500):
    return json.dumps(obj)[:n]


def in_pool(addr):
    try:
        return ipaddress.ip_address(addr) in ipaddress.ip_network(POOL)
    except ValueError:
        return False


# ---------------------------------------------------------------------------
# Credentials and configs.

def make_pki(ctx):
    """The CA, the gateway's certificate, and the files every config shares."""
    ctx.pki = test_pki.Pki()
    d = ctx.tmp
    os.makedirs(os.path.join(d, "ca"))
    ctx.ca_dir = os.path.join(d, "ca")
    test_pki.write(os.path.join(ctx.ca_dir, "root.pem"), ctx.pki.root.pem())
    ctx.chain = test_pki.write(os.path.join(d, "inter.pem"), ctx.pki.inter.pem())
    gw = ctx.pki.issue(GW_ID, "p256")
    ctx.gw_cert = test_pki.write(os.path.join(d, "gw.pem"), gw.pem())
    ctx.gw_key = test_pki.write(os.path.join(d, "gw.key"), gw.key_pem(), 0o600)
    ctx.passwords = {f"user{i:02d}": secrets.token_urlsafe(12) for i in range(N_EAP)}
    ctx.passwords.update({SW_USER: secrets.token_urlsafe(12), "user60": secrets.token_urlsafe(12)})


def users_files(ctx, fixed=None):
    """users.toml (EAP users: passwords, fixed addresses: user07's and
    those in @fixed) and cert-users.toml (per-user data of certificate users:
    user31's network)."""
    fixed = {FIXED_USER: FIXED_ADDR, **(fixed or {})}
    eap = [dict(name=name, password=pw, addresses=[fixed[name]] if name in fixed else None)
           for name, pw in sorted(ctx.passwords.items())]
    cert = [dict(name=f"{NET_USER}@{CERT_DOMAIN}", allowed_ips=[NET])]
    ctx.users_file = test_pki.write(os.path.join(ctx.tmp, "users.toml"),
                                    conf.render_tables("user", eap), 0o600)
    ctx.cert_users_file = test_pki.write(os.path.join(ctx.tmp, "cert-users.toml"),
                                         conf.render_tables("user", cert), 0o600)


def gateway_config(ctx):
    tunnel = dict(interface="tplgw", addresses=[f"{GW_IN}/22"], listen=f"{GW_UL}:4500",
                  ike_port=500, local_id=GW_ID, address_pool=[POOL], tun_io="direct",
                  control_socket=os.path.join(ctx.tmp, "g.sock"),
                  state_dir=os.path.join(ctx.tmp, "state-g"))
    own = dict(cert_file=ctx.gw_cert, private_key_file=ctx.gw_key, cert_chain_file=ctx.chain)
    users_files(ctx)
    peers = [dict(name=EAP_T, remote_id=f"*@{EAP_DOMAIN}", auth="eap-mschapv2", **own,
                  users_file=ctx.users_file),
             dict(name=CERT_T, remote_id=f"*@{CERT_DOMAIN}", auth="cert", **own,
                  ca_dir=ctx.ca_dir, users_file=ctx.cert_users_file)]
    return conf.write_private(os.path.join(ctx.tmp, "g.toml"),
                              conf.render_ike_config(tunnel, peers))


def client_config(ctx, c, password=None, cert=None, pki=None):
    """c's config; EAP: its password (default: the right one); cert: its
    certificate (default: one for its IDi from the test's CA; pki: the CA
    whose intermediate it sends)."""
    base = os.path.join(ctx.tmp, f"c{c.key}")
    c.sock = base + ".sock"
    tunnel = dict(interface=c.tun, listen="0.0.0.0:4500", local_id=c.ident, tun_io="direct",
                  control_socket=c.sock, state_dir=base + "-state")
    peer = dict(name="gw", endpoint=f"{GW_UL}:4500", allowed_ips=[POOL], remote_id=GW_ID,
                auth="eap-mschapv2" if c.kind == "eap" else "cert", ca_dir=ctx.ca_dir)
    if c.kind == "eap":
        pw = password if password is not None else ctx.passwords.get(c.user, "a password")
        peer.update(eap_identity=c.user,
                    eap_password_file=test_pki.write(base + ".pw", pw + "\n", 0o600))
    else:
        pki = pki or ctx.pki
        cert = cert or pki.issue_user(c.ident, "p256")
        peer.update(cert_file=test_pki.write(base + ".pem", cert.pem()),
                    private_key_file=test_pki.write(base + ".key", cert.key_pem(), 0o600),
                    cert_chain_file=test_pki.write(base + "-chain.pem", pki.inter.pem()))
    path = conf.write_private(base + ".toml", conf.render_ike_config(tunnel, [peer]))
    c.ep = esptun_proc.Endpoint(ctx.build, c.ns, path, base + ".log", "client")
    return path


def check_accepted(rep, ctx, path, prog):
    p = esptun_proc.run_check(ctx.build, path, prog)
    out = (p.stdout + p.stderr).strip()
    return rep.check(p.returncode == 0, f"`{prog} check` accepts {os.path.basename(path)}"
                     + ("" if p.returncode == 0 else f": {out.splitlines()[0] if out else ''}"),
                     f"config:\n{open(path).read()}\noutput:\n{out}")


# ---------------------------------------------------------------------------
# Topology.

def build_topology(ctx):
    """G with its bridge, and a namespace on it for every client, the
    refused ones and strongSwan: few processes (ip -batch), and those in
    parallel. Returns the seconds it took."""
    t0 = time.monotonic()
    ctx.g = netns.Netns(netns.unique("tmpl", "g"))
    ctx.namespaces = [ctx.g]
    ctx.g.ip_batch(["link add br0 type bridge", f"addr add {GW_UL}/24 dev br0",
                    "link set br0 up"])
    ctx.clients = []
    for i in range(N_EAP + N_CERT):
        kind = "eap" if i < N_EAP else "cert"
        user = f"user{i:02d}"
        ctx.clients.append(Client(str(i), kind, user,
                                  f"{user}@{EAP_DOMAIN if kind == 'eap' else CERT_DOMAIN}",
                                  f"10.203.0.{10 + i}"))
    ctx.refused = [Client(key, kind, ident.split("@")[0], ident, f"10.203.0.{100 + n}")
                   for n, (key, _, kind, ident, _) in enumerate(REFUSALS)]
    ctx.sw = Client("sw", "eap", SW_USER, f"{SW_USER}@{EAP_DOMAIN}", "10.203.0.9")
    sites = ctx.clients + ctx.refused + [ctx.sw]
    for c, ns in zip(sites, each(lambda c: netns.Netns(netns.unique("tmpl", c.key)), sites)):
        c.ns = ns
        ctx.namespaces.append(ns)
    ctx.g.ip_batch([line for c in sites for line in (
        f"link add v{c.key} type veth peer name ul netns {c.ns.name}",
        f"link set v{c.key} master br0 up")])
    each(lambda c: c.ns.ip_batch([f"addr add {c.ul}/24 dev ul", "link set ul up"]
                                 + ([f"addr add {NET_HOST}/32 dev lo"] if c.user == NET_USER
                                    else [])), sites)
    return time.monotonic() - t0


# ---------------------------------------------------------------------------
# Reading the gateway and the clients.

def gateway_view(ctx):
    """{peer name: established IKE SA} and the status."""
    st = ctx.gw.status(timeout=STATUS_TIMEOUT)
    return {s.get("peer"): s for s in established(st)}, st


def wait_gateway(ctx, pred, timeout):
    """Polls the gateway status until pred(view, status) is true; returns
    (ok, seconds, view, status)."""
    t0 = time.monotonic()
    while True:
        view, st = gateway_view(ctx)
        if pred(view, st):
            return True, time.monotonic() - t0, view, st
        if time.monotonic() - t0 > timeout:
            return False, time.monotonic() - t0, view, st
        time.sleep(0.3)


def client_state(c):
    """None once c's own status shows its IKE SA established with one
    virtual address, the one on its tun (/32; sets c.vip); else what is
    wrong. In-process reads: the control socket and an ioctl."""
    if not c.ep.alive():
        return f"exited with {c.ep.proc.returncode}: {netns.tail(c.ep.log, 3).strip()}"
    try:
        st = esptun_proc.query_socket(c.sock)
    except TestError as e:
        return str(e).splitlines()[0]
    est = established(st)
    vips = est[0].get("virtual_ips") if len(est) == 1 else None
    addr = c.ns.ipv4_of(c.tun)
    if not vips or len(vips) != 1 or addr != (vips[0], 32):
        return f"IKE SAs {[(s.get('state'), s.get('virtual_ips')) for s in ike_sas(st)]}, " \
               f"{c.tun} IPv4 {addr}"
    c.vip = vips[0]
    return None


def clients_up(clients, timeout):
    """Polls every client's state until all are up or timeout s passed:
    {client: what is wrong} for those that are not."""
    deadline = time.monotonic() + timeout
    todo = list(clients)
    while True:
        wrong = {c: client_state(c) for c in todo}
        todo = [c for c in todo if wrong[c]]
        if not todo or time.monotonic() > deadline:
            return {c: wrong[c] for c in todo}
        time.sleep(0.2)


def launch(clients):
    for c in clients:
        c.ep.launch()


def bring_up(rep, ctx, tag, clients, want_total):
    """The clients were launched: wait for the gateway to hold want_total
    established instances (all of them among), then for each client's own
    status and address. Returns the gateway's view and status."""
    names = {c.instance for c in clients}
    ok, secs, view, st = wait_gateway(
        ctx, lambda v, s: names <= set(v) and len(v) >= want_total
        or any(not c.ep.alive() for c in clients), ALL_UP_TIMEOUT)
    dead = [c.user for c in clients if not c.ep.alive()]
    missing = sorted(names - set(view))
    rep.check(not missing and not dead,
              f"[{tag}] gateway: the {len(clients)} started clients' instances established "
              f"{secs:.1f} s after they were started (limit {ALL_UP_TIMEOUT} s)",
              f"missing {missing}; exited {dead}; ike: {short(st.get('ike'), 3000)}")
    wrong = clients_up(clients, CLIENT_TIMEOUT)
    rep.check(not wrong, f"[{tag}] every started client: its status shows the IKE SA established "
              "with one virtual address, its tun that address/32",
              "\n".join(f"{c.user}: {w}" for c, w in list(wrong.items())[:10]))
    ctx.suspects += list(wrong)
    return view, st


def drop_summary(who, status):
    """who's non-zero drop counters and its ESP packet counts, for a report line."""
    try:
        st = status()
    except TestError as e:
        return f"{who}: no status ({e})"
    drops = {k: v for k, v in (st.get("drops") or {}).items() if v}
    c = st.get("counters") or {}
    return (f"{who}: drops {drops}, tun rx/tx {c.get('tun_rx_packets')}/"
            f"{c.get('tun_tx_packets')}, udp rx/tx {c.get('udp_rx_packets')}/"
            f"{c.get('udp_tx_packets')}")


def ping_all(rep, ctx, tag, clients, dst=GW_IN):
    """Every client pings dst, all at the same time."""
    procs = [(c, ping_lib.spawn(c.ns, dst, count=PINGS, deadline=PING_DEADLINE)) for c in clients]
    res = [(c, ping_lib.finish(p, timeout=PING_DEADLINE + 10)) for c, p in procs]
    bad = [f"{c.user} ({c.vip}): {r.replies}/{PINGS}: {r.output[-120:]}" for c, r in res
           if r.returncode != 0 or r.replies < PINGS]
    if not rep.check(not bad, f"[{tag}] {len(clients)} clients ping {dst} at the same time: "
                     f"{PINGS} replies each", "\n".join(bad[:10])):
        failed = [c for c, r in res if r.returncode != 0 or r.replies < PINGS]
        rep.info(f"{len(failed)} failed; where packets were dropped: "
                 + "; ".join(drop_summary(c.user, lambda c=c: esptun_proc.query_socket(c.sock))
                             for c in failed[:5])
                 + "; " + drop_summary("gateway", lambda: gateway_view(ctx)[1]))


def stop_all(rep, tag, clients, what):
    """SIGTERM to the clients at once; each must exit 0 within STOP_TIMEOUT."""
    for c in clients:
        if c.ep.alive():
            c.ep.proc.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for c in clients:
        while c.ep.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    late = [c.user for c in clients if c.ep.alive()]
    rcs = [c.ep.stop() for c in clients]  # a second SIGTERM, then SIGKILL, for any still running
    bad = [f"{c.user}: {rc}" for c, rc in zip(clients, rcs) if rc != 0]
    rep.check(not bad and not late, f"[{tag}] {what}: SIGTERM -> exit 0 within {STOP_TIMEOUT} s "
              f"({len(clients)} clients)", f"exit codes {', '.join(bad)}; still running: {late}")


# ---------------------------------------------------------------------------
# Cases.

def case_all_up(rep, ctx, tag):
    t0 = time.monotonic()
    launch(ctx.clients)
    view, st = bring_up(rep, ctx, tag, ctx.clients, len(ctx.clients))
    rep.info(f"all {len(ctx.clients)} clients up {time.monotonic() - t0:.1f} s after the first "
             "was started")
    names = {c.instance for c in ctx.clients}
    rep.check(set(view) == names, f"[{tag}] gateway status: {len(names)} established IKE SAs, "
              f"one per user, named like {ctx.clients[0].instance} and {ctx.clients[-1].instance}",
              f"unexpected {sorted(set(view) - names)[:10]}, "
              f"missing {sorted(names - set(view))[:10]}")
    peers = {p.get("name") for p in st.get("peers", []) if isinstance(p, dict)}
    rep.check(names <= peers, f"[{tag}] gateway status: peers[] lists the {len(names)} instances",
              f"missing {sorted(names - peers)[:10]}; peers {sorted(peers)[:10]}")
    vips = [c.vip for c in ctx.clients]
    rep.check(None not in vips and len(set(vips)) == len(vips)
              and all(in_pool(v) and v != GW_IN for v in vips),
              f"[{tag}] {len(vips)} distinct virtual addresses, all in {POOL}, none the gateway's",
              str(sorted(vips, key=str)))
    wrong = [f"{c.instance}: gateway {view.get(c.instance, {}).get('virtual_ips')}, client {c.vip}"
             for c in ctx.clients
             if c.vip not in (view.get(c.instance, {}).get("virtual_ips") or [])]
    rep.check(not wrong, f"[{tag}] gateway status: each instance's virtual_ips holds its "
              "client's tun address", "\n".join(wrong[:10]))
    who = [f"{c.instance}: eap_identity {view[c.instance].get('eap_identity')!r}, peer_subject "
           f"{view[c.instance].get('peer_subject')!r}" for c in ctx.clients if c.instance in view
           and (view[c.instance].get("eap_identity") != c.user if c.kind == "eap"
                else c.ident not in str(view[c.instance].get("peer_subject")))]
    rep.check(not who, f"[{tag}] gateway status: each EAP instance's eap_identity is its user, "
              "each certificate instance's peer_subject names its IDi", "\n".join(who[:10]))
    childless = [n for n, sa in view.items() if n in names and not sa.get("children")]
    rep.check(not childless, f"[{tag}] gateway status: each instance has a CHILD_SA",
              str(childless[:10]))
    fixed = next(c for c in ctx.clients if c.user == FIXED_USER)
    rep.equal(fixed.vip, FIXED_ADDR, f"[{tag}] {FIXED_USER} (addresses in users.toml) got")
    leased, usable = pool_leases(st)
    rep.check(leased == len(ctx.clients) - 1,
              f"[{tag}] gateway status: ike.address_pool leased {leased} of {usable} "
              f"(want {len(ctx.clients) - 1}: every client but {FIXED_USER})",
              short(st.get("ike", {}).get("address_pool")))
    ping_all(rep, ctx, tag, ctx.clients)
    # user31's network: the gateway routes it into user31's tunnel only.
    net = next(c for c in ctx.clients if c.user == NET_USER)
    kids = (view.get(net.instance) or {}).get("children") or []
    rep.check(any(NET in (k.get("remote_ts") or []) for k in kids),
              f"[{tag}] gateway status: {net.instance}'s CHILD_SA selectors include {NET} "
              "(allowed_ips in cert-users.toml)", short(kids))
    res = ping_lib.run(ctx.g, NET_HOST, count=PINGS, deadline=PING_DEADLINE)
    ping_lib.expect_replies(rep, f"[{tag}] gateway pings {NET_HOST} ({net.user}'s network, "
                            "its namespace owns it)", res, PINGS)


def case_stop_start(rep, ctx, tag):
    stopped = [c for c in ctx.clients if c.user in STOPPED]
    rest = [c for c in ctx.clients if c.user not in STOPPED]
    leased0, _ = pool_leases(gateway_view(ctx)[1])
    gone = {c.instance for c in stopped}
    t0 = time.monotonic()
    stop_all(rep, tag, stopped, f"{', '.join(c.user for c in stopped)}")
    exited = time.monotonic() - t0

    def names(st):
        return {s.get("peer") for s in ike_sas(st)} | {
            p.get("name") for p in st.get("peers", []) if isinstance(p, dict)}
    ok, secs, view, st = wait_gateway(
        ctx, lambda v, st: not (gone & names(st)) and pool_leases(st)[0] == leased0 - len(stopped),
        DELETE_TIMEOUT)
    left = sorted(gone & names(st))
    rep.check(not left, f"[{tag}] gateway: the {len(stopped)} instances gone from ike.sas[] and "
              f"peers[] {secs:.1f} s after the clients exited ({exited + secs:.1f} s after the "
              f"SIGTERMs; limit {DELETE_TIMEOUT} s)", f"still there: {left}")
    leased, _ = pool_leases(st)
    rep.check(leased == leased0 - len(stopped),
              f"[{tag}] gateway: pool leases {leased0} -> {leased} (want -{len(stopped)})",
              short(st.get("ike", {}).get("address_pool")))
    others = {c.instance for c in rest}
    rep.check(others <= set(view), f"[{tag}] gateway: the other {len(rest)} instances still "
              "established", f"missing {sorted(others - set(view))}")
    ping_all(rep, ctx, tag, rest)
    before = {c.user: c.vip for c in stopped}
    for c in stopped:
        c.vip = None
    launch(stopped)
    bring_up(rep, ctx, tag, stopped, len(ctx.clients))
    rep.info("addresses before -> after: " + ", ".join(f"{c.user} {before[c.user]} -> {c.vip}"
                                                      for c in stopped))
    vips = [c.vip for c in ctx.clients]
    rep.check(None not in vips and len(set(vips)) == len(vips) and all(in_pool(v) for v in vips),
              f"[{tag}] the {len(stopped)} back in {POOL}, all {len(vips)} addresses distinct",
              str(before))
    ping_all(rep, ctx, tag, stopped)


def case_refusals(rep, ctx, tag):
    other = test_pki.Pki("Other Root")
    for c, (key, title, kind, ident, why) in zip(ctx.refused, REFUSALS):
        if key == "wrongpw":
            client_config(ctx, c, password="not " + ctx.passwords[c.user])
        elif key == "otherca":
            client_config(ctx, c, pki=other)
        else:
            client_config(ctx, c)
    launch(ctx.refused)
    for c, (key, title, kind, ident, why) in zip(ctx.refused, REFUSALS):
        line = wait_log_line(ctx.gw.log, REFUSE_TIMEOUT, r"authentication failed", why)
        rep.check(line is not None, f"[{tag}] {title} ({ident}): the gateway logs "
                  f"/authentication failed/ and /{why}/: {line!r}", netns.tail(ctx.gw.log, 15))
    for c, (key, title, kind, ident, why) in zip(ctx.refused, REFUSALS):
        line = wait_log_line(c.ep.log, 3, r"authentication failed")
        rep.check(line is not None, f"[{tag}] {title}: its client logs /authentication failed/: "
                  f"{line!r}", netns.tail(c.ep.log, 10))
    st = gateway_view(ctx)[1]
    uls = {c.ul for c in ctx.refused}
    theirs = [s for s in ike_sas(st) if str(s.get("remote", "")).rsplit(":", 1)[0] in uls
              and str(s.get("state")).lower() == "established"]
    rep.check(not theirs, f"[{tag}] gateway status: no established IKE SA from the {len(uls)} "
              "refused clients", short(theirs))
    names = {s.get("peer") for s in ike_sas(st)} | {
        p.get("name") for p in st.get("peers", []) if isinstance(p, dict)}
    idents = {c.ident for c in ctx.refused} | {c.user for c in ctx.refused}
    leaked = sorted(n for n in names if isinstance(n, str) and n.split("/")[-1] in idents)
    rep.check(not leaked, f"[{tag}] gateway status: no instance for a refused identity",
              str(leaked))
    view = {s.get("peer") for s in established(st)}
    rep.check({c.instance for c in ctx.clients} <= view,
              f"[{tag}] gateway: the {len(ctx.clients)} users' instances still established",
              str(sorted({c.instance for c in ctx.clients} - view)))
    for c, (key, title, kind, ident, why) in zip(ctx.refused, REFUSALS):
        addrs = c.ns.ipv4_of(c.tun)
        try:
            est = established(esptun_proc.query_socket(c.sock)) if c.ep.alive() else []
        except TestError:
            est = []
        rep.check(not addrs and not est,
                  f"[{tag}] {title}: the client has no established IKE SA and no address "
                  f"({'running' if c.ep.alive() else f'exited {c.ep.proc.returncode}'})",
                  f"{c.tun}: {addrs}; {short(est)}")
    for c in ctx.refused:
        c.ep.stop()


def case_strongswan(rep, ctx, tag):
    sw_dir = sw_eap.sw_dir_for(ctx.tmp, "tmpl", ctx.pki)  # trusts our root and intermediate
    ident = ctx.sw.ident
    cfg = strongswan.Config(
        local_addr=ctx.sw.ul, remote_addr=GW_UL, local_ts="dynamic", remote_ts=f"{GW_IN}/32",
        local_id=ident, remote_id=GW_ID, psk="", vips="0.0.0.0", swanctl_dir=sw_dir,
        local_auth="eap-mschapv2", remote_auth="pubkey", local_eap_id=SW_USER,
        eap_secrets={SW_USER: ctx.passwords[SW_USER]}, retransmit_tries=2)
    charon = strongswan.Charon(ctx.sw.ns, sw_dir, cfg, tag="sw")
    ctx.logs.append(charon.log)
    charon.start()
    try:
        ok, out = charon.initiate(timeout=15)
        rep.check(ok, f"[{tag}] strongSwan ({ident}, EAP user {SW_USER}): swanctl --initiate "
                  "succeeds", out.strip()[-800:])
        try:
            sw_ike, _ = charon.wait_established(10)
        except TestError as e:
            rep.check(False, f"[{tag}] strongSwan: {e}", charon.list_sas_text())
            return
        vips = list(sw_ike.local_vips or [])
        view, _ = gateway_view(ctx)
        sa = view.get(f"{EAP_T}/{SW_USER}") or {}
        rep.check(len(vips) == 1 and in_pool(vips[0]) and sa.get("virtual_ips") == vips,
                  f"[{tag}] strongSwan got {vips} from the pool; the gateway's instance "
                  f"{EAP_T}/{SW_USER} has {sa.get('virtual_ips')}",
                  short(sa) + "\n" + short(sw_ike.raw))
        rep.check(sa.get("eap_identity") == SW_USER,
                  f"[{tag}] gateway status: eap_identity {sa.get('eap_identity')!r}", short(sa))
        res = ping_lib.run(ctx.sw.ns, GW_IN, count=PINGS, deadline=PING_DEADLINE)
        ping_lib.expect_replies(rep, f"[{tag}] strongSwan pings {GW_IN}", res, PINGS)
    finally:
        rc = charon.stop()
        rep.equal(rc, 0, f"[{tag}] charon: SIGTERM -> exit code")


def case_users_reload(rep, ctx, tag):
    by_user = {c.user: c for c in ctx.clients}
    touched = [by_user[u] for u in (RELOAD_PW, RELOAD_GONE, RELOAD_ADDR)]
    rest = [c for c in ctx.clients if c not in touched]
    view0, _ = gateway_view(ctx)
    spi0 = {c.instance: (view0.get(c.instance) or {}).get("spi_i") for c in ctx.clients}
    old_pw = ctx.passwords[RELOAD_PW]
    ctx.passwords[RELOAD_PW] = "new " + old_pw
    del ctx.passwords[RELOAD_GONE]
    users_files(ctx, fixed={RELOAD_ADDR: RELOAD_FIXED})
    p = netns.run(ctx.g.cmd(os.path.join(ctx.build, "esptun-gateway"), "reload", "-s",
                            os.path.join(ctx.tmp, "g.sock")), check=False, timeout=20)
    out = (p.stdout + p.stderr).strip()
    rep.check(p.returncode == 0 and f"new users file for {EAP_T} (3 connected user(s) ended)" in out
              and CERT_T not in out,
              f"[{tag}] `esptun-gateway reload`: exit 0, reports the new users file of {EAP_T} and "
              f"3 users ended: {out!r}", out)
    gone = {c.instance: spi0[c.instance] for c in touched}

    def settled(view, st):
        live = {(s.get("peer"), s.get("spi_i")) for s in ike_sas(st)}
        return not any(item in live for item in gone.items())
    ok, secs, view, st = wait_gateway(ctx, settled, DELETE_TIMEOUT)
    rep.check(ok, f"[{tag}] gateway: the IKE SAs of {', '.join(c.user for c in touched)} ended "
              f"{secs:.1f} s after the reload (limit {DELETE_TIMEOUT} s)",
              short([s for s in ike_sas(st) if s.get("peer") in gone], 3000))
    moved = [f"{c.instance}: {spi0[c.instance]} -> {(view.get(c.instance) or {}).get('spi_i')}"
             for c in rest if (view.get(c.instance) or {}).get("spi_i") != spi0[c.instance]]
    rep.check(not moved, f"[{tag}] gateway: the other {len(rest)} users (both templates) keep "
              "their established IKE SAs, same SPIs", "\n".join(moved[:10]))
    ping_all(rep, ctx, tag, rest)

    # user09 reconnects: its new fixed address.
    addr_user = by_user[RELOAD_ADDR]
    addr_user.ep.stop()
    addr_user.vip = None
    launch([addr_user])
    bring_up(rep, ctx, tag, [addr_user], len(rest) + 1)
    rep.equal(addr_user.vip, RELOAD_FIXED, f"[{tag}] {RELOAD_ADDR} back with the address the "
              "reloaded users file gives it")
    # user03 with its old password, then with the new one; user04 not at all.
    pw_user, gone_user = by_user[RELOAD_PW], by_user[RELOAD_GONE]
    for c in (pw_user, gone_user):
        c.ep.stop()
    launch([pw_user, gone_user])
    for c, why in ((pw_user, f"wrong password for user '{RELOAD_PW}'"),
                   (gone_user, f"user '{RELOAD_GONE}' is not in the users file")):
        line = wait_log_line(ctx.gw.log, REFUSE_TIMEOUT, r"authentication failed", why)
        rep.check(line is not None, f"[{tag}] {c.user} after the reload: the gateway logs /{why}/: {line!r}",
                  netns.tail(ctx.gw.log, 15))
    gone_user.ep.stop()
    pw_user.ep.stop()
    client_config(ctx, pw_user)  # now with the new password
    pw_user.vip = None
    launch([pw_user])
    bring_up(rep, ctx, tag, [pw_user], len(rest) + 2)


# ---------------------------------------------------------------------------

def teardown(rep, ctx):
    """Clients (all at once), then the gateway, then the namespaces."""
    try:
        running = [c for c in ctx.clients if c.ep and c.ep.proc is not None and c.ep.alive()]
        if running:
            stop_all(rep, "end", running, "every client")
        for c in ctx.clients + ctx.refused:
            if c.ep and c.ep.proc is not None and not c.ep.alive():
                c.ep.stop()  # closes the log
        if ctx.gw and ctx.gw.proc is not None:
            was = ctx.gw.alive()
            rc = ctx.gw.stop()
            if was:
                rep.equal(rc, 0, "[end] esptun-gateway: SIGTERM -> exit code")
    finally:
        each(lambda ns: ns.delete(), ctx.namespaces)
        names = {ns.name for ns in ctx.namespaces}
        listed = netns.run(["ip", "netns", "list"], check=False).stdout
        left = [ln.split()[0] for ln in listed.splitlines()
                if ln.split() and ln.split()[0] in names]
        rep.check(not left, f"[end] its {len(names)} namespaces are gone (`ip netns list`)",
                  f"left: {left}")


def body(rep, build):
    netns.require_environment(("ip", "ping", "timeout"))
    strongswan.require_tools()
    if not os.access(os.path.join(build, "esptun-client"), os.X_OK):
        raise TestError(f"esptun-client not found in {build}: build it first")
    ctx = Ctx()
    ctx.build, ctx.tmp = build, netns.make_tempdir("tmpl")
    ctx.gw, ctx.namespaces, ctx.clients, ctx.refused = None, [], [], []
    ctx.logs, ctx.suspects = [], []

    def dump_logs():
        for log in [ctx.gw.log if ctx.gw else None] + [c.ep.log for c in ctx.suspects[:3]] \
                + ctx.logs:
            if log and os.path.exists(log):
                print(f"\n--- {log}:\n{netns.tail(log, 40)}")
    rep.on_failure.append(dump_logs)
    keep = os.environ.get("ESPTUN_IKE_LOGDIR")
    if keep:  # diagnostics: copy every log before the temp folder goes
        def keep_logs():
            os.makedirs(keep, exist_ok=True)
            for root, _, files in os.walk(ctx.tmp):
                for f in files:
                    if f.endswith(".log"):
                        rel = os.path.relpath(os.path.join(root, f), ctx.tmp)
                        shutil.copy(os.path.join(root, f),
                                    os.path.join(keep, rel.replace(os.sep, "_")))
        netns.on_cleanup(keep_logs)
    t_all = time.monotonic()
    try:
        rep.section("set-up: PKI, 57 namespaces on one bridge, the gateway with two templates")
        make_pki(ctx)
        secs = build_topology(ctx)
        rep.info(f"{len(ctx.namespaces)} namespaces in {secs:.1f} s")
        t0 = time.monotonic()
        for c in ctx.clients:
            client_config(ctx, c)
        gw_path = gateway_config(ctx)
        ok = check_accepted(rep, ctx, gw_path, "esptun-gateway")
        for c in (ctx.clients[0], ctx.clients[-1]):
            ok = check_accepted(rep, ctx, c.ep.config, "esptun-client") and ok
        if not ok:
            raise TestError("esptun refuses the configs (see above); no case run")
        ctx.gw = esptun_proc.Endpoint(build, ctx.g, gw_path, os.path.join(ctx.tmp, "g.log"))
        ctx.gw.start()
        rep.info(f"configs written and checked, the gateway up in {time.monotonic() - t0:.1f} s")
        steps = [("case 1: all 50 users connect at once", case_all_up),
                 ("case 2: 5 clients stop and come back", case_stop_start),
                 ("case 3: refusals", case_refusals),
                 ("case 4: strongSwan road warrior, EAP-MSCHAPv2", case_strongswan),
                 ("case 5: users file edited, reload", case_users_reload)]
        only = os.environ.get("ESPTUN_IKE_CASES", "").strip()
        chosen = {int(x) for x in only.split(",") if x.strip()} | {1} if only else None
        rep.run_cases(steps, ctx, only=chosen)
    finally:
        rep.section("end: stop everything")
        t0 = time.monotonic()
        teardown(rep, ctx)
        rep.info(f"the end took {time.monotonic() - t0:.1f} s; {time.monotonic() - t_all:.1f} s "
                 "in all")


if __name__ == "__main__":
    report.main("netns/ike_templates", body, tools=("ip", "ping", "timeout"))
