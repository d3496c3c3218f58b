#!/usr/bin/python3
# test_ike_redirect.py - IKE Redirect (RFC 5685, issue 19) against strongSwan
# on both sides: two esptun gateways with separate address pools share the
# clients of one service; strongSwan's charon is the client that is sent
# from one to the other, and the gateway that sends esptun-client away.
#
#   netns sw (charon, client)  netns c (esptun-client)  netns sg (charon, gateway)
#   ul 192.168.91.10           ul 192.168.91.11         ul 192.168.91.3, lo 10.91.3.1
#          |                          |                         |
#   -------+---------- br0 in netns hub (no address) -----------+--------
#          |                                        |
#   netns g1: esptun-gateway G1              netns g2: esptun-gateway G2
#   ul 192.168.91.1, tun 10.91.1.1/24        ul 192.168.91.2, tun 10.91.2.1/24
#   address_pool 10.91.1.0/24                address_pool 10.91.2.0/24
#   [redirect] to = ["192.168.91.2"]         (no [redirect])
#
# Every gateway is gw.redirect.test with the same PSK per user (a service
# whose gateways share credentials, as the deployment in docs/scale.md
# has it). The clients' side covers all pools (10.91.0.0/16).
#  1. charon connects to G1 (when = "never"): established there, a G1 pool
#     address, ping 10.91.1.1 through the tunnel.
#  2. maintenance: G1's [redirect] becomes when = "all" and `esptun-gateway
#     reload` applies it (the reply names it, the status shows it, no peer
#     changed): G1 sends charon a REDIRECT by INFORMATIONAL (counter
#     redirects_established 1, in `show`'s redirect line and in the
#     Prometheus output too; charon's log shows it parsed the request as
#     [ N(REDIR) ]); charon connects to G2 on its own, gets a G2
#     pool address and pings 10.91.2.1; G1 holds no IKE SA of it within the
#     grace (charon deleted it, or G1 did after 30 s: which one is reported).
#  3. a new connection while G1 is in maintenance: charon's IKE SA is
#     terminated and initiated again towards G1, which answers IKE_SA_INIT
#     with REDIRECT and keeps nothing (redirects_sent grows, no half-open SA,
#     no established SA; charon parsed the answer as [ N(REDIR) ]); charon
#     ends up on G2 again.
#  4. esptun-client configured for G1 follows G1's IKE_SA_INIT redirect: its
#     status shows the IKE SA with 192.168.91.2:4500, a G2 pool address and
#     redirects_followed 1; it pings 10.91.2.1.
#  5. esptun-client connected to charon as a gateway (pool 10.91.3.0/24):
#     `swanctl --redirect --peer-ip 192.168.91.11 --gateway 192.168.91.2`
#     sends it to G2; it moves make-before-break (the old IKE SA goes once
#     the new one is up): charon holds no IKE SA of it within a few seconds,
#     the client's status shows G2, and it pings 10.91.2.1.
# All namespaces and processes go at the end, also on failure; the test
# checks with `ip netns list` that none is left.
#
# usage: test_ike_redirect.py BUILD_DIR   (root; needs strongSwan installed)
"""IKE Redirect (RFC 5685): esptun gateways and strongSwan, both directions."""

import os
import re
import subprocess
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping as ping_lib  # noqa: E402
import report  # noqa: E402
import strongswan  # noqa: E402
from esptun_ike import established  # noqa: E402
from netns import TestError  # noqa: E402

G1_UL, G2_UL, SG_UL, SW_UL, C_UL = ("192.168.91.1", "192.168.91.2", "192.168.91.3",
                                    "192.168.91.10", "192.168.91.11")
G1_IN, G2_IN, SG_IN = "10.91.1.1", "10.91.2.1", "10.91.3.1"
G1_POOL, G2_POOL, SG_POOL = "10.91.1.0/24", "10.91.2.0/24", "10.91.3.0/24"
ALL_POOLS = "10.91.0.0/16"
GW_ID = "gw.redirect.test"
SW_ID, SW_PSK = "sw@redirect.test", "redirect-test-psk-strongswan-0123"
C_ID, C_PSK = "c@redirect.test", "redirect-test-psk-esptun-client-01"
IKE = "aes128gcm16-prfsha256-x25519"
ESP = "aes128gcm16"

