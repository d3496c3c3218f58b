#!/usr/bin/python3
# test_end_to_end.py - two esptun endpoints, one per namespace, carry real
# traffic: ping both ways over inner IPv4 and IPv6 for all six suites, a
# 100 MB TCP transfer (SHA-256 equal on both ends) for aes128-gcm and
# aes128-cbc-hmac-sha1, NAT rebinding in the middle of a transfer, `check`
# on good and bad configs, and SIGTERM removing tun, addresses and routes.
#
#   netns A (et-e2e-PID-N-a)                    netns B (et-e2e-PID-N-b)
#  +------------------------------+            +------------------------------+
#  | tun eaN  10.99.0.1/24        |            | tun ebN  10.99.0.2/24        |
#  |          fd99::1/64          |            |          fd99::2/64          |
#  |   esptun-gateway (or -client)|            |   esptun-gateway             |
#  |   peer site-b:               |            |   peer site-a:               |
#  |    endpoint 10.201.0.2:4500  |            |    endpoint configured, or   |
#  |                              |            |    learned (NAT cases)       |
#  | ula 10.201.0.1/24 ---------- veth ------- ulb 10.201.0.2/24             |
#  |     (NAT case: .1 replaced   |            |                              |
#  |      by 10.201.0.3 mid-run)  |            |                              |
#  +------------------------------+            +------------------------------+
#
# Each case builds fresh namespaces, so a leftover from one case cannot make
# the next one pass or fail.
"""End-to-end traffic between two esptun endpoints in namespaces."""

import json
import os
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
import transfer as transfer_lib  # noqa: E402
from netns import TestError  # noqa: E402

XFER_BYTES = 100 * 1000 * 1000
XFER_TIMEOUT = 180

# transfer: None, "a->b" or "b->a"; learned: B has no endpoint for A;
# rebind: move A's underlay address during the transfer; client: A runs esptun-client.
CASES = [
    dict(cipher="aes128-gcm", esn=True, transfer="a->b", learned=True, rebind=True, client=True),
    dict(cipher="aes128-cbc-hmac-sha1", esn=True, transfer="b->a"),
    # restart: A's gateway is killed (SIGKILL: no chance to save anything) and
    # started again mid-transfer; B keeps running. Without ESN, so the skip
    # ahead is taken from the 32-bit space a sender must never wrap.
    dict(cipher="aes256-cbc-hmac-sha256", esn=False, transfer="a->b", restart=True),
    dict(cipher="aes256-gcm", esn=False, second_instance=True),
    dict(cipher="aes256-cbc-hmac-sha1", esn=False, learned=True),
    dict(cipher="aes128-cbc-hmac-sha256", esn=True, underlay=6, learned=True),
    dict(cipher="aes256-cbc-hmac-sha256", esn=False),
]


class Site:
    def __init__(self, ns, tun, ep, proc, name, peer_name):
        self.ns, self.tun, self.ep, self.proc = ns, tun, ep, proc
        self.name, self.peer_name = name, peer_name


def ping(rep, tag, src, dst_addr, count=3, expect=True):
    res = ping_lib.run(src.ns, dst_addr, count=count)
    if expect:
        return ping_lib.expect_replies(rep, f"[{tag}] ping {src.name} -> {dst_addr}", res, count)
    return ping_lib.expect_no_reply(rep, f"[{tag}] ping {src.name} -> {dst_addr} fails before B "
                                    "knows A's endpoint", res, unreachable_ok=False)


