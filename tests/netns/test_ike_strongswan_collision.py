#!/usr/bin/python3
# test_ike_strongswan_collision.py - CHILD_SA rekey collisions between
# esptun-gateway and strongSwan, through a delay relay.
#
#  9. CHILD_SA rekey collisions (RFC 7296 section 2.8.1), esptun initiates,
#     through a userspace relay (R, tests/lib/udp_relay.py delay_main) that
#     holds every datagram 400 ms each way, so CREATE_CHILD_SA requests of
#     both sides cross: esptun rekey_time=8 (it jitters by up to -10%),
#     strongSwan CHILD rekey_time=8s, rand_time=0s (no randomization),
#     life_time=30s; no IKE rekeys. 30 MB A -> B paced at 6 Mbit/s (~40 s).
#     Collisions are read from both logs (esptun "CHILD_SA rekey collision
#     resolved, keeping SPI in X"; charon "CHILD_SA rekey collision won/lost"
#     or, when esptun's DELETE of the old SA came first, "rekey/delete
#     collision, deleting redundant/old child")
#     and the relay's log of IKE messages (requests crossing on the wire).
#     Asserted: at least one collision (a run without one is repeated, up to
#     3 times, fresh; none in all of them fails as a test-design problem),
#     both sides agree on every winner, SHA-256 equal, no stall, then one
#     CHILD_SA on each side, sending, SPIs crosswise (no leaked SA in either
#     status), esptun's drops.unknown_spi/auth_failed <= 5.
#
#   netns A                    netns R (relay, 400 ms each way)          netns B
#   swa 192.168.88.1 ---- rla 192.168.88.3 | rlb 192.168.89.3 ---- swb 192.168.89.2
#   esptun endpoint 192.168.88.3:4500        charon remote_addrs 192.168.89.3
#
#
# The topology, the set-up of each case and the checks every case makes
# (both sides' view of the SAs) are in tests/lib/sw_pair.py.
#
# usage: test_ike_strongswan_collision.py BUILD_DIR   (root; needs strongSwan installed; BUILD_DIR holds
#        esptun-gateway and esptun-client)
# Environment (diagnostics): see tests/lib/sw_pair.py (ESPTUN_IKE_CASES,
# ESPTUN_IKE_LOGDIR, ESPTUN_IKE_SW_ESP_LOG).
"""esptun against strongSwan: CHILD_SA rekey collisions (case 9)."""

import json
import os
import re
import subprocess
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_proc  # noqa: E402
import report  # noqa: E402
import sw_pair  # noqa: E402
from netns import TestError  # noqa: E402
from esptun_ike import PEER, drops, esptun_sas, ike_counters, sa_brief  # noqa: E402
from load_helpers import delta, paced_transfer  # noqa: E402
from sw_pair import (  # noqa: E402
    B_IN, COLL_DELAY, GCM_CHILD, GCM_IKE, MAX_ESP_AUTH_FAILED, MAX_UNKNOWN_SPI, SW_CHILD_RX,
    assert_settled, log_lines, run_case)

# strongSwan's timers for case 9: the same CHILD rekey time as esptun's, no
# randomization (rand_time=0s is allowed and means none), no IKE rekey; a
# 2 s retransmit timeout (the round trip is 0.8 s); times in its log with ms.
SW_COLLISION_CFG = dict(child_rekey_time=8, child_life_time=30, child_rand_time=0,
                        ike_rekey_time="4h", retransmit_timeout=2.0, log_ms=True)