ESTABLISH_TIMEOUT = 15
MOVE_TIMEOUT = 20          # REDIRECT sent -> the client established on the other gateway
GRACE_TIMEOUT = 40         # esptun's kRedirectGrace (30 s) and a margin
PINGS, PING_DEADLINE = 5, 10


class Ctx:
    pass


def gateway_config(ctx, name, ul, inner, pool, redirect=None):
    tunnel = dict(interface=f"rd{name}{ctx.sfx}", addresses=[f"{inner}/24"], listen=f"{ul}:4500",
                  ike_port=500, local_id=GW_ID, address_pool=[pool], tun_io="direct",
                  control_socket=os.path.join(ctx.tmp, f"{name}.sock"),
                  state_dir=os.path.join(ctx.tmp, f"state-{name}"))
    peers = [dict(name="sw", psk=SW_PSK, remote_id=SW_ID, ike_proposals=[IKE],
                  esp_proposals=[ESP]),
             dict(name="c", psk=C_PSK, remote_id=C_ID, ike_proposals=[IKE], esp_proposals=[ESP])]
    text = conf.render_ike_config(tunnel, peers)
    if redirect:
        text += "\n[redirect]\n" + "".join(f"{k} = {conf._toml_value(v)}\n"
                                           for k, v in redirect.items())
    return conf.write_private(os.path.join(ctx.tmp, f"{name}.toml"), text)


def client_config(ctx, endpoint):
    tunnel = dict(interface=f"rdc{ctx.sfx}", listen="0.0.0.0:4500", local_id=C_ID,
                  tun_io="direct", control_socket=os.path.join(ctx.tmp, "c.sock"),
                  state_dir=os.path.join(ctx.tmp, "state-c"))
    peer = dict(name="gw", endpoint=f"{endpoint}:4500", allowed_ips=[ALL_POOLS], psk=C_PSK,
                remote_id=GW_ID, ike_proposals=[IKE], esp_proposals=[ESP])
    return conf.write_private(os.path.join(ctx.tmp, "c.toml"),
                              conf.render_ike_config(tunnel, [peer]))


def build_topology(ctx):
    ctx.hub = netns.Netns(netns.unique("redir", "hub"))
    ctx.namespaces = [ctx.hub]
    ctx.hub.ip_batch(["link add br0 type bridge", "link set br0 up"])
    sites = {}
    for key, ul in (("g1", G1_UL), ("g2", G2_UL), ("sg", SG_UL), ("sw", SW_UL), ("c", C_UL)):
        ns = netns.Netns(netns.unique("redir", key))
        ctx.namespaces.append(ns)
        ctx.hub.ip_batch([f"link add v{key} type veth peer name ul netns {ns.name}",
                          f"link set v{key} master br0 up"])
        ns.ip_batch([f"addr add {ul}/24 dev ul", "link set ul up"])
        sites[key] = ns
    sites["sg"].ip_batch([f"addr add {SG_IN}/32 dev lo"])
    return sites


def counters(ep):
    return ((ep.status().get("ike") or {}).get("counters")) or {}


def reload(ctx, name):
    p = subprocess.run(ctx.ns[name].cmd(os.path.join(ctx.build, "esptun-gateway"), "reload", "-s",
                                        os.path.join(ctx.tmp, f"{name}.sock")),
                       capture_output=True, text=True, timeout=20)
    return p.returncode, (p.stdout + p.stderr).strip()


def sw_client_config(remote):
    return strongswan.Config(
        local_addr=SW_UL, remote_addr=remote, local_ts="dynamic", remote_ts=ALL_POOLS,
        local_id=SW_ID, remote_id=GW_ID, psk=SW_PSK, vips="0.0.0.0", ike_proposals=IKE,
        esp_proposals=ESP, retransmit_tries=3)