def start_case(rep, ctx, idx, case):
    cipher, esn = case["cipher"], case["esn"]
    tag = f"{cipher} esn={'on' if esn else 'off'}"
    v6 = case.get("underlay") == 6
    a = netns.Netns(netns.unique("e2e", f"{idx}-a"))
    b = netns.Netns(netns.unique("e2e", f"{idx}-b"))
    netns.veth(a, b, "ula", "ulb", ["10.201.0.1/24", "fd01::1/64"], ["10.201.0.2/24", "fd01::2/64"])
    case["a_endpoint"] = "[fd01::1]:4500" if v6 else "10.201.0.1:4500"
    listen = "[::]:4500" if v6 else "0.0.0.0:4500"
    a_out, b_out = conf.sa_pair(cipher, spi_base=0x1000 + 0x10 * idx)
    sfx = f"{os.getpid() % 100000}x{idx}"
    cfg_a = conf.Endpoint(
        interface=f"ea{sfx}", addresses=["10.99.0.1/24", "fd99::1/64"],
        control_socket=os.path.join(ctx.tmp, f"a{idx}.sock"), listen=listen,
        peers=[conf.Peer(name="site-b", cipher=cipher, out=a_out, inb=b_out, esn=esn,
                         allowed_ips=["10.99.0.2/32", "fd99::2/128"],
                         endpoint="[fd01::2]:4500" if v6 else "10.201.0.2:4500")])
    cfg_b = conf.Endpoint(
        interface=f"eb{sfx}", addresses=["10.99.0.2/24", "fd99::2/64"],
        control_socket=os.path.join(ctx.tmp, f"b{idx}.sock"), listen=listen,
        peers=[conf.Peer(name="site-a", cipher=cipher, out=b_out, inb=a_out, esn=esn,
                         allowed_ips=["10.99.0.1/32", "fd99::1/128"],
                         endpoint=None if case.get("learned") else case["a_endpoint"])])
    path_a = cfg_a.write(os.path.join(ctx.tmp, f"a{idx}.toml"))
    path_b = cfg_b.write(os.path.join(ctx.tmp, f"b{idx}.toml"))
    role_a = "client" if case.get("client") else "gateway"
    ea = esptun_proc.Endpoint(ctx.build, a, path_a, os.path.join(ctx.tmp, f"a{idx}.log"), role_a)
    eb = esptun_proc.Endpoint(ctx.build, b, path_b, os.path.join(ctx.tmp, f"b{idx}.log"))
    ctx.logs = [ea.log, eb.log]
    ea.start()
    eb.start()
    A = Site(a, cfg_a.interface, ea, role_a, "A", "site-b")
    A.out_keys = a_out  # to find its entry in the sequence state file
    B = Site(b, cfg_b.interface, eb, "gateway", "B", "site-a")
    for s in (A, B):
        netns.wait_until(lambda s=s: "tentative" not in s.ns.ip("-6", "addr", "show", "dev",
                                                                s.tun).stdout, 5,
                         what=f"IPv6 address on {s.tun}")
    rep.info(f"{tag}: A runs esptun-{role_a}, B esptun-gateway; underlay IPv"
             f"{6 if v6 else 4}; B's endpoint for A is "
             f"{'learned' if case.get('learned') else 'configured'}")
    return tag, A, B


def check_configs(rep, ctx, tag, site, prog):
    """`check` on the running config (good) and on three broken copies of it."""
    p = esptun_proc.run_check(ctx.build, site.ep.config, prog)
    rep.check(p.returncode == 0, f"[{tag}] {prog} check on the good config exits 0",
              (p.stdout + p.stderr)[-300:])
    with open(site.ep.config) as f:
        lines = f.read().splitlines()
    breakages = [
        ("cipher = ", 'cipher = "aes128-gcn"', "unknown cipher"),
        ("  spi = ", "  spi = 0", "SPI 0"),
        ('listen = ', 'listen = "0.0.0.0:99999"', "port out of range"),
    ]
    for prefix, replacement, what in breakages:
        n = next(i for i, line in enumerate(lines) if line.startswith(prefix))
        bad = list(lines)
        bad[n] = replacement
        path = os.path.join(ctx.tmp, f"bad-{abs(hash(what)) % 10000}.toml")
        with open(path, "w") as f:
            f.write("\n".join(bad) + "\n")
        os.chmod(path, 0o600)
        p = esptun_proc.run_check(ctx.build, path, prog)
        out = (p.stdout + p.stderr).strip()
        where = f"{path}:{n + 1}"
        rep.check(0 < p.returncode < 128 and where in out,
                  f"[{tag}] {prog} check on a config with {what} (line {n + 1}) exits "
                  f"{p.returncode} naming {os.path.basename(path)}:{n + 1}",
                  f"exit {p.returncode}: {out[:300]}")


