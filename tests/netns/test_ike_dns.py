#!/usr/bin/python3
# test_ike_dns.py - the DNS server a gateway hands an esptun client (IKEv2
# configuration payload) reaches the client's resolv.conf through the real
# openresolv, and leaves it again when the client stops. openresolv is an
# implementation of the resolvconf interface esptun does not share any code
# with (service/dns_config.cpp runs `resolvconf -a TUN` / `-d TUN`).
#
#      netns C (et-ikedns-PID-c)                netns G (et-ikedns-PID-g)
#    +--------------------------------+       +--------------------------------+
#    | esptun-client, no addresses    |       | esptun-gateway                 |
#    |   tun idcN 10.77.0.10/32       |       |   tun idgN 10.77.0.1/24        |
#    |   (assigned by the gateway)    |       |   address_pool 10.77.0.0/24    |
#    |   peer gw 10.203.0.1:4500      |       |   dns = ["10.77.0.53"]         |
#    | ulc 10.203.0.2/24 ------------ veth -- ulg 10.203.0.1/24               |
#    +--------------------------------+       +--------------------------------+
#
# `ip netns exec NS` runs its command in a mount namespace of its own where
# every file in /etc/netns/NS/ is bind-mounted over the one of that name in
# /etc. tests/lib/netns.py puts two there for every namespace (C and G
# here), so resolvconf run by esptun (or by the test) touches nothing of
# the host; this test checks that they took before it runs resolvconf:
#  - resolv.conf: what resolvconf rewrites (in place, so the bind mount
#    holds). It starts with openresolv's signature line, as a resolv.conf
#    that openresolv already manages does; without it openresolv would copy
#    the old file to /etc/resolv.conf.bak, which is the host's.
#  - resolvconf.conf: openresolv's config: its records in a folder of the
#    namespace's (state_dir) instead of the host's /run/resolvconf (which every
#    namespace shares), and no restart of the host's nscd or HUP to its
#    avahi-daemon, no dnsmasq/unbound files (the Debian defaults).
# Before esptun starts, C gets a record "ulc" (nameserver 192.0.2.53, as DHCP
# would give) so the test sees that esptun's record comes and goes beside it.
#
# Checks: while the client is up, `resolvconf -l TUN` in C shows esptun's
# record, C's resolv.conf has "nameserver 10.77.0.53" (and still 192.0.2.53),
# the client's status says ike.dns_applied == "resolvconf" and its log says
# so; after SIGTERM the client exits 0 and logs the removal, the record and
# the nameserver line are gone, 192.0.2.53 stays. The host's /etc/resolv.conf
# is unchanged; no /etc/resolv.conf.bak, /run/resolvconf or
# /run/dnsmasq/resolv.conf appeared. /etc/netns/NS and the namespaces are
# removed at the end, also on failure or a signal.
#
# openresolv missing (or another resolvconf) is a failure, not a skip:
# scripts/setup.sh installs it.
#
# usage: test_ike_dns.py BUILD_DIR   (root; BUILD_DIR holds esptun-gateway
#        and esptun-client)
"""IKEv2 DNS servers from the gateway applied with the real openresolv."""

import hashlib
import json
import os
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
from netns import TestError  # noqa: E402

ESTABLISH_TIMEOUT = 10  # client answering status -> IKE SA up and the DNS applied

GW_UL, C_UL = "10.203.0.1", "10.203.0.2"
GW_IN, POOL, VIP = "10.77.0.1", "10.77.0.0/24", "10.77.0.10"
DNS = "10.77.0.53"         # the gateway hands this out
LAN_DNS = "192.0.2.53"     # C's own resolver, from a record the test adds
PSK = "alice-pre-shared-key-0123456789"
RESOLVCONF = "/sbin/resolvconf"
SIGNATURE = netns.RESOLVCONF_SIGNATURE