def sw_sa(charon):
    """(IkeSa, its gateway's address) of charon's established IKE SA with an
    installed CHILD_SA, or None."""
    got = charon.established()
    return (got[0], got[0].remote.split(":")[0]) if got else None


def in_net(addr, prefix):
    import ipaddress
    return ipaddress.ip_address(addr) in ipaddress.ip_network(prefix)


def case_connect(rep, ctx, tag):
    ok, out = ctx.sw.initiate(timeout=ESTABLISH_TIMEOUT)
    rep.check(ok, f"[{tag}] charon: swanctl --initiate to G1 succeeds", out.strip()[-600:])
    got = netns.wait_until(lambda: sw_sa(ctx.sw), ESTABLISH_TIMEOUT, interval=0.1,
                           what="charon established")
    ike, gw = got
    vips = list(ike.local_vips or [])
    rep.check(gw == G1_UL and len(vips) == 1 and in_net(vips[0], G1_POOL),
              f"[{tag}] charon is established with {gw} and got {vips} (want G1 {G1_UL}, an "
              f"address of {G1_POOL})", str(ike.raw)[:800])
    res = ping_lib.run(ctx.ns["sw"], G1_IN, count=PINGS, deadline=PING_DEADLINE)
    ping_lib.expect_replies(rep, f"[{tag}] charon's side pings {G1_IN} through G1", res, PINGS)


def case_maintenance(rep, ctx, tag):
    gateway_config(ctx, "g1", G1_UL, G1_IN, G1_POOL, dict(to=[G2_UL], when="all"))
    rc, out = reload(ctx, "g1")
    rep.check(rc == 0 and "redirect" in out, f"[{tag}] `esptun-gateway reload` applies "
              f"[redirect] when = \"all\" (exit {rc}): {out[:200]}", out)
    st = ctx.g1.status()
    pol = (st.get("ike") or {}).get("redirect") or {}
    rep.check(pol.get("when") == "all" and pol.get("to") == [G2_UL],
              f"[{tag}] G1's status shows the policy: {pol}", str(pol))
    t0 = time.monotonic()
    try:
        ike, gw = netns.wait_until(lambda: (lambda s: s if s and s[1] == G2_UL else None)(
            sw_sa(ctx.sw)), MOVE_TIMEOUT, interval=0.1, what="charon established with G2")
    except TestError as e:
        rep.check(False, f"[{tag}] charon moves to G2: {e}",
                  ctx.sw.list_sas_text() + "\n" + netns.tail(ctx.sw.log, 40))
        return
    vips = list(ike.local_vips or [])
    rep.check(in_net(vips[0], G2_POOL) if len(vips) == 1 else False,
              f"[{tag}] charon moved to G2 in {time.monotonic() - t0:.1f} s with {vips} "
              f"(an address of {G2_POOL})", str(ike.raw)[:800])
    c = counters(ctx.g1)
    rep.equal(c.get("redirects_established"), 1, f"[{tag}] G1 redirects_established")
    # What an operator reads: `show` names the policy, Prometheus the counter.
    sock = os.path.join(ctx.tmp, "g1.sock")
    gw_bin = os.path.join(ctx.build, "esptun-gateway")
    show = ctx.ns["g1"].run(gw_bin, "show", "-s", sock, check=False).stdout
    want = f"all, to {G2_UL}; established clients at 100/s"
    rep.check(any(ln.strip().startswith("redirect") and want in ln for ln in show.splitlines()),
              f"[{tag}] G1's show has the line: redirect {want}", show[-1500:])
    prom = ctx.ns["g1"].run(gw_bin, "status", "-s", sock, "--format", "prometheus",
                            check=False).stdout
    rep.check(re.search(r'^esptun_ike_events_total\{[^}]*event="redirects_established"[^}]*\} 1$',
                        prom, re.M) is not None,
              f"[{tag}] G1's Prometheus output counts redirects_established 1",
              "\n".join(ln for ln in prom.splitlines() if "redirect" in ln)[:800])
    line = ctx.sw.log_search(r"parsed INFORMATIONAL request \d+ \[ N\(REDIR\) \]")
    rep.check(line is not None, f"[{tag}] charon parsed G1's REDIRECT: {(line or '').strip()}",
              netns.tail(ctx.sw.log, 40))
    res = ping_lib.run(ctx.ns["sw"], G2_IN, count=PINGS, deadline=PING_DEADLINE)
    ping_lib.expect_replies(rep, f"[{tag}] charon's side pings {G2_IN} through G2", res, PINGS)
    try:
        netns.wait_until(lambda: not established(ctx.g1.status(), "sw"), GRACE_TIMEOUT,
                         interval=0.2, what="G1 without an IKE SA of sw")
        how = ("charon deleted it" if esptun_proc.log_line(ctx.g1.log, "peer sw",
                                                           "deleted by the peer")
               else "G1 deleted it after the grace"
               if esptun_proc.log_line(ctx.g1.log, "the client did not delete it") else "?")
        rep.check(True, f"[{tag}] G1 holds no IKE SA of charon any more ({how}, "
                  f"{time.monotonic() - t0:.1f} s after the reload)")
    except TestError as e:
        rep.check(False, f"[{tag}] {e}", str(ctx.g1.status_or_empty())[:1500])
    sas = [s for s in established(ctx.g2.status()) if s.get("peer") == "sw"]
    rep.check(len(sas) == 1 and sas[0].get("virtual_ips") == vips,
              f"[{tag}] G2 has charon's IKE SA with {vips}", str(sas)[:800])


