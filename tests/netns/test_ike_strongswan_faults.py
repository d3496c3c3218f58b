#!/usr/bin/python3
# test_ike_strongswan_faults.py - esptun-gateway against strongSwan: dead
# peer detection, and a junk IKE flood during traffic.
#
#  7. DPD: esptun initiates with dpd_interval=3; charon is SIGKILLed (its PID
#     only): esptun logs "the peer is dead" within 3*3+2 s, drops the
#     CHILD_SA (status and data path), keeps sending IKE_SA_INIT with backoff
#     for 10 s without crashing; charon is started again and esptun must
#     re-establish by itself within 60 s (the time is reported).
#  8. Junk flood during a 32 MB paced transfer (esptun initiates): 20000
#     datagrams "non-ESP marker + junk" to A:4500 and 4000 raw ones to A:500
#     from a helper in B (own port): random bytes, IKE headers of unknown
#     SAs, truncated messages, short headers, bad IKE_SA_INIT requests and
#     responses, wrong versions/lengths. The transfer's SHA-256 matches,
#     esptun stays up with its SAs unchanged, ike.counters.malformed +
#     unknown_sa grow by the count sent (less inbox_dropped and kernel
#     receive-buffer drops), nothing is answered, and esptun's log gains at
#     most 30 lines.
#
# The topology, the set-up of each case and the checks every case makes
# (both sides' view of the SAs) are in tests/lib/sw_pair.py.
#
# usage: test_ike_strongswan_faults.py BUILD_DIR   (root; needs strongSwan installed; BUILD_DIR holds
#        esptun-gateway and esptun-client)
# Environment (diagnostics): see tests/lib/sw_pair.py (ESPTUN_IKE_CASES,
# ESPTUN_IKE_LOGDIR, ESPTUN_IKE_SW_ESP_LOG).
"""esptun against strongSwan: DPD and malformed IKE (cases 7, 8)."""

import json
import os
import subprocess
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
import sw_pair  # noqa: E402
from netns import TestError  # noqa: E402
from esptun_ike import (  # noqa: E402
    PEER, drops, esptun_established, esptun_ike, esptun_sas, ike_counters, sa_brief)
from load_helpers import SELF, delta, paced_transfer, snmp  # noqa: E402
from sw_pair import (  # noqa: E402
    A_IN, A_UL, B_IN, B_UL, GCM_CHILD, GCM_IKE, assert_settled, log_lines, ping, settled_view)

FLOOD_NATT, FLOOD_IKE = 20000, 4000  # case 8: junk datagrams to :4500 and :500
FLOOD_XFER_BYTES = 32 * 1000 * 1000  # ~9.5 s at PACED_RATE
FLOOD_SECS = 5.0
FLOOD_MAX_LOG_LINES = 30
DPD_STAY_DEAD = 10  # s the peer stays dead after esptun noticed (retries back off meanwhile)

