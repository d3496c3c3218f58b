#!/usr/bin/python3
# test_ike_strongswan_rw.py - esptun-client as a road warrior of charon:
# virtual IP and DNS from a pool, traffic selectors narrowed by charon.
#
# 10. Road warrior: esptun-client (no [tunnel] addresses, local_id
#     carol@esptun.test, peer "sw" with allowed_ips 10.88.0.0/16, endpoint
#     192.168.88.2:4500, case 1's proposals) against charon as a gateway:
#     remote_addrs %any, pools = rw (addrs 10.66.0.0/24, dns 10.66.0.53),
#     local_ts 10.88.1.0/24 (10.88.1.1 on lo), remote_ts dynamic. Checked:
#     `esptun-client check` accepts the config; both sides established
#     (charon the responder, algorithms); charon's remote-vips is one pool
#     address, its lease online for carol, and the client's status
#     (ike.sas[].virtual_ips) and tun (exactly VIP/32) agree; the client's
#     ike.sas[].dns is [10.66.0.53]; charon's CHILD_SA selectors
#     10.88.1.0/24 === VIP/32 and (when the client reports them)
#     children[].local_ts/remote_ts the same; CHILD SPIs crosswise; ROUTES:
#     `ip -4 route show dev TUN` in A holds the narrowed 10.88.1.0/24 and
#     neither the configured 10.88.0.0/16 nor anything else; ping A ->
#     10.88.1.1 and B -> VIP; 100 MB TCP A -> 10.88.1.1 (SHA-256 equal, the
#     receiver sees the VIP as the source, charon's CHILD_SA counted it);
#     SIGTERM to the client: exit 0, tun with address and routes gone, and
#     within 5 s charon has no IKE_SA of carol, logged the Delete and shows
#     the lease offline. charon's IKE_AUTH exchange (CPRQ/CPRP contents),
#     virtual IP and CHILD_SA log lines are reported.
#   netns A (client)                          netns B (charon, gateway)
#   tun ikcN 10.66.0.x/32 (from the pool)     lo 10.88.1.1/32; pool rw 10.66.0.0/24
#     route 10.88.1.0/24 -> tun (narrowed)      table 220: VIP via ipsec0 src 10.88.1.1
#   swa 192.168.88.1/24 ----------------- veth ----------------- swb 192.168.88.2/24
#
#
# The topology, the set-up of each case and the checks every case makes
# (both sides' view of the SAs) are in tests/lib/sw_pair.py.
#
# usage: test_ike_strongswan_rw.py BUILD_DIR   (root; needs strongSwan installed; BUILD_DIR holds
#        esptun-gateway and esptun-client)
# Environment (diagnostics): see tests/lib/sw_pair.py (ESPTUN_IKE_CASES,
# ESPTUN_IKE_LOGDIR, ESPTUN_IKE_SW_ESP_LOG).
"""esptun-client against strongSwan as a road-warrior gateway (case 10)."""

import ipaddress
import json
import os
import re
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
import strongswan  # noqa: E402
import sw_pair  # noqa: E402
import transfer as transfer_lib  # noqa: E402
from netns import TestError  # noqa: E402
from esptun_ike import PEER  # noqa: E402
from sw_pair import (  # noqa: E402
    A_UL, B_UL, ESTABLISH_TIMEOUT, GCM_CHILD, GCM_IKE, PSK, XFER_TIMEOUT, ping, Site, start_pair,
    wait_esptun_established)

# Charon as a road-warrior gateway. The client asks for RW_ALLOWED, charon
# offers only RW_NET (RW_HOST on its lo) and a virtual IP of RW_POOL.
RW_ID = "carol@esptun.test"
RW_POOL_NAME, RW_POOL, RW_DNS = "rw", "10.66.0.0/24", "10.66.0.53"
RW_NET, RW_HOST, RW_ALLOWED = "10.88.1.0/24", "10.88.1.1", "10.88.0.0/16"
RW_XFER_BYTES = 100 * 1000 * 1000
RW_RELEASE_TIMEOUT = 5  # s from the client's SIGTERM to charon's lease offline