def transfer(rep, ctx, tag, src, dst, dst_addr, rebind=None):
    """100 MB over TCP src -> dst through the tunnel; returns both results.
    rebind: called once after 24 MiB (a NAT rebinding or a restart)."""
    state = {"rebound": False}

    def progress(nbytes):
        if rebind and not state["rebound"] and nbytes >= 24 << 20:
            rebind()
            state["rebound"] = True
            rep.info(f"mid-transfer event after {nbytes >> 20} MiB")

    sent, got, secs = transfer_lib.run(src.ns, dst.ns, dst_addr, 5201, XFER_BYTES, XFER_TIMEOUT,
                                       progress)
    transfer_lib.check(rep, f"[{tag}] {XFER_BYTES // 1000000} MB TCP {src.name} -> {dst.name} "
                       f"({dst_addr})", sent, got, XFER_BYTES, secs)
    if rebind:
        rep.check(state["rebound"], f"[{tag}] the rebinding happened during the transfer")
    return sent, got


SEQ_MARGIN = 1 << 22  # SeqState::kMargin (service/seq_state.hpp)


def reserved_in(path, keys):
    """The number A's state file reserves for the SA with @keys (-1: no entry).
    Entries are named by a fingerprint of the key, never by the key."""
    with open(path) as f:
        text = f.read()
    fp = conf.seq_fingerprint(keys)
    line = next((ln for ln in text.splitlines() if ln.startswith(fp + " ")), "")
    return (int(line.split()[1]) if line else -1), text


def restart_a(rep, A):
    """Crash A's gateway and start it again with the same config (and state
    file). Recorded: the last number A's status showed before the kill, the
    reservation its state file held when it died (where the new run must
    resume: every number the first run used is at or below it), and the last
    number the new run's first status shows. The transfer keeps running
    throughout, so the two status figures move on with it; only the file's
    reservation is a fixed point."""
    def go():
        st = A.ep.status()
        before = esptun_proc.peer(st, "site-b")["sa_out"]["last_seq"]
        A.ep.stop(sig=signal.SIGKILL)
        reserved, _ = reserved_in(st["seq_state"]["file"], A.out_keys)
        A.ep.start()
        after = esptun_proc.peer(A.ep.status(), "site-b")["sa_out"]["last_seq"]
        A.restart = (before, reserved, after)
        rep.info(f"killed and restarted A's gateway: last sequence number {before} shown before, "
                 f"{reserved} reserved in the state file at the kill ({reserved - before} above "
                 f"it; the margin is {SEQ_MARGIN} plus what was sent after that status), "
                 f"{after} shown after the restart")
    return go


def check_restart(rep, tag, A, B):
    """After a crash and restart of A mid-transfer (the transfer itself passed)."""
    before, reserved, resumed = A.restart
    rep.check(before < reserved <= resumed and reserved >= SEQ_MARGIN,
              f"[{tag}] A resumed above every number its first run could have used "
              f"({before} used before the kill < {reserved} reserved <= {resumed} after the "
              f"restart; reservation margin {SEQ_MARGIN})", f"{A.restart}")
    # The restart may land when the transfer has little left to send (on a
    # busy machine, none): a ping from A makes the restarted run's packets
    # reach B whatever the timing was.
    ping(rep, tag, A, "10.99.0.2")
    st_a, st_b = A.ep.status(), B.ep.status()
    pa, pb = esptun_proc.peer(st_a, "site-b"), esptun_proc.peer(st_b, "site-a")
    rep.check(pb["sa_in"]["highest_seq"] == pa["sa_out"]["last_seq"] >= resumed,
              f"[{tag}] B accepted the restarted A: highest_seq {pb['sa_in']['highest_seq']} == "
              f"A's last_seq", json.dumps([pa["sa_out"], pb["sa_in"]]))
    bad = esptun_proc.fault_drops(st_b["drops"])
    rep.check(not bad, f"[{tag}] B: no drops (no replay, no auth failure) across A's restart",
              json.dumps(st_b["drops"]))
    reserved, text = reserved_in(st_a["seq_state"]["file"], A.out_keys)
    rep.check(A.out_keys.enc.hex() not in text, f"[{tag}] A's state file does not hold its key")
    rep.check(reserved >= pa["sa_out"]["last_seq"] and not st_a["seq_state"]["error"],
              f"[{tag}] A's state file reserves ahead of its last number ({reserved} >= "
              f"{pa['sa_out']['last_seq']})", text)