CASES = [
    dict(num=7,
         title="DPD: esptun initiates with dpd_interval=3; charon SIGKILLed, then started again",
         kind="dpd", initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, dpd_interval=3,
         expect_ike=GCM_IKE, expect_child=GCM_CHILD),
    dict(num=8,
         title=f"malformed IKE during traffic: {FLOOD_NATT} junk datagrams to :4500 (marker) "
               f"and {FLOOD_IKE} to :500 while 32 MB A -> B flow",
         kind="flood", initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
]


# --- case 7: dead peer detection ----------------------------------------------

def dpd_body(rep, tag, case, A, B):
    dpd = case["dpd_interval"]
    limit = 3 * dpd + 2
    mark = len(log_lines(A.ep.log))
    pid = B.charon.kill()
    t_kill = time.monotonic()
    rep.info(f"charon (PID {pid}) killed with SIGKILL")

    def dead_line():
        return next((ln for ln in log_lines(A.ep.log)[mark:] if "the peer is dead" in ln), None)
    try:
        line = netns.wait_until(dead_line, limit + 10, interval=0.1,
                                what="esptun's 'the peer is dead' log line")
    except TestError:
        line = None
    t_dead = time.monotonic()
    rep.check(line is not None and t_dead - t_kill <= limit,
              f"[{tag}] esptun logs 'the peer is dead' {t_dead - t_kill:.1f} s after the kill "
              f"(<= 3 x dpd_interval + 2 = {limit} s): {line.strip() if line else None!r}",
              netns.tail(A.ep.log, 15))
    st = A.ep.status()
    ike, children, where = esptun_ike(st)
    sas = esptun_sas(st)
    rep.check(not children and not any(s.get("children") for s in sas),
              f"[{tag}] esptun status: no CHILD_SA for {PEER!r} after the peer died "
              f"(ike.sas: {[sa_brief(s) for s in sas]})",
              json.dumps({"peer": esptun_proc.peer(st, PEER), "ike": st.get("ike")})[:2000])
    p = esptun_proc.peer(st, PEER)
    rep.check(not p.get("sa_out") and not p.get("sas_in"),
              f"[{tag}] esptun's data path dropped the peer's SAs too (peers[].sa_out "
              f"{p.get('sa_out')}, sas_in {p.get('sas_in')})", json.dumps(p)[:1000])
    # Stay dead a while: esptun must keep trying (IKE_SA_INIT, retransmitted
    # with backoff) and stay up; record when ike.counters.sent moves.
    sent0 = ike_counters(st).get("sent", 0)
    steps = [(time.monotonic() - t_dead, sent0)]
    while time.monotonic() - t_dead < DPD_STAY_DEAD and A.ep.alive():
        time.sleep(0.25)
        try:
            c = ike_counters(A.ep.status()).get("sent", 0)
        except TestError:
            continue
        if c != steps[-1][1]:
            steps.append((time.monotonic() - t_dead, c))
    st = A.ep.status() if A.ep.alive() else {}
    rep.check(A.ep.alive() and steps[-1][1] >= sent0 + 2,
              f"[{tag}] esptun keeps retrying while the peer is gone: ike.counters.sent "
              f"{sent0} -> {steps[-1][1]} in {time.monotonic() - t_dead:.1f} s, still running "
              f"(ike.sas: {[sa_brief(s) for s in esptun_sas(st)]})", netns.tail(A.ep.log, 10))
    rep.info("ike.counters.sent after 'the peer is dead' (s: count): "
             + ", ".join(f"{t:.1f}: {c}" for t, c in steps))
    B.charon.start()
    t_start = time.monotonic()
    rep.info(f"charon started again {t_start - t_dead:.1f} s after esptun declared it dead")
    up = None
    deadline = t_start + 60
    while time.monotonic() < deadline and A.ep.alive():
        if esptun_established(A.ep) and B.charon.established():
            up = time.monotonic()
            break
        time.sleep(0.2)
    st = A.ep.status() if A.ep.alive() else {}
    rep.check(up is not None,
              f"[{tag}] esptun re-established by itself "
              + (f"{up - t_start:.1f} s after charon came back ({up - t_kill:.1f} s after the "
                 f"kill)" if up else "(not within 60 s)"),
              f"esptun ike.sas {[sa_brief(s) for s in esptun_sas(st)]}\n"
              f"{netns.tail(A.ep.log, 15)}\nstrongSwan: {B.charon.list_sas_text()[:800]}")
    if up is None:
        return
    sw = B.charon.established()
    rep.check(sw and not sw[0].initiator, f"[{tag}] strongSwan is the responder of the new "
              "IKE_SA (esptun initiated it)", json.dumps(sw[0].raw) if sw else "")
    restarts = [ln.strip() for ln in log_lines(A.ep.log)[mark:]
                if "IKE SA established" in ln or "IKE SA closed" in ln]
    rep.info("esptun's log from the kill on: " + " | ".join(restarts[-6:]))
    rep.info(f"esptun ike.counters: sent {ike_counters(st).get('sent')}, retransmits "
             f"{ike_counters(st).get('retransmits')}")
    assert_settled(rep, tag, A, B, timeout=5)
    ping(rep, tag, A, B_IN)
    ping(rep, tag, B, A_IN)


# --- case 8: malformed IKE during traffic --------------------------------------

def flood_body(rep, tag, case, A, B):
    before_sa, _ = settled_view(A, B)
    st0 = A.ep.status()
    snmp_a0 = snmp(A.ns)
    state = {}

    def tick(el):
        if "proc" not in state and el >= 1.5:
            state["lines0"] = len(log_lines(A.ep.log))
            state["t0"] = time.monotonic()
            state["proc"] = B.ns.spawn(
                "timeout", "60", "/usr/bin/python3", SELF, "--flood", B_UL, A_UL,
                str(FLOOD_NATT), str(FLOOD_IKE), str(FLOOD_SECS), str(os.getpid()),
                stdout=subprocess.PIPE, text=True)
        elif "proc" in state and "result" not in state and state["proc"].poll() is not None:
            out = state["proc"].stdout.read()
            state["t1"] = time.monotonic()
            state["result"] = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    paced_transfer(rep, tag, A, B, B_IN, FLOOD_XFER_BYTES, tick=tick, tick_every=0.25)
    if "proc" not in state:
        raise TestError("the flood never started (the transfer ended within 1.5 s?)")
    if "result" not in state:
        try:
            out, _ = state["proc"].communicate(timeout=30)
        except subprocess.TimeoutExpired:
            state["proc"].kill()
            out, _ = state["proc"].communicate()
        state["t1"] = time.monotonic()
        state["result"] = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        rep.info("the flood outlasted the transfer")
    res = state["result"]
    sent = res.get("sent") or {}
    n_natt, n_ike = sent.get("4500", 0), sent.get("500", 0)
    total = n_natt + n_ike
    rep.info(f"flood from {B_UL}:{res.get('src_port')}: {n_natt} datagrams to {A_UL}:4500 "
             f"(non-ESP marker + junk), {n_ike} to :500 in {res.get('secs')} s, "
             f"{res.get('errors')} send errors; kinds {res.get('kinds')}")
    rep.check(total >= 0.99 * (FLOOD_NATT + FLOOD_IKE),
              f"[{tag}] the flood sent {total} of {FLOOD_NATT + FLOOD_IKE} datagrams", str(res))
    time.sleep(1.0)  # let esptun drain what it still holds
    alive = A.ep.alive()
    rep.check(alive, f"[{tag}] esptun-gateway still running after the flood",
              netns.tail(A.ep.log, 15))
    if not alive:
        return
    st1 = A.ep.status()
    c0, c1 = ike_counters(st0), ike_counters(st1)
    snmp_a1 = snmp(A.ns)
    got = delta(c1, c0, "malformed") + delta(c1, c0, "unknown_sa")
    recv = delta(c1, c0, "received")
    # Dropped by the inbox: no room (one source holds at most a few slots,
    # datapath/ike_inbox.hpp) or shorter than an IKE header.
    inbox = delta(c1, c0, "inbox_dropped") + delta(c1, c0, "inbox_too_short")
    kdrop = delta(snmp_a1, snmp_a0, "Udp.RcvbufErrors")
    ignored = {k: v for k, v in esptun_proc.counters_delta(st0, st1).items()
               if k.startswith("ignored.") and v}
    rep.info(f"esptun ike.counters delta: received {recv}, malformed {delta(c1, c0, 'malformed')}, "
             f"unknown_sa {delta(c1, c0, 'unknown_sa')}, bad_icv {delta(c1, c0, 'bad_icv')}, "
             f"inbox_dropped {inbox}, inbox_too_big {delta(c1, c0, 'inbox_too_big')}, "
             f"half_open_dropped {delta(c1, c0, 'half_open_dropped')}, cookies_sent "
             f"{delta(c1, c0, 'cookies_sent')}, sent {delta(c1, c0, 'sent')}, logs_suppressed "
             f"{delta(c1, c0, 'logs_suppressed')}; A's UDP receive-buffer drops {kdrop}; "
             f"ignored delta {ignored}")
    # Every junk datagram is counted once: malformed or unknown_sa, or lost
    # before the engine (inbox full, or the kernel's receive buffer).
    lost = inbox + kdrop
    # The flood comes from one address, so most of what reaches port 4500
    # is dropped by the inbox's per-source bound; port 500 has no such lane.
    rep.check(total - lost - 5 <= got <= total + 5 and got >= 0.5 * n_ike,
              f"[{tag}] ike.counters.malformed + unknown_sa grew by {got} for {total} junk "
              f"datagrams ({inbox} dropped by the inbox, {kdrop} by the kernel)",
              json.dumps({"before": c0, "after": c1}))
    rep.check(delta(c1, c0, "half_open_dropped") == 0 and delta(c1, c0, "cookies_sent") == 0
              and delta(c1, c0, "sent") <= 5,
              f"[{tag}] no junk got an answer or opened an IKE SA (sent "
              f"{delta(c1, c0, 'sent')}, cookies_sent {delta(c1, c0, 'cookies_sent')})",
              json.dumps(c1))
    after = log_lines(A.ep.log)[state["lines0"]:]
    rep.check(len(after) <= FLOOD_MAX_LOG_LINES,
              f"[{tag}] esptun's log gained {len(after)} line(s) during the flood and the rest "
              f"of the transfer (<= {FLOOD_MAX_LOG_LINES})", "\n".join(after[:40]))
    if after:
        rep.info("esptun logged: " + " | ".join(ln.strip() for ln in after[:4]))
    d = {k: delta(drops(st1), drops(st0), k) for k in drops(st1)}
    nz = {k: v for k, v in d.items() if v}
    rep.info(f"esptun data-path drops during the case: {nz or 'none'}")
    view = assert_settled(rep, tag, A, B, timeout=5)
    if before_sa and view:
        same = (before_sa[0].get("spi_i"), before_sa[0].get("spi_r"),
                before_sa[2].spi_in) == (view[0].get("spi_i"), view[0].get("spi_r"),
                                         view[2].spi_in)
        rep.check(same, f"[{tag}] the flood left the IKE SA and CHILD_SA as they were "
                  f"(IKE {view[0].get('spi_i')}/{view[0].get('spi_r')})",
                  f"before {sa_brief(before_sa[0])}, after {sa_brief(view[0])}")
    ping(rep, tag, A, B_IN)


def body(rep, build):
    sw_pair.run_cases(rep, build, CASES, {"dpd": dpd_body, "flood": flood_body})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_faults", body, tools=sw_pair.TOOLS)