CASES = [
    dict(num=9,
         title="CHILD_SA rekey collisions through a 400 ms (one way) relay: esptun rekey_time=8, "
               "strongSwan CHILD 8 s (rand_time 0); 30 MB A -> B paced over ~40 s",
         kind="collision", relay=True, initiator="esptun", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128gcm16", sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, rekey_time=8, ike_rekey_time=0,
         sw_cfg=SW_COLLISION_CFG, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
]


# --- case 9: CHILD_SA rekey collisions -------------------------------------------

COLL_XFER_BYTES = 30 * 1000 * 1000
COLL_RATE = 6_000_000  # bit/s: 30 MB take 40 s (TCP needs ~0.6 MB in flight at 0.8 s RTT)
COLL_RUNS = 4  # the run, and up to 3 fresh repeats while no collision happened
E_COLL_RX = re.compile(r"CHILD_SA rekey collision resolved, keeping SPI in ([0-9a-f]{8})")
E_OURS_RX = re.compile(r"CHILD_SA rekeyed, SPIs in ([0-9a-f]{8}) out ([0-9a-f]{8}) "
                       r"\(replacing in ([0-9a-f]{8})\)")
E_THEIRS_RX = re.compile(r"CHILD_SA rekeyed by the peer, SPIs in ([0-9a-f]{8}) "
                         r"out ([0-9a-f]{8})")
E_EVENT_RX = re.compile(r"CHILD_SA|collision|refused|TEMPORARY|dead|IKE SA|error|warning",
                        re.IGNORECASE)
# charon resolves a collision by the nonces ("won"/"lost") or, when the
# peer's DELETE of the SA it was rekeying arrives first, without them
# ("rekey/delete"): then it deletes the child its own exchange made
# ("redundant", the peer's outcome stands) or the one it rekeyed ("old").
SW_COLL_RX = re.compile(r"CHILD_SA rekey(/delete)? collision(?: (won|lost))?, deleting "
                        r"(old|redundant) child \S+\{(\d+)\}")
SW_DETECT_RX = re.compile(r"detected (\S+) collision with (\S+)")
SW_EST_RX = re.compile(r"CHILD_SA \S+\{(\d+)\} established with SPIs ([0-9a-f]{8})_i "
                       r"([0-9a-f]{8})_o")
SW_EVENT_RX = re.compile(r"collision|rekeying CHILD_SA|CHILD_SA \S+\{\d+\} established|"
                         r"closing CHILD_SA|received DELETE|sending DELETE|TEMPORARY_FAILURE|"
                         r"CHILD_SA_NOT_FOUND|NO_PROPOSAL|unable to|failed|"
                         r"(generating|parsed) (CREATE_CHILD_SA|INFORMATIONAL)", re.IGNORECASE)
STAMP_RX = re.compile(r"^(\d\d):(\d\d):(\d\d)(?:\.(\d{3}))?")


def stamp_secs(line):
    """stamp_secs() - the leading HH:MM:SS[.mmm] of a log line as seconds of the day."""
    m = STAMP_RX.match(line)
    if not m:
        return None
    h, mi, sec, ms = m.groups()
    return int(h) * 3600 + int(mi) * 60 + int(sec) + int(ms or 0) / 1000


def collision_timeline(A, B, relay_log, t_from=None, t_to=None):
    """collision_timeline() - esptun's, charon's and the relay's rekey-related
    lines merged by time (A: esptun, B: charon, R: the relay, which stamps a
    datagram when it takes it in; it leaves COLL_DELAY later)."""
    rows = []
    relay_rx = re.compile(r"CREATE_CHILD_SA|INFORMATIONAL")
    for side, lines, rx in (("A", log_lines(A.ep.log), E_EVENT_RX),
                            ("B", B.charon.log_text().splitlines(), SW_EVENT_RX),
                            ("R", log_lines(relay_log), relay_rx)):
        for ln in lines:
            t = stamp_secs(ln)
            if t is None or not rx.search(ln):
                continue
            if (t_from is not None and t < t_from) or (t_to is not None and t > t_to):
                continue
            rows.append((t, side, ln.strip()))
    rows.sort(key=lambda r: r[0])
    return "\n".join(f"{side} {ln}" for _, side, ln in rows)


def wire_crossings(relay_log):
    """wire_crossings() - pairs (t_a, t_b) of CREATE_CHILD_SA requests, one
    from each side, that crossed: each side sent its own before the other's
    reached it, |t_a - t_b| < COLL_DELAY (t: when the relay took it in;
    retransmissions not counted)."""
    reqs = {"AB": [], "BA": []}
    seen = set()
    for ln in log_lines(relay_log):
        m = re.match(r"(\S+) (AB|BA) CREATE_CHILD_SA request mid (\d+)", ln)
        if not m or (m.group(2), m.group(3)) in seen:
            continue
        seen.add((m.group(2), m.group(3)))
        reqs[m.group(2)].append(stamp_secs(ln))
    return [(ta, tb) for ta in reqs["AB"] for tb in reqs["BA"] if abs(ta - tb) < COLL_DELAY]


def sw_resolution(line):
    """sw_resolution() - (outcome, N of net{N}, whose exchange made the SA that
    stays) of a charon line resolving a CHILD_SA rekey collision, else None.
    "won" (and rekey/delete deleting the old child): strongSwan's; "lost" (and
    rekey/delete deleting the redundant child, the one its exchange made): esptun's."""
    m = SW_COLL_RX.search(line)
    if not m:
        return None
    outcome = m.group(2) or ("delete-" + m.group(3))
    return outcome, m.group(4), "strongSwan" if outcome in ("won", "delete-old") else "esptun"


# charon 5.9.8's four ways of saying it (the rekey/delete one once went
# uncounted, and a run where it came second failed the agreement check).
SW_RESOLUTION_SAMPLES = (
    ("04[IKE] <ab|1> CHILD_SA rekey collision won, deleting old child net{1}", ("won", "1", "strongSwan")),
    ("04[IKE] <ab|1> CHILD_SA rekey collision lost, deleting redundant child net{7}",
     ("lost", "7", "esptun")),
    ("04[IKE] <ab|1> CHILD_SA rekey/delete collision, deleting redundant child net{4}",
     ("delete-redundant", "4", "esptun")),
    ("04[IKE] <ab|1> CHILD_SA rekey/delete collision, deleting old child net{2}",
     ("delete-old", "2", "strongSwan")),
    ("04[IKE] <ab|1> detected CHILD_REKEY collision with CHILD_DELETE", None),
)


def check_log_reading(rep):
    for line, want in SW_RESOLUTION_SAMPLES:
        rep.equal(sw_resolution(line), want, f"read charon's {line.split('> ')[1]!r}")


def collision_analysis(A, B):
    """collision_analysis() - both sides' collision outcomes from their logs.
    Returns dict: esptun [(time, kept in-SPI, whose exchange won)], strongswan
    [(time, won|lost, net{N}, whose exchange won, the SPIs of net{N})],
    detected (charon's "detected X collision with Y" lines), ours/theirs
    (esptun's in-SPIs of the SAs it made / the peer made)."""
    elines = log_lines(A.ep.log)
    ours = {m.group(1) for ln in elines for m in [E_OURS_RX.search(ln)] if m}
    theirs = {m.group(1) for ln in elines for m in [E_THEIRS_RX.search(ln)] if m}
    e = []
    for ln in elines:
        m = E_COLL_RX.search(ln)
        if m:
            w = m.group(1)
            e.append((stamp_secs(ln), w, "esptun" if w in ours else
                      "strongSwan" if w in theirs else "?", ln.strip()))
    text = B.charon.log_text().splitlines()
    spis = {}
    for ln in text:
        m = SW_EST_RX.search(ln)
        if m:
            spis[m.group(1)] = (m.group(2), m.group(3))
    sw, detected = [], []
    for ln in text:
        r = sw_resolution(ln)
        if r:
            outcome, net, who = r
            sw.append((stamp_secs(ln), outcome, net, who, spis.get(net), ln.strip()))
        elif SW_DETECT_RX.search(ln):
            detected.append(ln.strip())
    return dict(esptun=e, strongswan=sw, detected=detected, ours=ours, theirs=theirs)


def collision_body(rep, tag, case, A, B):
    """Case 9: a paced transfer while both sides rekey the CHILD_SA every
    ~8 s through the 400 ms relay. Returns the number of collisions seen
    (either side's log), or None when it could not be counted."""
    relay_log = A.relay[2]
    failed0 = len(rep.failed)
    sts0 = A.ep.status()
    polls = []  # (elapsed, esptun children, strongSwan children or None)
    last_sw = [-10.0]

    def tick(el):
        try:
            kids = [c for s in esptun_sas(A.ep.status()) for c in s.get("children") or []]
        except TestError:
            kids = None
        sw = None
        if el - last_sw[0] >= 1.8:  # swanctl: about every 2 s
            last_sw[0] = el
            try:
                sw = sum(len(i.children) for i in B.charon.list_sas())
            except (TestError, subprocess.SubprocessError):
                sw = None
        polls.append((el, None if kids is None else len(kids), sw))
    t_start = stamp_secs(time.strftime("%H:%M:%S"))
    paced_transfer(rep, tag, A, B, B_IN, COLL_XFER_BYTES, rate=COLL_RATE, tick=tick,
                   tick_every=0.5)
    rep.check(A.ep.alive() and B.charon.alive(), f"[{tag}] esptun and charon still running")
    ek = [p[1] for p in polls if p[1] is not None]
    sk = [p[2] for p in polls if p[2] is not None]
    rep.info(f"during the transfer: esptun showed {min(ek, default='-')}..{max(ek, default='-')} "
             f"CHILD_SAs, strongSwan {min(sk, default='-')}..{max(sk, default='-')} "
             f"({len(ek)}/{len(sk)} polls); esptun over time (s: children): " + ", ".join(
                 f"{p[0]:.0f}: {p[1]}" for p in polls[::4] if p[1] is not None))

    view = assert_settled(rep, tag, A, B)
    st = A.ep.status()
    an = collision_analysis(A, B)
    e_coll, s_coll = an["esptun"], an["strongswan"]
    crossings = wire_crossings(relay_log)
    elog = log_lines(A.ep.log)
    text = B.charon.log_text()
    n_ours = sum(1 for ln in elog if E_OURS_RX.search(ln))
    n_theirs = sum(1 for ln in elog if E_THEIRS_RX.search(ln))
    sw_child = len(set(SW_CHILD_RX.findall(text))) - 1
    rep.info(f"CHILD_SA rekeys: esptun's log: {n_ours} by esptun, {n_theirs} by strongSwan; "
             f"strongSwan's log: {sw_child} new CHILD_SAs after the first; "
             f"CREATE_CHILD_SA requests crossing on the wire (relay): {len(crossings)}")
    rep.info(f"collisions: esptun resolved {len(e_coll)} ("
             + ", ".join(f"keeping {w}, {who}'s exchange won" for _, w, who, _ in e_coll)
             + f"); strongSwan {len(s_coll)} ("
             + ", ".join(f"{wl}: {who}'s exchange won (net{{{n}}})" for _, wl, n, who, _, _
                         in s_coll)
             + f"); strongSwan's other collision lines: {an['detected'][:6]}")
    n = max(len(e_coll), len(s_coll))
    if n:  # run_collision_case() checks that there was one
        rep.info(f"[{tag}] CHILD_SA rekey collisions happened: esptun logged {len(e_coll)}, "
                 f"strongSwan {len(s_coll)}, {len(crossings)} crossing request pairs on the wire")
        # Both sides must agree on every winner (section 2.8.1 decides from
        # the four nonces, which both sides know).
        e_seq = [who for _, _, who, _ in e_coll]
        s_seq = [who for _, _, _, who, _, _ in s_coll]
        rep.check(e_seq == s_seq,
                  f"[{tag}] both sides resolved the same collisions the same way: esptun "
                  f"{e_seq}, strongSwan {s_seq} (whose exchange made the SA that stays)",
                  collision_timeline(A, B, relay_log, t_start))
        # Where strongSwan deletes the SA its own exchange made ("lost",
        # rekey/delete's "redundant") it names it: esptun must not keep it.
        kept = {w for _, w, _, _ in e_coll}
        bad = [(ln, sp) for _, wl, _, _, sp, ln in s_coll
               if wl in ("lost", "delete-redundant") and sp and sp[1] in kept]
        rep.check(not bad, f"[{tag}] no SA strongSwan deleted as redundant is the one esptun "
                  "kept", str(bad))
    for what, lines in (("esptun", [ln for ln in elog if re.search(
            r"refused|not found|failed|error|warning", ln, re.IGNORECASE)]),
                        ("strongSwan", [ln for ln in text.splitlines() if re.search(
                            r"TEMPORARY_FAILURE|CHILD_SA_NOT_FOUND|unable to|failed|"
                            r"rekey/delete collision", ln)])):
        if lines:
            rep.info(f"{what}'s log has {len(lines)} refusal/failure line(s), e.g. "
                     + " | ".join(ln.strip() for ln in lines[:3]))

    d = {k: delta(drops(st), drops(sts0), k) for k in drops(st)}
    rep.info(f"esptun drops during the case: {({k: v for k, v in d.items() if v}) or 'none'}")
    c0, c1 = ike_counters(sts0), ike_counters(st)
    rep.info("esptun ike.counters delta: " + ", ".join(
        f"{k} {delta(c1, c0, k)}" for k in c1 if isinstance(c1.get(k), int) and delta(c1, c0, k)))
    rep.check(d.get("unknown_spi", 0) <= MAX_UNKNOWN_SPI,
              f"[{tag}] esptun drops.unknown_spi {d.get('unknown_spi', 0)} <= {MAX_UNKNOWN_SPI}",
              json.dumps(drops(st)) + "\n" + collision_timeline(A, B, relay_log, t_start))
    rep.check(d.get("auth_failed", 0) <= MAX_ESP_AUTH_FAILED,
              f"[{tag}] esptun drops.auth_failed {d.get('auth_failed', 0)} <= "
              f"{MAX_ESP_AUTH_FAILED}", json.dumps(drops(st)))
    p = esptun_proc.peer(st, PEER)
    sas = esptun_sas(st)
    rep.info(f"esptun at the end: ike.sas {[sa_brief(s) for s in sas]}; data path sas_in "
             f"{[x.get('spi_hex') for x in p.get('sas_in') or []]}, sa_out "
             f"{(p.get('sa_out') or {}).get('spi_hex')}, sas_retiring {p.get('sas_retiring')}")
    if view:
        rep.check(len(p.get("sas_in") or []) <= 2,
                  f"[{tag}] esptun's data path holds {len(p.get('sas_in') or [])} inbound SA(s) "
                  "(<= 2: the CHILD_SA and at most one being replaced)", json.dumps(p)[:1500])
    if os.environ.get("ESPTUN_IKE_COLL_TIMELINE") or len(rep.failed) > failed0:
        print(f"--- [{tag}] rekey timeline (A esptun, B charon, R relay):\n"
              + collision_timeline(A, B, relay_log, t_start), flush=True)
    return n


def run_collision_case(rep, ctx, idx, case):
    """Case 9, repeated (fresh namespaces and daemons) while a run saw no
    collision, COLL_RUNS runs in all; none in any is a test-design failure."""
    for attempt in range(COLL_RUNS):
        n = run_case(rep, ctx, idx, case, attempt)
        if n is None:
            return
        left = COLL_RUNS - attempt - 1
        if n > 0 or not left:
            break
        rep.info(f"run {attempt + 1}: no CHILD_SA rekey collision in either log; running the "
                 f"case again (at most {left} more)")
    rep.check(n > 0, f"[case {idx + 1}] a CHILD_SA rekey collision happened: {n} in run "
              f"{attempt + 1} (of at most {COLL_RUNS})",
              f"test-design problem: no CHILD_SA rekey collision in {COLL_RUNS} runs of ~40 s "
              f"with equal rekey times and a {COLL_DELAY * 1000:.0f} ms one-way delay")


def body(rep, build):
    rep.section("reading charon's collision lines")
    check_log_reading(rep)
    sw_pair.run_cases(rep, build, CASES, {"collision": collision_body},
                      {"collision": run_collision_case})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_collision", body, tools=sw_pair.TOOLS)