def rebind_a(a):
    """NAT rebinding: A's packets now leave from 10.201.0.3 instead of .1."""
    def go():
        a.ip("addr", "add", "10.201.0.3/24", "dev", "ula")
        a.ip("addr", "del", "10.201.0.1/24", "dev", "ula")
    return go


def check_counters(rep, tag, A, B, case, st_a, st_b):
    pa, pb = esptun_proc.peer(st_a, "site-b"), esptun_proc.peer(st_b, "site-a")
    for s, st, p in ((A, st_a, pa), (B, st_b, pb)):
        c = st["counters"]
        rep.check(c["udp_rx_packets"] > 0 and c["udp_tx_packets"] > 0 and c["tun_rx_packets"] > 0
                  and c["tun_tx_packets"] > 0 and p["sa_out"]["packets"] > 0
                  and p["sa_in"]["packets"] > 0,
                  f"[{tag}] {s.name}: counters moved (udp rx {c['udp_rx_packets']} tx "
                  f"{c['udp_tx_packets']}, sa_in {p['sa_in']['packets']}, "
                  f"sa_out {p['sa_out']['packets']})", json.dumps(c))
        allowed = {"no_endpoint"} if (s is B and case.get("learned") and case.get("probe")) else set()
        # While A's underlay address is swapped (add .3, del .1) a send from
        # A's socket can fail locally for a moment: counted, and bounded below.
        if s is A and case.get("rebind"):
            allowed.add("udp_send_error")
        bad = esptun_proc.fault_drops(st["drops"], allowed)
        rep.check(not bad, f"[{tag}] {s.name}: no drops" +
                  (f" (besides {', '.join(sorted(allowed))}: "
                   f"{', '.join(str(st['drops'][k]) for k in sorted(allowed))})"
                   if allowed else ""), json.dumps(st["drops"]))
        # The pings, 0.2 s apart, woke each worker from idle spells: each such
        # wake-up polls once for the answer (wake_poll_us, on by default).
        t = st["tun_io"]
        rep.check(t["wake_poll_us"] == 50 and t["wake_polls"] > 0 and t["busy_polls"] == 0,
                  f"[{tag}] {s.name}: polled after {t['wake_polls']} wake-ups from an idle spell "
                  f"({t['wake_poll_hits']} found the next packet)", json.dumps(t))
        # Bulk traffic keeps the worker from idling: at most one window per
        # 100 datagrams (in practice a few per transfer).
        moved = c["udp_rx_packets"] + c["udp_tx_packets"]
        if case.get("transfer"):
            rep.check(t["wake_polls"] * 100 < moved,
                      f"[{tag}] {s.name}: {t['wake_polls']} wake-up polls for {moved} datagrams",
                      json.dumps(t))
    # The bulk sender's gateway sent its full-sized ESP packets as UDP GSO
    # trains (veth offloads them), and the receiver got them one by one.
    if case.get("transfer"):
        name, st = ("A", st_a) if case["transfer"].startswith("a") else ("B", st_b)
        u = st["udp"]
        rep.check(u["gso"] and u["gso_trains"] > 0 and u["gso_segments"] >= 2 * u["gso_trains"],
                  f"[{tag}] {name}: the transfer left in UDP GSO trains ({u['gso_trains']} trains, "
                  f"{u['gso_segments']} datagrams)", json.dumps(u))
        rep.check(u["sndbuf"] >= 4 << 20 and u["rcvbuf"] >= 4 << 20,
                  f"[{tag}] {name}: socket buffers of at least 4 MiB", json.dumps(u))
        # tun offloads: the sender's kernel handed over TCP super-packets, the
        # receiver's gateway wrote merged ones (GRO).
        rx_name, rx_st = ("B", st_b) if name == "A" else ("A", st_a)
        t_tx, t_rx = st["tun_io"], rx_st["tun_io"]
        rep.check("tso4" in t_tx["offloads"] and t_tx["gso_reads"] > 0
                  and t_tx["gso_segments"] > 2 * t_tx["gso_reads"] and t_tx["offload_errors"] == 0,
                  f"[{tag}] {name}: read {t_tx['gso_reads']} super-packets from the tun "
                  f"({t_tx['gso_segments']} packets)", json.dumps(t_tx))
        rx_c = rx_st["counters"]
        rep.check(rx_st["udp"]["gro"] and rx_c["udp_gro_buffers"] > 0,
                  f"[{tag}] {rx_name}: received the trains as {rx_c['udp_gro_buffers']} UDP GRO buffers "
                  f"({rx_c['udp_rx_packets']} datagrams)", json.dumps([rx_st["udp"], rx_c]))
        rep.check(t_rx["gro_writes"] > 0 and t_rx["gro_segments"] > 2 * t_rx["gro_writes"],
                  f"[{tag}] {rx_name}: wrote {t_rx['gro_writes']} merged super-packets to the tun "
                  f"({t_rx['gro_segments']} packets)", json.dumps(t_rx))
    # Each ESP packet one side sent reached the other (veth loses nothing),
    # except B -> A while A's old address was gone (the NAT rebinding), and
    # what a receiver shed unopened as congestion (its receive queue limit,
    # on a busy machine: esptun_proc.rx_shed()).
    send_err = st_a["drops"]["udp_send_error"] if case.get("rebind") else 0
    rep.check(send_err < 1000, f"[{tag}] A: {send_err} sends failed during the address swap (< 1000)",
              str(send_err))
    shed_a, shed_b = esptun_proc.rx_shed(st_a), esptun_proc.rx_shed(st_b)
    rep.equal(pb["sa_in"]["packets"] + shed_b, pa["sa_out"]["packets"] - send_err,
              f"[{tag}] B's sa_in.packets == A's sa_out.packets - A's failed sends - B's shed ({shed_b})")
    if case.get("rebind"):
        lost = pb["sa_out"]["packets"] - pa["sa_in"]["packets"] - shed_a
        rep.check(0 <= lost < 1000, f"[{tag}] A's sa_in.packets <= B's sa_out.packets "
                  f"({lost} sent to A's old address during the rebinding)", str(lost))
    else:
        rep.equal(pa["sa_in"]["packets"] + shed_a, pb["sa_out"]["packets"],
                  f"[{tag}] A's sa_in.packets == B's sa_out.packets - A's shed ({shed_a})")