def case_new_while_maintenance(rep, ctx, tag):
    ok, out = ctx.sw.terminate_ike()
    rep.check(ok, f"[{tag}] charon: terminate its IKE SA", out[-300:])
    before = counters(ctx.g1).get("redirects_sent", 0)
    ctx.sw.cfg = sw_client_config(G1_UL)  # (unchanged: towards G1)
    ok, out = ctx.sw.initiate(timeout=ESTABLISH_TIMEOUT)
    try:
        ike, gw = netns.wait_until(lambda: (lambda s: s if s and s[1] == G2_UL else None)(
            sw_sa(ctx.sw)), ESTABLISH_TIMEOUT, interval=0.1, what="charon established with G2")
    except TestError as e:
        rep.check(False, f"[{tag}] charon, initiating to G1, ends up on G2: {e}",
                  out[-600:] + "\n" + netns.tail(ctx.sw.log, 40))
        return
    rep.check(True, f"[{tag}] charon, initiating to G1, is established with G2 "
              f"({ike.local_vips})")
    after = counters(ctx.g1).get("redirects_sent", 0)
    rep.check(after > before, f"[{tag}] G1 answered IKE_SA_INIT with REDIRECT "
              f"(redirects_sent {before} -> {after})")
    st = ctx.g1.status()
    rep.check(not [s for s in (st.get("ike") or {}).get("sas", []) if s.get("peer") in ("sw", "")],
              f"[{tag}] G1 keeps no IKE SA (half-open or established) from it",
              str((st.get("ike") or {}).get("sas"))[:800])
    line = ctx.sw.log_search(r"parsed IKE_SA_INIT response 0 \[ N\(REDIR\) \]")
    rep.check(line is not None, f"[{tag}] charon parsed G1's REDIRECT answer: "
              f"{(line or '').strip()}", netns.tail(ctx.sw.log, 40))


def client_on(ctx, gw):
    """(sa, status) when the client is established with gateway address gw, else None."""
    st = ctx.client.status()
    for s in established(st):
        if str(s.get("remote", "")).startswith(gw + ":"):
            return s, st
    return None


def start_client(ctx, gw, log_name):
    """esptun-client in netns c, configured for the gateway at gw, started."""
    ctx.client = esptun_proc.Endpoint(ctx.build, ctx.ns["c"], client_config(ctx, gw),
                                      os.path.join(ctx.tmp, log_name), "client")
    ctx.client.start()


