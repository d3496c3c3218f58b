# sw_pair.py - the frame of the IKEv2 interop tests against strongSwan 5.9
# (tests/netns/test_ike_strongswan*.py): esptun-gateway against charon with
# its userspace ESP (kernel-libipsec), each in its own namespace; PSK, IKE in
# UDP 500/4500, ESP in UDP 4500. Every case gets fresh namespaces and daemons.
#
#   netns A (et-ikesw-PID-N-a)                netns B (et-ikesw-PID-N-b)
#  +-----------------------------------+     +-----------------------------------+
#  | tun ikaN  10.88.0.1/32            |     | ipsec0 (charon's libipsec tun)    |
#  |   route 10.88.0.2/32 -> tun       |     |   table 220: 10.88.0.1 via ipsec0 |
#  |                                   |     |   src 10.88.0.2 (on lo)           |
#  | esptun-gateway                    |     | charon (own /run, own VICI socket)|
#  |   peer "sw": remote_id b.sw       |     |   conn "ab": local_id b.sw        |
#  |   local_id a.sw, PSK              |     |   remote_id a.sw, PSK, mobike=no  |
#  |   IKE :500 (ike_port) and :4500   |     |   IKE :500 -> floats to :4500     |
#  |                                   |     |   (libipsec always encapsulates)  |
#  | swa 192.168.88.1/24 ------------ veth ------------ swb 192.168.88.2/24     |
#  +-----------------------------------+     +-----------------------------------+
#
# Both sides are asserted: strongSwan's `swanctl --list-sas` (states,
# algorithms, traffic selectors, ports) and esptun's status JSON (the IKE SA
# of peer "sw" in peers[].ike or in ike.sas[] with "peer": "sw": its state,
# initiator, spi_i/spi_r, and children[].spi_in/spi_out/cipher/esn), with the
# IKE SPIs equal and the CHILD SPIs crosswise equal (our in = their out).
#
#
# run_cases() runs a script's cases: build_case() makes the namespaces and
# both configs, run_case() starts charon then esptun, checks both sides
# established (assert_established) and pings both ways, then runs the case's
# own body (case key "kind", from the script's `bodies`) or its 100 MB
# transfer, and stop_both() stops esptun (exit 0, tun gone) and charon.
# Cases keep their number ("num") across the scripts, in names and report tags.
#
# Environment (diagnostics): ESPTUN_IKE_CASES=5,7 runs only those cases (of
# the script run); ESPTUN_IKE_LOGDIR=DIR keeps every log there;
# ESPTUN_IKE_SW_ESP_LOG=2 makes charon log every ESP packet (and drops for
# unknown SPIs, at level 2 only).
"""The esptun <-> strongSwan pair: set-up, checks, the case runner."""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import esptun_conf
import esptun_proc
import load_helpers
import netns
import ping as ping_lib
import strongswan
import transfer as transfer_lib
from esptun_ike import PEER, esptun_established, esptun_ike, esptun_ike_config, esptun_sas, \
    find_key, sa_brief, spi_value
from netns import TestError

XFER_BYTES = 100 * 1000 * 1000
XFER_TIMEOUT = 60  # ~2-3 s expected through strongSwan's userspace ESP
ESTABLISH_TIMEOUT = 15
A_UL, B_UL = strongswan.UNDERLAY_A, strongswan.UNDERLAY_B
A_IN, B_IN = strongswan.INNER_A, strongswan.INNER_B
PSK = strongswan.PSK
WRONG_PSK = "this-is-not-the-psk-strongswan-has-42"
GCM_IKE = {"encr_alg": "AES_GCM_16", "encr_keysize": 128, "prf_alg": "PRF_HMAC_SHA2_256",
           "dh_group": "CURVE_25519"}