def sha256(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return f"unreadable: {e}"


def require_openresolv():
    """The resolvconf esptun finds must be openresolv: fail, never skip."""
    if not os.access(RESOLVCONF, os.X_OK):
        raise TestError(f"{RESOLVCONF} not found: this test needs openresolv "
                        "(run scripts/setup.sh, or apt-get install openresolv)")
    p = netns.run([RESOLVCONF, "--version"], check=False)
    if not p.stdout.startswith("openresolv"):
        said = (p.stdout + p.stderr).strip()[:100]
        raise TestError(f"{RESOLVCONF} is not openresolv ({said!r}); this test needs openresolv "
                        "(scripts/setup.sh)")
    if not os.path.isfile("/etc/resolvconf.conf"):
        # ip netns exec can only bind-mount over a file that exists.
        raise TestError("/etc/resolvconf.conf (openresolv's config) is missing: "
                        "reinstall openresolv")
    return p.stdout.splitlines()[0]


def check_isolated(ns):
    """Never run resolvconf in a namespace whose resolver files are not its
    own (tests/lib/netns.py makes them; see its Netns)."""
    seen = ns.run("cat", "/etc/resolvconf.conf").stdout
    if f"state_dir={ns.resolvconf_state}" not in seen:
        raise TestError(f"`ip netns exec {ns.name}` does not show {ns.etc}/resolvconf.conf as "
                        f"/etc/resolvconf.conf: {seen[:200]!r}")
    return ns.resolvconf_state


def ns_resolv_conf(ns):
    return ns.run("cat", "/etc/resolv.conf").stdout


def nameservers(text):
    return [ln.split()[1] for ln in text.splitlines()
            if ln.startswith("nameserver ") and len(ln.split()) > 1]


def build(ctx):
    g = netns.Netns(netns.unique("ikedns", "g"))
    c = netns.Netns(netns.unique("ikedns", "c"))
    ctx.ns = [g, c]
    netns.veth(g, c, "ulg", "ulc", [f"{GW_UL}/24"], [f"{C_UL}/24"])
    sfx = os.getpid() % 100000
    gw_tunnel = {
        "interface": f"idg{sfx}", "addresses": [f"{GW_IN}/24"], "listen": f"{GW_UL}:4500",
        "ike_port": 500, "local_id": "gw.example", "address_pool": [POOL], "dns": [DNS],
        "tun_io": "direct", "control_socket": os.path.join(ctx.tmp, "g.sock"),
        "state_dir": os.path.join(ctx.tmp, "state-g"),
    }
    gw_peer = dict(name="alice", allowed_ips=[f"{VIP}/32"], psk=PSK, remote_id="alice@example.com")
    cl_tunnel = {
        "interface": f"idc{sfx}", "listen": f"{C_UL}:4500", "local_id": "alice@example.com",
        "tun_io": "direct", "control_socket": os.path.join(ctx.tmp, "c.sock"),
        "state_dir": os.path.join(ctx.tmp, "state-c"),
    }
    cl_peer = dict(name="gw", endpoint=f"{GW_UL}:4500", allowed_ips=[POOL], psk=PSK,
                   remote_id="gw.example")
    gcfg = conf.write_private(os.path.join(ctx.tmp, "g.toml"),
                              conf.render_ike_config(gw_tunnel, [gw_peer]))
    ccfg = conf.write_private(os.path.join(ctx.tmp, "c.toml"),
                              conf.render_ike_config(cl_tunnel, [cl_peer]))
    ctx.gw = esptun_proc.Endpoint(ctx.build, g, gcfg, os.path.join(ctx.tmp, "gateway.log"))
    ctx.cl = esptun_proc.Endpoint(ctx.build, c, ccfg, os.path.join(ctx.tmp, "client.log"), "client")
    return g, c, cl_tunnel["interface"]


def wait_dns_applied(rep, ctx):
    """The client's status once its IKE SA is established and ike.dns_applied is set."""
    def ready():
        if not ctx.cl.alive():
            raise TestError(f"esptun-client exited with {ctx.cl.proc.returncode}; log:\n"
                            f"{netns.tail(ctx.cl.log, 15)}")
        st = ctx.cl.status()
        ike = st.get("ike") if isinstance(st.get("ike"), dict) else {}
        up = any(isinstance(s, dict) and s.get("state") == "established"
                 for s in ike.get("sas") or [])
        return st if up and "dns_applied" in ike else None
    t0 = time.monotonic()
    try:
        st = netns.wait_until(ready, ESTABLISH_TIMEOUT, interval=0.1,
                              what="an established IKE SA and ike.dns_applied in the client's "
                                   "status")
    except TestError as e:
        st = ctx.cl.status_or_empty()
        raise TestError(f"{str(e).splitlines()[0]}\nclient ike: {json.dumps(st.get('ike'))[:800]}\n"
                        f"client log:\n{netns.tail(ctx.cl.log, 15)}")
    rep.info(f"IKE SA up and DNS applied {time.monotonic() - t0:.2f} s after the client answered")
    return st


def body(rep, build_dir):
    netns.require_environment(("ip",))
    if not os.access(os.path.join(build_dir, "esptun-client"), os.X_OK):
        raise TestError(f"esptun-client not found in {build_dir}: build it first")
    rep.info(f"{RESOLVCONF}: {require_openresolv()}")
    for d in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if os.access(f"{d}/resolvectl", os.X_OK):
            rep.info(f"{d}/resolvectl is installed too: esptun tries it first, and falls back "
                     "to resolvconf as its link is not systemd-resolved's")
            break

    class Ctx:
        pass
    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.etc_dirs, ctx.ns = build_dir, netns.make_tempdir("ikedns"), [], []
    host_before = {p: (os.path.exists(p), sha256(p)) for p in
                   ("/etc/resolv.conf", "/etc/resolv.conf.bak", "/run/resolvconf",
                    "/run/dnsmasq/resolv.conf")}

    t0 = time.monotonic()
    g, c, tun = build(ctx)

    def dump_logs():
        for log in (ctx.cl.log, ctx.gw.log):
            print(f"\n--- {log}:\n{netns.tail(log, 30)}")
    rep.on_failure.append(dump_logs)
    try:
        for ns in (g, c):
            state = check_isolated(ns)  # the last one: C's
            ctx.etc_dirs.append(ns.etc)
        c.run(RESOLVCONF, "-a", "ulc", input=f"nameserver {LAN_DNS}\n")
        before = ns_resolv_conf(c)
        rep.equal(nameservers(before), [LAN_DNS], "C's resolv.conf before the client, from "
                  "openresolv's record ulc: nameservers")

        rep.section("client up: the gateway's DNS server in C's resolv.conf")
        ctx.gw.start()
        ctx.cl.start()
        st = wait_dns_applied(rep, ctx)
        ike = st["ike"]
        rep.equal(ike.get("dns_applied"), "resolvconf", "client status ike.dns_applied")
        sa = next(s for s in ike.get("sas", []) if s.get("state") == "established")
        rep.check(DNS in (sa.get("dns") or []), f"client status: the IKE SA has dns {DNS}",
                  json.dumps(sa)[:500])
        record = c.run(RESOLVCONF, "-l", tun, check=False)
        rep.check(record.returncode == 0 and f"nameserver {DNS}" in record.stdout,
                  f"`resolvconf -l {tun}` in C: esptun's record, named after the tun, "
                  f"holds nameserver {DNS}", (record.stdout + record.stderr).strip())
        up = ns_resolv_conf(c)
        rep.check(f"nameserver {DNS}" in up.splitlines(),
                  f"C's /etc/resolv.conf has \"nameserver {DNS}\"", up)
        rep.check(LAN_DNS in nameservers(up), f"... and still {LAN_DNS} from record ulc", up)
        rep.info(f"C's resolv.conf while up: nameservers {nameservers(up)}")
        line = next((ln for ln in netns.tail(ctx.cl.log, 200).splitlines()
                     if DNS in ln and "resolvconf" in ln), None)
        rep.check(line is not None, f"client log says it set {DNS} with resolvconf: {line!r}",
                  netns.tail(ctx.cl.log, 15))
        rep.check(ns_resolv_conf(g) == SIGNATURE + "\n", "G's resolv.conf untouched (the "
                  "gateway hands DNS servers out, it does not apply them)", ns_resolv_conf(g))

        rep.section("client stopped: the record and the nameserver line gone")
        rc = ctx.cl.stop()
        rep.equal(rc, 0, "esptun-client: SIGTERM -> exit code")
        after = ns_resolv_conf(c)
        rep.equal(nameservers(after), [LAN_DNS], "C's resolv.conf after the client: nameservers")
        records = sorted(os.listdir(os.path.join(state, "interfaces")))
        rep.equal(records, ["ulc"], "openresolv's records in C after the client")
        line = next((ln for ln in netns.tail(ctx.cl.log, 200).splitlines()
                     if "removed with resolvconf" in ln), None)
        rep.check(line is not None, f"client log says it removed them: {line!r}",
                  netns.tail(ctx.cl.log, 15))
        rc = ctx.gw.stop()
        rep.equal(rc, 0, "esptun-gateway: SIGTERM -> exit code")
    finally:
        for ep in (ctx.cl, ctx.gw):
            if ep.alive():
                ep.stop()
        for ns in reversed(ctx.ns):
            ns.delete()
    rep.section("the host untouched, nothing left")
    for p, (existed, digest) in host_before.items():
        now = (os.path.exists(p), sha256(p))
        rep.check(now == (existed, digest), f"host {p}: "
                  + (("unchanged" if existed else "still absent") if now == (existed, digest)
                     else "CHANGED"), f"before {(existed, digest)}, after {now}")
    rep.check(not any(os.path.exists(e) for e in ctx.etc_dirs),
              f"{', '.join(ctx.etc_dirs)} removed")
    listed = netns.run(["ip", "netns", "list"], check=False).stdout
    left = [ln.split()[0] for ln in listed.splitlines()
            if ln.split() and ln.split()[0] in {ns.name for ns in ctx.ns}]
    rep.check(not left, f"namespaces gone (`ip netns list`), {time.monotonic() - t0:.1f} s in all",
              f"left: {left}")


if __name__ == "__main__":
    report.main("netns/ike_dns", body, tools=("ip",))