def wait_client_on(rep, tag, ctx, gw, timeout, what):
    """(sa, status) once the client is established with gw; None (and a
    failed check naming what) when it is not within timeout seconds."""
    try:
        return netns.wait_until(lambda: client_on(ctx, gw), timeout, interval=0.1,
                                what=f"esptun-client established with {gw}")
    except TestError as e:
        rep.check(False, f"[{tag}] {what}: {e}", netns.tail(ctx.client.log, 30))
        return None


def case_client_init(rep, ctx, tag):
    start_client(ctx, G1_UL, "c.log")
    got = wait_client_on(rep, tag, ctx, G2_UL, ESTABLISH_TIMEOUT,
                         "esptun-client follows G1's redirect")
    if not got:
        return
    sa, st = got
    c = (st.get("ike") or {}).get("counters") or {}
    rep.check(c.get("redirects_followed") == 1 and in_net((sa.get("virtual_ips") or ["0.0.0.0"])[0],
                                                          G2_POOL),
              f"[{tag}] esptun-client, configured for G1, is established with {sa.get('remote')} "
              f"(redirects_followed {c.get('redirects_followed')}, address "
              f"{sa.get('virtual_ips')})", str(sa)[:800])
    res = ping_lib.run(ctx.ns["c"], G2_IN, count=PINGS, deadline=PING_DEADLINE)
    ping_lib.expect_replies(rep, f"[{tag}] esptun-client pings {G2_IN}", res, PINGS)
    rc = ctx.client.stop()
    rep.equal(rc, 0, f"[{tag}] esptun-client: SIGTERM -> exit code")


def case_charon_redirects_client(rep, ctx, tag):
    cfg = strongswan.Config(
        local_addr=SG_UL, remote_addr="%any", local_ts=f"{SG_IN}/32", remote_ts="dynamic",
        local_id=GW_ID, remote_id=C_ID, psk=C_PSK, pools={"rd": {"addrs": SG_POOL}},
        ike_proposals=IKE, esp_proposals=ESP, conn="rw", child="rw")
    ctx.sg = strongswan.Charon(ctx.ns["sg"], os.path.join(ctx.tmp, "sg"), cfg, tag="sg")
    ctx.logs.append(ctx.sg.log)
    ctx.sg.start()
    start_client(ctx, SG_UL, "c2.log")
    if not wait_client_on(rep, tag, ctx, SG_UL, ESTABLISH_TIMEOUT,
                          "esptun-client connects to charon"):
        return
    res = ping_lib.run(ctx.ns["c"], SG_IN, count=PINGS, deadline=PING_DEADLINE)
    ping_lib.expect_replies(rep, f"[{tag}] esptun-client pings {SG_IN} through charon", res, PINGS)
    p = ctx.sg.swanctl("--redirect", "--peer-ip", C_UL, "--gateway", G2_UL, check=False)
    rep.check(p.returncode == 0, f"[{tag}] swanctl --redirect --peer-ip {C_UL} --gateway {G2_UL}",
              (p.stdout + p.stderr).strip()[-400:])
    t0 = time.monotonic()
    got = wait_client_on(rep, tag, ctx, G2_UL, MOVE_TIMEOUT,
                         "esptun-client follows charon's REDIRECT")
    if not got:
        return
    sa, st = got
    c = (st.get("ike") or {}).get("counters") or {}
    rep.check(c.get("redirects_followed") == 1,
              f"[{tag}] esptun-client moved to {sa.get('remote')} in {time.monotonic() - t0:.1f} s "
              f"(redirects_followed {c.get('redirects_followed')}, address {sa.get('virtual_ips')})",
              str(sa)[:800])
    rep.check(len(established(st)) == 1, f"[{tag}] the client holds one IKE SA",
              str(established(st))[:800])
    try:
        netns.wait_until(lambda: not [s for s in ctx.sg.list_sas() if s.state == "ESTABLISHED"],
                         MOVE_TIMEOUT, interval=0.2, what="charon without the client's IKE SA")
        rep.check(True, f"[{tag}] charon holds no IKE SA of the client (it deleted the old one "
                  "once the new one was up)")
    except TestError as e:
        rep.check(False, f"[{tag}] {e}", ctx.sg.list_sas_text())
    res = ping_lib.run(ctx.ns["c"], G2_IN, count=PINGS, deadline=PING_DEADLINE)
    ping_lib.expect_replies(rep, f"[{tag}] esptun-client pings {G2_IN} through G2", res, PINGS)
    rc = ctx.client.stop()
    rep.equal(rc, 0, f"[{tag}] esptun-client: SIGTERM -> exit code")