GCM_CHILD = {"encr_alg": "AES_GCM_16", "encr_keysize": 128, "integ_alg": "", "esn": False}
# Case 9: the relay's addresses (A's side, B's side) and B's underlay there.
RELAY_A, RELAY_B, COLL_B_UL = "192.168.88.3", "192.168.89.3", "192.168.89.2"
COLL_DELAY = 0.4  # s, one way
# 5.9 logs "inbound CHILD_SA net{N} established" and "outbound ..." for one
# CHILD_SA when it delays the outbound SA (responder of a rekey): count N once.
SW_CHILD_RX = re.compile(r"CHILD_SA \S+\{(\d+)\} established with SPIs")
TOOLS = ("ip", "ping", "timeout", "unshare", "mount")
MAX_UNKNOWN_SPI = 5  # "a handful": make-before-break should lose none
MAX_ESP_AUTH_FAILED = 5
SETTLE_TIMEOUT = 10  # rekeys every ~6 s: a quiet moment comes well within this


# ---------------------------------------------------------------------------

class Site:
    def __init__(self, name, ns):
        self.name, self.ns = name, ns
        # B: strongSwan's IKE_SA ends as it sees them (case 9: through the relay).
        self.sw_local, self.sw_remote = f"{B_UL}:4500", f"{A_UL}:4500"
        self.relay = None  # case 9 (A only): the relay process, its namespace and log


def ping(rep, tag, src, dst, count=3, expect=True):
    res = ping_lib.run(src.ns, dst, count=count)
    if expect:
        return ping_lib.expect_replies(rep, f"[{tag}] ping {src.name} -> {dst}", res, count)
    return ping_lib.expect_no_reply(rep, f"[{tag}] ping {src.name} -> {dst} fails", res)


def transfer(rep, tag, src, dst, dst_addr):
    sent, got, secs = transfer_lib.run(src.ns, dst.ns, dst_addr, 5201, XFER_BYTES, XFER_TIMEOUT)
    transfer_lib.check(rep, f"[{tag}] {XFER_BYTES // 1000000} MB TCP {src.name} -> {dst.name} "
                       f"({dst_addr})", sent, got, XFER_BYTES, secs)


def start_relay(ctx, key, a, b):
    """Case 9: netns R between A and B (two veths, two subnets) running
    udp_relay.delay_main with COLL_DELAY each way on UDP 4500, logging the
    IKE messages it carries. Returns (R, process, IKE log path)."""
    r = netns.Netns(netns.unique("ikesw", f"{key}-r"))
    netns.veth(a, r, "swa", "rla", [f"{A_UL}/24"], [f"{RELAY_A}/24"])
    netns.veth(r, b, "rlb", "swb", [f"{RELAY_B}/24"], [f"{COLL_B_UL}/24"])
    log = os.path.join(ctx.tmp, f"relay{key}.log")
    proc = r.spawn("/usr/bin/python3", load_helpers.SELF, "--delay-relay",
                   f"{RELAY_A}:4500", f"{A_UL}:4500",
                   f"{RELAY_B}:4500", f"{COLL_B_UL}:4500", "--delay", str(COLL_DELAY),
                   "--ike-log", log, stdout=subprocess.PIPE, text=True)
    line = netns.read_line(proc.stdout, 10)
    if not line or not json.loads(line).get("ready"):
        netns.stop_process(proc)
        raise TestError(f"the delay relay did not start: {line!r}")
    return r, proc, log