def second_instance(rep, ctx, tag, s):
    """A second `run` with the same config must fail and leave the first intact."""
    p = s.ns.run(s.ep.binary, s.ep.verb, "-c", s.ep.config, check=False, timeout=10)
    err = p.stderr.strip().splitlines()
    rep.check(0 < p.returncode < 128 and err,
              f"[{tag}] a second instance with the same config exits {p.returncode}: "
              f"{err[-1][-90:] if err else ''}", p.stderr[-300:])
    routes = s.ns.ip("route").stdout
    rep.check(s.tun in s.ns.links() and "10.99.0.2 dev" in routes and s.ep.status(),
              f"[{tag}] ... and the first one keeps its tun, routes and control socket", routes)
    ping(rep, tag, s, "10.99.0.2", count=1)


def stop_site(rep, tag, s, sig=signal.SIGTERM):
    rc = s.ep.stop(sig=sig)
    rep.equal(rc, 0, f"[{tag}] {s.name}: {signal.Signals(sig).name} -> exit code")
    links = s.ns.links()
    addrs = s.ns.ip("addr", "show").stdout
    routes = s.ns.ip("-4", "route", "show").stdout + s.ns.ip("-6", "route", "show").stdout
    rep.check(s.tun not in links and "10.99.0." not in addrs + routes
              and "fd99::" not in addrs + routes,
              f"[{tag}] {s.name}: tun {s.tun}, its addresses and routes removed",
              f"links {links}\n{routes}")