CASES = [
    dict(num=10,
         title=f"road warrior: esptun-client ({RW_ID}) gets a virtual IP and DNS from charon's "
               f"pool; charon narrows {RW_ALLOWED} to {RW_NET}; 100 MB client -> {RW_HOST}",
         kind="roadwarrior", initiator="esptun", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128gcm16", sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
]


# ---------------------------------------------------------------------------
# Case 10: esptun-client as a road warrior of charon (virtual IP and DNS from
# a pool, traffic selectors narrowed by charon).

def _ipv4_ranges(items):
    """_ipv4_ranges() - traffic selectors as a set of (first, last) IPv4 ints.
    Takes "10.88.1.0/24", "10.88.1.0-10.88.1.255", "10.88.1.1" (possibly with
    protocol/port text around them, e.g. "10.88.1.0/24[tcp/80]" or
    "10.88.1.0/24 proto 0 ports 0-65535"): the first address (range or
    prefix) of each string counts. None when an item has no IPv4 address."""
    rx = re.compile(r"(\d+\.\d+\.\d+\.\d+)(?:/(\d+)|\s*-\s*(\d+\.\d+\.\d+\.\d+))?")
    out = set()
    for item in items or []:
        m = rx.search(str(item))
        if not m:
            return None
        try:
            if m.group(2) is not None:
                net = ipaddress.ip_network(f"{m.group(1)}/{m.group(2)}", strict=False)
                out.add((int(net.network_address), int(net.broadcast_address)))
            else:
                lo = int(ipaddress.ip_address(m.group(1)))
                hi = int(ipaddress.ip_address(m.group(3))) if m.group(3) else lo
                out.add((lo, hi))
        except ValueError:
            return None
    return out


def route_dests(ns, dev):
    """route_dests() - (destinations of `ip -4 route show dev DEV`, its text)."""
    text = ns.ip("-4", "route", "show", "dev", dev, check=False).stdout
    return [ln.split()[0] for ln in text.splitlines() if ln.strip()], text.strip()


def build_rw_case(ctx, idx, case):
    """A: esptun-client (no addresses, peer "sw" with allowed_ips RW_ALLOWED);
    B: charon with a pool, local_ts RW_NET (RW_HOST on lo), remote_ts dynamic.
    Returns (A, B, client config path)."""
    key = f"{idx}"
    a = netns.Netns(netns.unique("ikesw", f"{key}-a"))
    b = netns.Netns(netns.unique("ikesw", f"{key}-b"))
    netns.veth(a, b, "swa", "swb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    # charon's route to the virtual IP (table 220, via ipsec0) takes its
    # source from local_ts: RW_HOST must exist in B.
    b.ip("addr", "add", f"{RW_HOST}/32", "dev", "lo")
    A, B = Site("A", a), Site("B", b)
    A.tun = f"ikc{os.getpid() % 100000}x{idx}"
    tunnel = {
        "interface": A.tun,
        # no addresses: the client asks charon for one
        "listen": "0.0.0.0:4500",
        "local_id": RW_ID,
        "tun_io": "direct",
        "control_socket": os.path.join(ctx.tmp, f"c{key}.sock"),
        "state_dir": os.path.join(ctx.tmp, f"state-c{key}"),
    }
    peer = dict(name=PEER, endpoint=f"{B_UL}:4500", allowed_ips=[RW_ALLOWED], psk=PSK,
                remote_id="b.sw", ike_proposals=[case["ike"]], esp_proposals=[case["esp"]])
    path = esptun_conf.write_private(os.path.join(ctx.tmp, f"c{key}.toml"),
                                     esptun_conf.render_ike_config(tunnel, [peer]))
    cfg = strongswan.pair_config("b", remote_addr="%any", local_ts=RW_NET, remote_ts="dynamic",
                                 remote_id=RW_ID, ike_proposals=case["sw_ike"],
                                 esp_proposals=case["sw_esp"], start_action="none",
                                 pools={RW_POOL_NAME: {"addrs": RW_POOL, "dns": RW_DNS}})
    if os.environ.get("ESPTUN_IKE_SW_ESP_LOG"):
        cfg.esp_log_level = int(os.environ["ESPTUN_IKE_SW_ESP_LOG"])
    B.charon = strongswan.Charon(b, os.path.join(ctx.tmp, f"sw-b{key}"), cfg, tag="B")
    return A, B, path


def rw_lease(charon):
    """rw_lease() - (pool dict, RW_ID's lease dict or None) from charon's
    --list-pools --leases."""
    pool = charon.list_pools().get(RW_POOL_NAME) or {}
    lease = next((x for x in pool.get("leases") or [] if x.get("identity") == RW_ID), None)
    return pool, lease


def rw_charon_lines(charon):
    """What charon logged about the road warrior: the IKE_AUTH request and
    response (configuration payloads, TS), the virtual IP and the
    CHILD_SA's selectors."""
    pats = [("IKE_AUTH request (client -> charon)", r"parsed IKE_AUTH request"),
            ("IKE_AUTH response (charon -> client)", r"generating IKE_AUTH response"),
            ("virtual IP requested", r"peer requested virtual IP"),
            ("virtual IP assigned", r"assigning virtual IP"),
            ("DNS attribute", r"building INTERNAL_IP4_DNS"),
            ("CHILD_SA", r"CHILD_SA \S+ established")]
    out = []
    for what, rx in pats:
        line = charon.log_search(rx)
        out.append(f"{what}: {line.split(']', 1)[-1].strip() if line else '(not logged)'}")
    # cfg level 2: "selecting traffic selectors for us:" / "for other:", each
    # followed by " config: X, received: Y => match: Z" (TSr, then TSi).
    lines = charon.log_text().splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"selecting traffic selectors for (us|other):", line)
        if m:
            picked = []
            for ln in lines[i + 1:i + 6]:  # its own " config: ..." lines, up to the next header
                body = ln.split("]", 1)[-1].strip()
                body = re.sub(r"^<[^>]*>\s*", "", body)
                if not body.startswith("config:"):
                    break
                picked.append(body)
            out.append(f"{'TSr' if m.group(1) == 'us' else 'TSi'} ({m.group(1)}): "
                       f"{'; '.join(picked) or '(no match line)'}")
    return out


def run_roadwarrior_case(rep, ctx, idx, case):
    tag = f"case {idx + 1}"
    A, B, path = build_rw_case(ctx, idx, case)
    A.ep = esptun_proc.Endpoint(ctx.build, A.ns, path, os.path.join(ctx.tmp, f"c{idx}.log"),
                                role="client")
    ctx.logs += [A.ep.log, B.charon.log]
    ctx.configs.append(path)
    p = esptun_proc.run_check(ctx.build, path, "esptun-client")
    out = (p.stdout + p.stderr).strip()
    with open(path) as f:
        text = f.read()
    rep.check(p.returncode == 0, "esptun-client check accepts the road-warrior config (no "
              "[tunnel] addresses, peer with endpoint, allowed_ips 10.88.0.0/16)" +
              ("" if p.returncode == 0 else
               f" (exit {p.returncode}): {out.splitlines()[0] if out else '(no output)'}"),
              f"config {path}:\n{text}\nfull output:\n{out}")
    try:
        t0 = start_pair(rep, A, B, path, "esptun-client up", TestError)
        rw_established(rep, tag, case, A, B, t0)
        rw_routes(rep, tag, A)
        ping(rep, tag, A, RW_HOST)
        if A.vip:  # charon's route to it: table 220 via ipsec0, source RW_HOST
            ping(rep, tag, B, A.vip)
        sent, got, secs = transfer_lib.run(A.ns, B.ns, RW_HOST, 5201, RW_XFER_BYTES,
                                           XFER_TIMEOUT)
        transfer_lib.check(rep, f"[{tag}] {RW_XFER_BYTES // 1000000} MB TCP client -> {RW_HOST}",
                           sent, got, RW_XFER_BYTES, secs)
        rep.check((got or {}).get("peer") == A.vip,
                  f"[{tag}] the receiver at {RW_HOST} sees the client's virtual IP {A.vip} as "
                  f"the source ({(got or {}).get('peer')})", f"receiver {got}")
        now = B.charon.established()
        ch = now[1] if now else None
        rep.check(ch is not None and ch.spi_in == A.sw_child.spi_in
                  and ch.bytes_in >= RW_XFER_BYTES,
                  f"[{tag}] strongSwan's CHILD_SA {A.sw_child.spi_in:08x} carried the transfer "
                  f"({ch.bytes_in if ch else 0} bytes in)",
                  json.dumps(ch.raw) if ch else B.charon.list_sas_text())
    finally:
        rw_stop(rep, tag, A, B)


def rw_established(rep, tag, case, A, B, t0):
    """Both sides established; the virtual IP on the tun, in the client's
    status, in charon's SA and lease; DNS; selectors; SPIs crosswise."""
    e_ike, e_kids, where = wait_esptun_established(rep, tag, A, who="esptun-client")
    rep.check(str(e_ike.get("state", "")).lower() == "established" and bool(e_kids),
              f"[{tag}] esptun-client: IKE SA of {PEER!r} established "
              f"({time.monotonic() - t0:.2f} s after start), {len(e_kids)} CHILD_SA(s)")
    sw_ike, sw_child = B.charon.wait_established(ESTABLISH_TIMEOUT)
    A.sw_child = sw_child
    rep.check(sw_ike.state == "ESTABLISHED" and not sw_ike.initiator
              and sw_ike.remote_id == RW_ID and sw_ike.local == f"{B_UL}:4500"
              and sw_ike.remote.startswith(f"{A_UL}:"),
              f"[{tag}] strongSwan: IKE_SA ESTABLISHED as responder, {sw_ike.local_id} <-> "
              f"{sw_ike.remote_id} ({sw_ike.local} <-> {sw_ike.remote})", json.dumps(sw_ike.raw))
    for field, want in case["expect_ike"].items():
        rep.equal(getattr(sw_ike, field), want, f"[{tag}] strongSwan IKE_SA {field}")
    for field, want in case["expect_child"].items():
        rep.equal(getattr(sw_child, field), want, f"[{tag}] strongSwan CHILD_SA {field}")

    # The virtual IP: charon's view (SA and lease), the client's status, its tun.
    vips = sw_ike.remote_vips
    vip = vips[0] if len(vips) == 1 else None
    in_pool = vip is not None and \
        ipaddress.ip_address(vip) in ipaddress.ip_network(RW_POOL)
    rep.check(in_pool, f"[{tag}] strongSwan list-sas: remote-vips {vips} is one address of "
              f"pool {RW_POOL_NAME} {RW_POOL}", json.dumps(sw_ike.raw))
    A.vip = vip
    pool, lease = rw_lease(B.charon)
    rep.check(lease is not None and lease.get("address") == vip
              and lease.get("status") == "online" and pool.get("online") == 1,
              f"[{tag}] strongSwan list-pools --leases: {RW_ID} holds {vip} online "
              f"(pool {RW_POOL_NAME}: {pool.get('online')} online, {pool.get('offline')} offline)",
              B.charon.list_pools_text())
    st = A.ep.status()
    sa = e_ike
    e_vips = [str(x).split("/")[0] for x in sa.get("virtual_ips") or []]
    rep.check(vip is not None and e_vips == [vip],
              f"[{tag}] esptun-client status: ike.sas[].virtual_ips {sa.get('virtual_ips')} == "
              f"charon's remote-vips [{vip}]", json.dumps(sa)[:1500])
    addrs = A.ns.inet_addrs(A.tun)
    rep.check(vip is not None and addrs == [(vip, 32)],
              f"[{tag}] `ip -j addr show dev {A.tun}`: exactly {vip}/32 (the address charon "
              f"assigned)", f"IPv4 addresses {addrs}")
    dns = [str(x) for x in sa.get("dns") or []]
    rep.check(dns == [RW_DNS],
              f"[{tag}] esptun-client status: ike.sas[].dns {sa.get('dns')} == [{RW_DNS}] "
              f"(charon's pool dns)", json.dumps(sa)[:1500])
    ike_top = st.get("ike") if isinstance(st.get("ike"), dict) else {}
    if "dns_applied" in ike_top:
        rep.info(f"esptun-client: ike.dns_applied = {ike_top['dns_applied']!r}")

    # Selectors: charon narrowed the client's 10.88.0.0/16 to its local_ts.
    rep.check(sw_child.local_ts == [RW_NET] and sw_child.remote_ts == [f"{vip}/32"],
              f"[{tag}] strongSwan CHILD_SA selectors {sw_child.local_ts} === "
              f"{sw_child.remote_ts} (want [{RW_NET}] === [{vip}/32])", json.dumps(sw_child.raw))
    match = [c for c in e_kids if c["spi_in"] == sw_child.spi_out
             and c["spi_out"] == sw_child.spi_in]
    rep.check(len(match) == 1,
              f"[{tag}] CHILD SPIs crosswise: esptun in {sw_child.spi_out:08x} = strongSwan out, "
              f"esptun out {sw_child.spi_in:08x} = strongSwan in (from {where})",
              f"esptun children {json.dumps(e_kids)}")
    child = match[0] if match else (e_kids[0] if e_kids else {})
    if "cipher" in child:
        rep.equal(child.get("cipher"), case["cipher"], f"[{tag}] esptun CHILD_SA cipher")
    if "local_ts" in child or "remote_ts" in child:
        lts, rts = child.get("local_ts"), child.get("remote_ts")
        want_l = _ipv4_ranges([f"{vip}/32"]) if vip else None
        rep.check(_ipv4_ranges(lts if isinstance(lts, list) else [lts]) == want_l
                  and _ipv4_ranges(rts if isinstance(rts, list) else [rts])
                  == _ipv4_ranges([RW_NET]),
                  f"[{tag}] esptun-client status: CHILD_SA local_ts {lts} === remote_ts {rts} "
                  f"(want {vip}/32 === {RW_NET}, the narrowed selectors)", json.dumps(child))
    else:
        rep.info("esptun-client's status has no children[].local_ts/remote_ts (yet)")
    for line in rw_charon_lines(B.charon):
        rep.info(f"charon: {line}")


def rw_routes(rep, tag, A):
    """The client routes the narrowed selector, not its wider allowed_ips."""
    dests, text = route_dests(A.ns, A.tun)
    rep.check(RW_NET in dests,
              f"[{tag}] client routes the narrowed selector {RW_NET} via {A.tun} "
              f"(`ip -4 route show dev {A.tun}`: {dests})", text or "(no routes)")
    rep.check(RW_ALLOWED not in dests and set(dests) <= {RW_NET},
              f"[{tag}] client does not route its configured {RW_ALLOWED} (nor anything but "
              f"{RW_NET}) via {A.tun} (routes: {dests})", text or "(no routes)")


def rw_stop(rep, tag, A, B):
    """SIGTERM to the client: exit 0, tun and its routes gone; charon drops the
    IKE_SA and the lease goes offline within RW_RELEASE_TIMEOUT; then charon."""
    try:
        if A.ep.alive():
            t_stop = time.monotonic()
            rc = A.ep.stop()
            rep.equal(rc, 0, f"[{tag}] esptun-client: SIGTERM -> exit code")
            links = A.ns.links()
            left = [ln for ln in (A.ns.ip("-4", "route", "show").stdout +
                                  A.ns.ip("-4", "addr", "show").stdout).splitlines()
                    if "10.88." in ln or "10.66." in ln]
            rep.check(A.tun not in links and not left,
                      f"[{tag}] esptun-client's tun {A.tun} removed, with its address and routes",
                      f"links {links}, left over: {left}")
            if B.charon.alive() and getattr(A, "vip", None):
                def released():
                    pool, lease = rw_lease(B.charon)
                    gone = not [s for s in B.charon.list_sas() if s.remote_id == RW_ID]
                    ok = gone and pool.get("online") == 0 and lease is not None \
                        and lease.get("status") == "offline"
                    return (pool, lease) if ok else None
                try:
                    netns.wait_until(released, RW_RELEASE_TIMEOUT, interval=0.1,
                                     what="charon to drop the IKE_SA and release the lease")
                    ok = True
                except TestError:
                    ok = False
                rep.check(ok, f"[{tag}] strongSwan: no IKE_SA of {RW_ID} and its lease of "
                          f"{A.vip} offline (pool online 0) within {RW_RELEASE_TIMEOUT} s of the "
                          f"SIGTERM ({time.monotonic() - t_stop:.1f} s)",
                          f"{B.charon.list_pools_text()}\n{B.charon.list_sas_text()}")
                line = B.charon.log_search(r"received DELETE for IKE_SA")
                rep.check(line is not None, f"[{tag}] strongSwan logs esptun-client's Delete: "
                          f"{line.split(']', 1)[-1].strip() if line else None!r}",
                          netns.tail(B.charon.log, 15))
        elif A.ep.proc:
            A.ep.stop()
    except TestError as e:
        rep.check(False, f"[{tag}] stopping esptun-client: {str(e).splitlines()[0]}",
                  str(e)[:1000])
    finally:
        if B.charon.proc:
            was_alive = B.charon.alive()
            rc = B.charon.stop()
            if was_alive:
                rep.equal(rc, 0, f"[{tag}] charon: SIGTERM -> exit code")


def body(rep, build):
    sw_pair.run_cases(rep, build, CASES, runners={"roadwarrior": run_roadwarrior_case})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_rw", body, tools=sw_pair.TOOLS)