def build_case(ctx, idx, case, attempt=0):
    """Namespaces, the veth (case 9: the relay), B's inner address, both
    configs. Returns (A, B, esptun config path). attempt > 0: a repeated run
    of the case (fresh names and files)."""
    key = f"{idx}" if not attempt else f"{idx}r{attempt}"
    a = netns.Netns(netns.unique("ikesw", f"{key}-a"))
    b = netns.Netns(netns.unique("ikesw", f"{key}-b"))
    relay = None
    if case.get("relay"):
        relay = start_relay(ctx, key, a, b)
    else:
        netns.veth(a, b, "swa", "swb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    # charon's route (table 220, via ipsec0) takes its source from local_ts:
    # that address must exist in B (no 'dummy' link type on this kernel: lo).
    b.ip("addr", "add", f"{B_IN}/32", "dev", "lo")
    A, B = Site("A", a), Site("B", b)
    A.relay = relay
    sfx = f"{os.getpid() % 100000}x{idx}"
    # Cases 1-4 set no rekey_time / ike_rekey_time (strongSwan's defaults
    # are hours, esptun may leave rekeying to the peer); 5-9 set their own
    # timers (case keys rekey_time, ike_rekey_time, dpd_interval, sw_cfg).
    peer = dict(name=PEER, allowed_ips=[f"{B_IN}/32"],
                remote_id="b.sw", ike_proposals=[case["ike"]], esp_proposals=[case["esp"]],
                dpd_interval=case.get("dpd_interval", 30),
                rekey_time=case.get("rekey_time"), ike_rekey_time=case.get("ike_rekey_time"),
                allow_weak=case.get("allow_weak"),
                ike_fragment_size=case.get("ike_fragment_size"))
    if case["initiator"] == "esptun":
        # initiate defaults to true with an endpoint
        peer["endpoint"] = f"{RELAY_A if relay else B_UL}:4500"
    psk = WRONG_PSK if case.get("wrong_psk") else PSK
    if case.get("psk_file"):
        peer["psk_file"] = esptun_conf.write_private(os.path.join(ctx.tmp, f"a{key}.psk"), psk + "\n")
    else:
        peer["psk"] = psk
    text = esptun_ike_config(f"ika{sfx}", os.path.join(ctx.tmp, f"a{key}.sock"),
                             os.path.join(ctx.tmp, f"state-a{key}"), peer)
    path = esptun_conf.write_private(os.path.join(ctx.tmp, f"a{key}.toml"), text)
    A.tun = f"ika{sfx}"
    addrs = {}
    if relay:  # charon talks to the relay's B side
        addrs = dict(local_addr=COLL_B_UL, remote_addr=RELAY_B)
        B.sw_local, B.sw_remote = f"{COLL_B_UL}:4500", f"{RELAY_B}:4500"
    cfg = strongswan.pair_config("b", ike_proposals=case["sw_ike"], esp_proposals=case["sw_esp"],
                                 start_action="none", **addrs, **case.get("sw_cfg", {}))
    if os.environ.get("ESPTUN_IKE_SW_ESP_LOG"):  # diagnostics: 2 logs every ESP packet
        cfg.esp_log_level = int(os.environ["ESPTUN_IKE_SW_ESP_LOG"])
    B.charon = strongswan.Charon(b, os.path.join(ctx.tmp, f"sw-b{key}"), cfg, tag="B")
    return A, B, path


class EsptunDown(TestError):
    """esptun-gateway run exited before its control socket answered."""


def start_pair(rep, A, B, path, what, error):
    """charon first (listening and loaded before esptun may initiate), then
    esptun; error(...) with esptun's last log line when it does not come up.
    Returns when the two were started (time.monotonic())."""
    t0 = time.monotonic()
    B.charon.start()
    try:
        A.ep.start()
    except TestError as e:
        lines = netns.tail(A.ep.log, 5).strip().splitlines()
        raise error(f"{what} -c {os.path.basename(path)} did not come up: "
                    f"{lines[-1] if lines else str(e).splitlines()[0]}\n{e}")
    rep.info(f"charon and {what.split()[0]} up in {time.monotonic() - t0:.2f} s")
    return t0


def check_esptun_accepts(rep, ctx, path):
    """`esptun-gateway check` on the first case's config, with esptun's own
    words and the config when it says no. Returns True when accepted."""
    p = esptun_proc.run_check(ctx.build, path)
    out = (p.stdout + p.stderr).strip()
    with open(path) as f:
        text = f.read()
    return rep.check(p.returncode == 0,
                     "esptun-gateway check accepts the IKE peer config" +
                     ("" if p.returncode == 0 else
                      f" (exit {p.returncode}): {out.splitlines()[0] if out else '(no output)'}"),
                     f"config {path}:\n{text}\nfull output:\n{out}")


def first_init_port(charon):
    """first_init_port() - the UDP port the first IKE_SA_INIT request went to,
    from strongSwan's NET log lines (as responder: the packet received before
    "parsed IKE_SA_INIT request"; as initiator: the one sent after
    "generating IKE_SA_INIT request")."""
    rx = re.compile(r"(received|sending) packet: from \S+\[\d+\] to \S+\[(\d+)\]")
    last, want_next = None, False
    for line in charon.log_text().splitlines():
        m = rx.search(line)
        if m:
            if want_next and m.group(1) == "sending":
                return int(m.group(2))
            last = m
        elif "parsed IKE_SA_INIT request" in line and last and last.group(1) == "received":
            return int(last.group(2))
        elif "generating IKE_SA_INIT request" in line:
            want_next = True
    return None


def wait_esptun_established(rep, tag, A, who="esptun"):
    """wait_esptun_established() - (ike, children, where) once A's status
    shows the IKE SA of PEER established with a CHILD_SA; on a time-out a
    failed check with the status and the log's tail, then TestError."""
    try:
        return netns.wait_until(lambda: esptun_established(A.ep), ESTABLISH_TIMEOUT, interval=0.1,
                                what=f"{who}'s status to show the IKE SA established with a CHILD_SA")
    except TestError as e:
        st = A.ep.status_or_empty()
        rep.check(False, f"[{tag}] {who}: IKE SA of {PEER!r} (peers[].ike or ike.sas[]) established "
                  f"with a CHILD_SA within {ESTABLISH_TIMEOUT} s ({str(e).splitlines()[0]})",
                  json.dumps({"peer": esptun_proc.peer(st, PEER), "ike": st.get("ike")})[:2000]
                  + f"\nlog:\n{netns.tail(A.ep.log, 15)}")
        raise


def assert_established(rep, tag, case, A, B):
    """Both sides established; algorithms, selectors, ports; SPIs crosswise."""
    sw_ike, sw_child = B.charon.wait_established(ESTABLISH_TIMEOUT)
    e_ike, e_kids, where = wait_esptun_established(rep, tag, A)
    sw_is_init = case["initiator"] == "strongswan"
    rep.check(sw_ike.state == "ESTABLISHED" and sw_ike.initiator == sw_is_init,
              f"[{tag}] strongSwan: IKE_SA ESTABLISHED as "
              f"{'initiator' if sw_is_init else 'responder'}, "
              f"{sw_ike.local_id} <-> {sw_ike.remote_id}", json.dumps(sw_ike.raw))
    rep.check(sw_ike.local == B.sw_local and sw_ike.remote == B.sw_remote,
              f"[{tag}] strongSwan: IKE on UDP 4500 both ends ({sw_ike.local} <-> "
              f"{sw_ike.remote})", json.dumps(sw_ike.raw))
    for field, want in case["expect_ike"].items():
        rep.equal(getattr(sw_ike, field), want, f"[{tag}] strongSwan IKE_SA {field}")
    for field, want in case["expect_child"].items():
        rep.equal(getattr(sw_child, field), want, f"[{tag}] strongSwan CHILD_SA {field}")
    rep.check(sw_child.protocol == "ESP" and sw_child.mode == "TUNNEL" and sw_child.encap,
              f"[{tag}] strongSwan CHILD_SA: ESP, tunnel mode, in UDP", json.dumps(sw_child.raw))
    rep.check(sw_child.local_ts == [f"{B_IN}/32"] and sw_child.remote_ts == [f"{A_IN}/32"],
              f"[{tag}] strongSwan CHILD_SA selectors {sw_child.local_ts} === "
              f"{sw_child.remote_ts} (esptun's 0.0.0.0/0 narrowed to {A_IN}/32)",
              json.dumps(sw_child.raw))

    match = [c for c in e_kids if c["spi_in"] == sw_child.spi_out
             and c["spi_out"] == sw_child.spi_in]
    rep.check(len(match) == 1,
              f"[{tag}] CHILD SPIs crosswise: esptun in {sw_child.spi_out:08x} = strongSwan out, "
              f"esptun out {sw_child.spi_in:08x} = strongSwan in (from {where})",
              f"esptun children {json.dumps(e_kids)}, strongSwan in {sw_child.spi_in:08x} "
              f"out {sw_child.spi_out:08x}")
    child = match[0] if match else (e_kids[0] if e_kids else {})
    if "cipher" in child:
        rep.equal(child.get("cipher"), case["cipher"], f"[{tag}] esptun CHILD_SA cipher")
    else:
        rep.info(f"esptun reports no children[].cipher (expected {case['cipher']!r})")
    if "esn" in child:
        rep.equal(bool(child.get("esn")), case["esn"], f"[{tag}] esptun CHILD_SA esn")
    # IKE SPIs: compare when esptun reports them (IkeSaStatus has spi_i/spi_r).
    pair = next(((e_ike[i], e_ike[r]) for i, r in (("spi_i", "spi_r"),
                                                   ("initiator_spi", "responder_spi"))
                 if i in e_ike and r in e_ike), None)
    if pair:
        got = (spi_value(pair[0]), spi_value(pair[1]))
        rep.check(got == (sw_ike.spi_i, sw_ike.spi_r),
                  f"[{tag}] IKE SPIs agree: i {sw_ike.spi_i:016x} r {sw_ike.spi_r:016x}",
                  f"esptun {pair}, strongSwan {sw_ike.spi_i:016x}/{sw_ike.spi_r:016x}")
    else:
        rep.info("esptun reports no IKE SPIs (looked for ike.spi_i/spi_r)")
    if "initiator" in e_ike:
        rep.equal(bool(e_ike["initiator"]), not sw_is_init, f"[{tag}] esptun ike.initiator")
    rep.info(f"the first IKE_SA_INIT went to UDP port {first_init_port(B.charon)} "
             f"({'strongSwan starts at 500' if sw_is_init else 'esptun: 4500 by design'})")
    return sw_child


def assert_auth_failure(rep, tag, A, B):
    """Wrong PSK: both logs say so, no SA on either side, no traffic."""
    rx_e = re.compile(r"authentication failed", re.IGNORECASE)
    rx_peer = re.compile(rf"\b{re.escape(PEER)}\b")

    def esptun_line():
        with open(A.ep.log, errors="replace") as f:
            return next((ln for ln in f if rx_e.search(ln) and rx_peer.search(ln)), None)
    try:
        line = netns.wait_until(esptun_line, ESTABLISH_TIMEOUT, interval=0.1,
                                what="esptun's authentication failure log line")
    except TestError:
        line = None
    rep.check(line is not None,
              f"[{tag}] esptun logs /authentication failed/i naming peer {PEER!r}: "
              f"{line.strip() if line else None!r}", netns.tail(A.ep.log, 20))
    sw_line = B.charon.log_search(r"MAC mismatched")
    rep.check(sw_line is not None, f"[{tag}] strongSwan logs its own auth failure: "
              f"{sw_line.strip() if sw_line else None!r}", netns.tail(B.charon.log, 20))
    sas = B.charon.list_sas()
    rep.check(not [s for s in sas if s.state == "ESTABLISHED"],
              f"[{tag}] strongSwan list-sas: no ESTABLISHED IKE_SA",
              B.charon.list_sas_text())
    st = A.ep.status()
    ike, children, where = esptun_ike(st)
    rep.check(not children and str(ike.get("state", "")).lower() != "established",
              f"[{tag}] esptun status: no CHILD_SA and no established IKE SA for {PEER!r} "
              f"(ike.state {ike.get('state')!r})",
              json.dumps({"peer": esptun_proc.peer(st, PEER), "ike": st.get("ike")})[:2000])
    # An IKE auth_failed counter (IkeCounters), if the status has one in an
    # "ike" object (drops.auth_failed is ESP's ICV counter: not this).
    ike_trees = [st.get("ike"), esptun_proc.peer(st, PEER).get("ike")]
    counts = [v for t in ike_trees for v in find_key(t, "auth_failed") if isinstance(v, int)]
    if counts:
        rep.check(max(counts) >= 1, f"[{tag}] esptun counted it: ike ... auth_failed "
                  f"{max(counts)}", json.dumps(ike_trees)[:1000])
    else:
        rep.info("esptun's status has no IKE auth_failed counter (looked in ike and "
                 "peers[].ike)")
    ping(rep, tag, A, B_IN, count=2, expect=False)


def run_case(rep, ctx, idx, case, attempt=0):
    """One case (idx: its number - 1) with fresh namespaces and daemons; the
    case's "kind" picks its body from ctx.bodies. Returns what the body does."""
    tag = f"case {idx + 1}" + (f" run {attempt + 1}" if attempt else "")
    A, B, path = build_case(ctx, idx, case, attempt)
    key = f"{idx}" if not attempt else f"{idx}r{attempt}"
    A.ep = esptun_proc.Endpoint(ctx.build, A.ns, path, os.path.join(ctx.tmp, f"a{key}.log"))
    ctx.logs += [A.ep.log, B.charon.log] + ([A.relay[2]] if A.relay else [])
    ctx.configs.append(path)
    if not ctx.checked:  # the first case a script runs
        ctx.checked = True
        ctx.check_ok = check_esptun_accepts(rep, ctx, path)
    try:
        t0 = start_pair(rep, A, B, path, "esptun-gateway run", EsptunDown)
        if case["initiator"] == "strongswan":
            ok, out = B.charon.initiate(timeout=ESTABLISH_TIMEOUT)
            rep.check(ok, f"[{tag}] swanctl --initiate --child net succeeds",
                      out.strip()[-800:])
        if case.get("wrong_psk"):
            assert_auth_failure(rep, tag, A, B)
            return
        sw_child = assert_established(rep, tag, case, A, B)
        rep.info(f"established {time.monotonic() - t0:.2f} s after start")
        ping(rep, tag, A, B_IN)
        ping(rep, tag, B, A_IN)
        kind = case.get("kind")
        if kind:
            return ctx.bodies[kind](rep, tag, case, A, B)
        if case.get("transfer") == "a->b":
            transfer(rep, tag, A, B, B_IN)
        elif case.get("transfer") == "b->a":
            transfer(rep, tag, B, A, A_IN)
        if case.get("transfer"):
            now = B.charon.established()
            ch = now[1] if now else None
            moved = (ch.bytes_in if case["transfer"] == "a->b" else ch.bytes_out) if ch else 0
            rep.check(ch is not None and ch.spi_in == sw_child.spi_in and moved >= XFER_BYTES,
                      f"[{tag}] strongSwan's CHILD_SA {sw_child.spi_in:08x} carried the transfer "
                      f"({moved} bytes {'in' if case['transfer'] == 'a->b' else 'out'})",
                      json.dumps(ch.raw) if ch else B.charon.list_sas_text())
    finally:
        stop_both(rep, tag, case, A, B)
        if A.relay:
            A.relay_counts = stop_relay(A.relay[1])
            rep.info(f"relay counts: {json.dumps(A.relay_counts)}")


def stop_both(rep, tag, case, A, B):
    """esptun first (it should send a Delete; strongSwan's log tells), then charon."""
    try:
        if A.ep.alive():
            rc = A.ep.stop()  # proc.returncode is set from here on
            rep.equal(rc, 0, f"[{tag}] esptun-gateway: SIGTERM -> exit code")
            rep.check(A.tun not in A.ns.links(), f"[{tag}] esptun's tun {A.tun} removed",
                      str(A.ns.links()))
        elif A.ep.proc:
            A.ep.stop()  # already exited (the failure says why); closes the log
        if B.charon.alive() and A.ep.proc and A.ep.proc.returncode == 0 \
                and not case.get("wrong_psk"):
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and \
                    not B.charon.log_search(r"received DELETE for IKE_SA"):
                time.sleep(0.1)
            rep.info("strongSwan " + ("received esptun's Delete for the IKE SA on shutdown"
                                      if B.charon.log_search(r"received DELETE for IKE_SA")
                                      else "got no Delete from esptun within 2 s of its "
                                           "shutdown (not required)"))
    except TestError as e:
        rep.check(False, f"[{tag}] stopping esptun: {str(e).splitlines()[0]}", str(e)[:1000])
    finally:
        if B.charon.proc:
            was_alive = B.charon.alive()
            rc = B.charon.stop()
            if was_alive:
                rep.equal(rc, 0, f"[{tag}] charon: SIGTERM -> exit code")


def log_lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def settled_view(A, B):
    """settled_view() - (esptun SA, strongSwan IkeSa, strongSwan ChildSa, the
    esptun status answer the SA is from) when
    both sides show exactly one IKE SA of the pair, established, with exactly
    one CHILD_SA (sending / INSTALLED), IKE SPIs equal and CHILD SPIs
    crosswise, and esptun's view did not change while strongSwan was asked;
    else (None, description of what was seen)."""
    st1 = A.ep.status()
    sw = B.charon.list_sas()
    st2 = A.ep.status()
    e1, e2 = esptun_sas(st1), esptun_sas(st2)

    def sw_brief(i):
        kids = [(c.state, f"{c.spi_in:08x}/{c.spi_out:08x}") for c in i.children]
        return f"{i.state} {i.spi_i:016x}/{i.spi_r:016x} children {kids}"

    def key(sas):
        return [(s.get("state"), s.get("spi_i"), s.get("spi_r"),
                 [(c.get("spi_in"), c.get("spi_out"), c.get("sending"))
                  for c in s.get("children") or []]) for s in sas]
    seen = f"esptun: {[sa_brief(s) for s in e2]}; strongSwan: {[sw_brief(i) for i in sw]}"
    if key(e1) != key(e2) or len(e2) != 1 or e2[0].get("state") != "established":
        return None, seen
    kids = e2[0].get("children") or []
    if len(kids) != 1 or not kids[0].get("sending"):
        return None, seen
    if len(sw) != 1 or sw[0].state != "ESTABLISHED" or len(sw[0].children) != 1 \
            or sw[0].children[0].state != "INSTALLED":
        return None, seen
    ike, ch = sw[0], sw[0].children[0]
    if spi_value(e2[0].get("spi_i")) != ike.spi_i or spi_value(e2[0].get("spi_r")) != ike.spi_r:
        return None, seen
    if spi_value(kids[0].get("spi_in")) != ch.spi_out or \
            spi_value(kids[0].get("spi_out")) != ch.spi_in:
        return None, seen
    return (e2[0], ike, ch, st2), seen


def assert_settled(rep, tag, A, B, timeout=SETTLE_TIMEOUT):
    """Exactly one IKE SA and one CHILD_SA on both sides, SPIs agreeing.
    Returns (esptun SA, IkeSa, ChildSa) or None."""
    t0 = time.monotonic()
    last = ""
    while True:
        view, last = settled_view(A, B)
        if view or time.monotonic() - t0 > timeout:
            break
        time.sleep(0.2)
    if not view:
        rep.check(False, f"[{tag}] within {timeout} s: exactly one established IKE SA with one "
                  "CHILD_SA on both sides, IKE SPIs equal, CHILD SPIs crosswise", last)
        return None
    e, ike, ch, st = view
    view = (e, ike, ch)
    # The data path's view from the same status answer as the IKE SAs: a
    # later one may already show the next rekey (case 6 failed once so).
    p = esptun_proc.peer(st, PEER)
    out_spi = spi_value((p.get("sa_out") or {}).get("spi_hex"))
    ins = [spi_value(x.get("spi_hex")) for x in p.get("sas_in") or []]
    rep.check(out_spi == ch.spi_in and ch.spi_out in ins,
              f"[{tag}] esptun's data path sends on {ch.spi_in:08x} and takes {ch.spi_out:08x} "
              f"(peers[].sas_in: {len(ins)} inbound SA(s), sas_retiring {p.get('sas_retiring')})",
              json.dumps(p)[:1000])
    kids = e.get("children") or []
    rep.check(len(kids) == 1 and spi_value(e.get("spi_i")) == ike.spi_i
              and spi_value(e.get("spi_r")) == ike.spi_r
              and spi_value(kids[0].get("spi_in")) == ch.spi_out
              and spi_value(kids[0].get("spi_out")) == ch.spi_in and kids[0].get("sending"),
              f"[{tag}] one IKE SA ({ike.spi_i:016x}/{ike.spi_r:016x}) with one CHILD_SA "
              f"on both sides: esptun in {ch.spi_out:08x} = strongSwan out, esptun out "
              f"{ch.spi_in:08x} = strongSwan in, sending (settled after "
              f"{time.monotonic() - t0:.1f} s)", sa_brief(e))
    return view


def stop_relay(proc):
    """stop_relay() - SIGTERM the delay relay; its counts (or {})."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    try:
        return json.loads(out.strip().splitlines()[-1]) if out and out.strip() else {}
    except ValueError:
        return {}


def run_cases(rep, build, cases, bodies=None, runners=None):
    """run_cases() - the body of a test script: each case of `cases` (dicts
    with "num", "title" and the keys build_case and run_case read) in turn.
    bodies: {kind: body(rep, tag, case, A, B)} for run_case; runners: {kind:
    run(rep, ctx, idx, case)} for a case that is not run by run_case."""
    netns.require_environment(TOOLS)
    strongswan.require_tools()

    class Ctx:
        pass

    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.logs, ctx.configs = build, netns.make_tempdir("ikesw"), [], []
    ctx.check_ok, ctx.checked, ctx.bodies = True, False, bodies or {}

    def dump_logs():
        dump = re.compile(r"\[CFG\] {2,}")  # charon's config dump at load: noise here
        for log in ctx.logs:
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    lines = [ln for ln in f if not dump.search(ln)]
                print(f"\n--- {log}:\n{''.join(lines[-40:])}")
    rep.on_failure.append(dump_logs)
    keep = os.environ.get("ESPTUN_IKE_LOGDIR")
    if keep:  # diagnostics: copy every log before the temp folder goes
        def keep_logs():
            os.makedirs(keep, exist_ok=True)
            for log in ctx.logs:
                if os.path.exists(log):
                    rel = os.path.relpath(log, ctx.tmp).replace(os.sep, "_")
                    shutil.copy(log, os.path.join(keep, rel))
        netns.on_cleanup(keep_logs)

    only = os.environ.get("ESPTUN_IKE_CASES", "").strip()
    chosen = {int(x) for x in only.split(",") if x.strip()} if only else None
    for case in cases:
        idx = case["num"] - 1
        if chosen is not None and idx + 1 not in chosen:
            continue
        rep.section(f"case {idx + 1}: {case['title']}")
        t0 = time.monotonic()
        try:
            (runners or {}).get(case.get("kind"), run_case)(rep, ctx, idx, case)
        except TestError as e:
            first, _, rest = str(e).partition("\n")
            rep.check(False, f"[case {idx + 1}] {first}", rest.strip()[:2000])
            if isinstance(e, EsptunDown) and not ctx.check_ok:
                # check and run both refuse the IKE config: every case would
                # fail the same way. Stop here (the test has failed).
                rep.check(False, f"the cases after case {idx + 1} not run: this esptun-gateway "
                          "refuses the IKE peer config (check and run)")
                break
        rep.info(f"case {idx + 1} took {time.monotonic() - t0:.1f} s")