def teardown(rep, ctx):
    try:
        if ctx.client and ctx.client.alive():
            ctx.client.stop()
        for ch in (ctx.sw, ctx.sg):
            if ch:
                ch.stop()
        for name, ep in (("G1", ctx.g1), ("G2", ctx.g2)):
            if ep and ep.proc is not None:
                was = ep.alive()
                rc = ep.stop()
                if was:
                    rep.equal(rc, 0, f"[end] {name}: SIGTERM -> exit code")
    finally:
        for ns in ctx.namespaces:
            ns.delete()
        names = {ns.name for ns in ctx.namespaces}
        listed = netns.run(["ip", "netns", "list"], check=False).stdout
        left = [ln.split()[0] for ln in listed.splitlines() if ln.split() and ln.split()[0] in names]
        rep.check(not left, f"[end] its {len(names)} namespaces are gone", f"left: {left}")


def body(rep, build):
    netns.require_environment(("ip", "ping", "timeout"))
    strongswan.require_tools()
    ctx = Ctx()
    ctx.build, ctx.tmp = build, netns.make_tempdir("redir")
    ctx.sfx = str(os.getpid() % 10000)
    ctx.g1 = ctx.g2 = ctx.sw = ctx.sg = ctx.client = None
    ctx.namespaces, ctx.logs = [], []

    def dump_logs():
        for ep in (ctx.g1, ctx.g2, ctx.client):
            if ep and os.path.exists(ep.log):
                print(f"\n--- {ep.log}:\n{netns.tail(ep.log, 40)}")
        for log in ctx.logs:
            if os.path.exists(log):
                print(f"\n--- {log}:\n{netns.tail(log, 40)}")
    rep.on_failure.append(dump_logs)
    try:
        rep.section("set-up: six namespaces on one bridge, two esptun gateways, charon")
        ctx.ns = build_topology(ctx)
        g1 = gateway_config(ctx, "g1", G1_UL, G1_IN, G1_POOL, dict(to=[G2_UL], when="never"))
        g2 = gateway_config(ctx, "g2", G2_UL, G2_IN, G2_POOL)
        for path in (g1, g2):
            p = esptun_proc.run_check(build, path)
            rep.require(p.returncode == 0, f"`esptun-gateway check` accepts {os.path.basename(path)}",
                        (p.stdout + p.stderr).strip())
        ctx.g1 = esptun_proc.Endpoint(build, ctx.ns["g1"], g1, os.path.join(ctx.tmp, "g1.log"))
        ctx.g2 = esptun_proc.Endpoint(build, ctx.ns["g2"], g2, os.path.join(ctx.tmp, "g2.log"))
        ctx.g1.start()
        ctx.g2.start()
        ctx.sw = strongswan.Charon(ctx.ns["sw"], os.path.join(ctx.tmp, "sw"),
                                   sw_client_config(G1_UL), tag="sw")
        ctx.logs.append(ctx.sw.log)
        ctx.sw.start()
        steps = [("case 1: charon connects to G1", case_connect),
                 ("case 2: G1 goes into maintenance by reload; charon is sent to G2",
                  case_maintenance),
                 ("case 3: a new connection to G1 is redirected in IKE_SA_INIT",
                  case_new_while_maintenance),
                 ("case 4: esptun-client follows G1's IKE_SA_INIT redirect", case_client_init),
                 ("case 5: charon as gateway redirects esptun-client to G2",
                  case_charon_redirects_client)]
        rep.run_cases(steps, ctx)
    finally:
        rep.section("end: stop everything")
        teardown(rep, ctx)


if __name__ == "__main__":
    report.main("netns/ike_redirect", body, tools=("ip", "ping", "timeout"))