def run_case(rep, ctx, idx, case):
    tag, A, B = start_case(rep, ctx, idx, case)
    try:
        pb = esptun_proc.peer(B.ep.status(), "site-a")
        if case.get("learned"):
            rep.check(pb["endpoint"] is None and pb["endpoint_source"] == "none",
                      f"[{tag}] B: endpoint of A unknown before any packet", json.dumps(pb))
            if idx == 0:  # costs a second: once is enough
                case["probe"] = True
                ping(rep, tag, B, "10.99.0.1", count=1, expect=False)
                st = B.ep.status()
                rep.check(st["drops"]["no_endpoint"] >= 1,
                          f"[{tag}] B: drops.no_endpoint counted it", json.dumps(st["drops"]))
        # A first: B may need A's first packet to learn where A is.
        for src, dst in ((A, "10.99.0.2"), (A, "fd99::2"), (B, "10.99.0.1"), (B, "fd99::1")):
            ping(rep, tag, src, dst)
        pb = esptun_proc.peer(B.ep.status(), "site-a")
        rep.check(pb["endpoint"] == case["a_endpoint"]
                  and pb["endpoint_source"] == ("learned" if case.get("learned") else "configured"),
                  f"[{tag}] B: A's endpoint {case['a_endpoint']} ({pb['endpoint_source']})",
                  json.dumps(pb))
        if case.get("second_instance"):
            second_instance(rep, ctx, tag, A)

        if case.get("transfer") == "a->b":
            changes0 = pb["endpoint_changes"]
            event = rebind_a(A.ns) if case.get("rebind") else None
            if case.get("restart"):
                event = restart_a(rep, A)
            transfer(rep, ctx, tag, A, B, "10.99.0.2", rebind=event)
            if case.get("rebind"):
                pb = esptun_proc.peer(B.ep.status(), "site-a")
                rep.check(pb["endpoint"] == "10.201.0.3:4500" and pb["endpoint_changes"] > changes0
                          and pb["endpoint_source"] == "learned",
                          f"[{tag}] B: A's endpoint followed to 10.201.0.3:4500 "
                          f"(endpoint_changes {changes0} -> {pb['endpoint_changes']})",
                          json.dumps(pb))
                ping(rep, tag, B, "fd99::1")  # the reverse path uses the new address too
        elif case.get("transfer") == "b->a":
            transfer(rep, ctx, tag, B, A, "fd99::1")

        time.sleep(0.2)  # let the last ACKs land before comparing both sides
        if case.get("restart"):
            check_restart(rep, tag, A, B)  # A's counters restarted from zero
        else:
            check_counters(rep, tag, A, B, case, A.ep.status(), B.ep.status())
        check_configs(rep, ctx, tag, B, "esptun-gateway")
    finally:
        for s, sig in ((A, signal.SIGINT if idx % 2 else signal.SIGTERM), (B, signal.SIGTERM)):
            if s.ep.alive():
                stop_site(rep, tag, s, sig)


def body(rep, build):
    netns.require_environment(("ip", "ping", "timeout"))

    class Ctx:
        pass

    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.logs = build, netns.make_tempdir("e2e"), []
    for prog in ("esptun-client",):
        if not os.access(os.path.join(build, prog), os.X_OK):
            raise TestError(f"{prog} not found in {build}")

    def dump_logs():
        for log in ctx.logs:
            print(f"\n--- {log}:\n{netns.tail(log, 30)}")
    rep.on_failure.append(dump_logs)

    for idx, case in enumerate(CASES):
        rep.section(f"case {idx + 1}/{len(CASES)}: {case['cipher']} ESN "
                    f"{'on' if case['esn'] else 'off'}"
                    + (f", {case['transfer']} 100 MB" if case.get("transfer") else "")
                    + (", NAT rebinding" if case.get("rebind") else "")
                    + (", A killed and restarted" if case.get("restart") else ""))
        try:
            run_case(rep, ctx, idx, case)
        except TestError as e:
            rep.check(False, f"[{case['cipher']}] {str(e).splitlines()[0]}", str(e)[:2000])


if __name__ == "__main__":
    report.main("netns/end_to_end", body, tools=("ip", "ping", "timeout"))
