#!/usr/bin/python3
# test_ike_strongswan_rekey.py - esptun-gateway against strongSwan: CHILD
# and IKE rekeys under load, and PFS for CHILD_SAs.
#
#  5. Rekeys under load, esptun initiates: esptun rekey_time=6,
#     ike_rekey_time=13; strongSwan CHILD rekey_time=8s, life_time=20s,
#     rand_time=1s, IKE rekey_time=15s, over_time=10s (both sides rekey;
#     collisions may happen). 100 MB A -> B paced at 27 Mbit/s (~30 s, a
#     helper sender/receiver in this file) while esptun's status is polled:
#     SHA-256 equal, no stall (<= 1.5x the plan, no pause > 5 s), esptun's
#     child_rekeys >= 3 and ike_rekeys >= 1, strongSwan's log shows rekeys,
#     then exactly one IKE SA and one (sending) CHILD_SA on both sides with
#     the SPIs agreeing, esptun's drops.unknown_spi/auth_failed <= 5. TCP
#     retransmissions (and how many a DSACK proved spurious), UDP buffer
#     drops and strongSwan's ESP error lines are reported.
#  6. The same with strongSwan initiating and alone rekeying (esptun a
#     responder without endpoint, rekey_time=0, ike_rekey_time=0: every
#     rekey in esptun's log must be "by the peer"), 100 MB B -> A.
# 11. PFS for CHILD_SAs (RFC 7296 section 1.3.1): both sides with
#     esp_proposals "aes128gcm16-x25519", esptun initiates (IKE_AUTH carries
#     the proposal without the group: strongSwan's first CHILD_SA shows no
#     dh-group). esptun rekey_time=8 (7.2-8 s after each new CHILD_SA), and
#     strongSwan is made to rekey with `swanctl --rekey --child` at 2 and 12
#     s of a 70 MB A -> B transfer paced over ~21 s, so CHILD_SA rekeys
#     alternate between the sides without colliding (esptun's at ~9.5 and
#     ~19.5 s), and after the last one strongSwan's rekeyed SA (kept 5 s as
#     DELETED, its delete_rekeyed_delay) is gone >= 2 s before esptun's next
#     rekey, so both sides settle on one CHILD_SA. Asserted: SHA-256
#     equal, no stall, esptun's log has >= 2 rekeys of its own and >= 2 by
#     the peer, each with "PFS x25519", and nothing refused; then one
#     CHILD_SA on both sides whose strongSwan dh-group is CURVE_25519 (and
#     esptun's children[].pfs "x25519" when it reports it).
# 12. PFS with MODP-2048 and CBC, strongSwan initiating: esptun with
#     esp_proposals "aes256-sha256-modp2048", strongSwan with
#     "aes256-sha256-ecp256, aes256-sha256-modp2048" (esptun a responder
#     without endpoint, so IKE_AUTH arrives from strongSwan; its first
#     rekey sends an ECP-256 KE, esptun must answer INVALID_KE_PAYLOAD with
#     MODP-2048 and strongSwan retry with it), esptun rekey_time=8,
#     strongSwan made to rekey at 1.5 and 11 s of a 40 MB A -> B transfer
#     (~12 s; esptun's rekey at ~9 s). The same assertions with >= 1 rekey
#     of esptun's own, >= 2 by
#     strongSwan, "PFS modp2048" and dh-group MODP_2048.
#
#
# The topology, the set-up of each case and the checks every case makes
# (both sides' view of the SAs) are in tests/lib/sw_pair.py.
#
# usage: test_ike_strongswan_rekey.py BUILD_DIR   (root; needs strongSwan installed; BUILD_DIR holds
#        esptun-gateway and esptun-client)
# Environment (diagnostics): see tests/lib/sw_pair.py (ESPTUN_IKE_CASES,
# ESPTUN_IKE_LOGDIR, ESPTUN_IKE_SW_ESP_LOG).
"""esptun against strongSwan: rekeys under load and PFS (cases 5, 6, 11, 12)."""

import json
import os
import re
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import netns  # noqa: E402
import report  # noqa: E402
import sw_pair  # noqa: E402
from netns import TestError  # noqa: E402
from esptun_ike import PEER, drops, esptun_sas, ike_counters  # noqa: E402
from load_helpers import delta, paced_transfer, snmp  # noqa: E402
from sw_pair import (  # noqa: E402
    A_IN, B_IN, GCM_CHILD, GCM_IKE, MAX_ESP_AUTH_FAILED, MAX_UNKNOWN_SPI, SW_CHILD_RX,
    assert_settled, log_lines)

REKEY_XFER_BYTES = 100 * 1000 * 1000
# strongSwan's short timers for the rekey cases. swanctl's CHILD rand_time
# defaults to life_time - rekey_time, which would spread the rekey over the
# whole test, so it is set; the IKE SA's rand_time defaults to over_time.
SW_SHORT_TIMERS = dict(child_rekey_time=8, child_life_time=20, child_rand_time=1,
                       ike_rekey_time=15, ike_over_time=10)

CASES = [
    dict(num=5,
         title="rekeys under load, esptun initiates: esptun CHILD 6 s / IKE 13 s, strongSwan "
               "CHILD 8 s / IKE 15 s; 100 MB A -> B paced over ~30 s",
         kind="rekey", initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, transfer="a->b", rekey_time=6, ike_rekey_time=13,
         sw_cfg=SW_SHORT_TIMERS, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
    dict(num=6,
         title="rekeys under load, strongSwan initiates and alone rekeys (CHILD 8 s / IKE 15 s; "
               "esptun rekey_time=0, ike_rekey_time=0); 100 MB B -> A paced over ~30 s",
         kind="rekey", initiator="strongswan", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128-sha1", sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128-sha1",
         cipher="aes128-cbc-hmac-sha1", esn=False, transfer="b->a", rekey_time=0,
         ike_rekey_time=0, only_sw_rekeys=True, sw_cfg=SW_SHORT_TIMERS, expect_ike=GCM_IKE,
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 128,
                       "integ_alg": "HMAC_SHA1_96", "esn": False}),
    dict(num=11,
         title="PFS: esp_proposals aes128gcm16-x25519 on both sides, CHILD_SA rekeys by each "
               "side (esptun rekey_time=8, strongSwan made to rekey at 2/12 s); 70 MB A -> B",
         kind="pfs", initiator="esptun", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128gcm16-x25519", sw_ike="aes128gcm16-prfsha256-x25519",
         sw_esp="aes128gcm16-x25519", cipher="aes128-gcm", esn=False, rekey_time=8,
         ike_rekey_time=0, sw_cfg=dict(child_rekey_time="1h", ike_rekey_time="4h"),
         expect_ike=GCM_IKE, expect_child=dict(GCM_CHILD, dh_group="")),
    dict(num=12,
         title="PFS: esp_proposals aes256-sha256-modp2048 on both sides, strongSwan initiates; "
               "CHILD_SA rekeys by each side (esptun rekey_time=8, strongSwan at 1.5/11 s); "
               "40 MB A -> B",
         kind="pfs", initiator="strongswan", ike="aes128gcm16-prfsha256-x25519",
         esp="aes256-sha256-modp2048", sw_ike="aes128gcm16-prfsha256-x25519",
         sw_esp="aes256-sha256-ecp256,aes256-sha256-modp2048", cipher="aes256-cbc-hmac-sha256",
         esn=False,
         rekey_time=8, ike_rekey_time=0, sw_cfg=dict(child_rekey_time="1h", ike_rekey_time="4h"),
         pfs=dict(xfer=40 * 1000 * 1000, sw_at=(1.5, 11), group="modp2048", sw_group="MODP_2048",
                  ours=1, theirs=2, invalid_ke=True),
         expect_ike=GCM_IKE,
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 256,
                       "integ_alg": "HMAC_SHA2_256_128", "esn": False, "dh_group": ""}),
]


# --- case 5/6: rekeys under load ----------------------------------------------

SW_IKE_REKEYED_RX = re.compile(r"IKE_SA \S+\[\d+\] rekeyed between")
SW_COLLISION_RX = re.compile(r"collision", re.IGNORECASE)
SW_REKEY_LOG_RX = re.compile(r"rekey|CREATE_CHILD_SA|CHILD_SA \S+\{\d+\} established|delet|"
                             r"queueing|delaying|postpon", re.IGNORECASE)
SW_ESP_RX = re.compile(r"\[ESP\].*(fail|discard|could not|no matching|dropping|does not belong)",
                       re.IGNORECASE)
ESPTUN_REKEY_RX = {  # esptun's log lines per rekey kind and initiator
    "CHILD by esptun": re.compile(r": CHILD_SA rekeyed, SPIs"),
    "CHILD by strongSwan": re.compile(r": CHILD_SA rekeyed by the peer"),
    "IKE by esptun": re.compile(r": IKE SA rekeyed \("),
    "IKE by strongSwan": re.compile(r": IKE SA rekeyed by the peer"),
}


def rekey_body(rep, tag, case, A, B):
    sts0 = A.ep.status()
    snmp_a0, snmp_b0 = snmp(A.ns), snmp(B.ns)
    samples = []
    if case["transfer"] == "a->b":
        src, dst, addr = A, B, B_IN
    else:
        src, dst, addr = B, A, A_IN

    def tick(el):
        retrans = snmp(src.ns).get("Tcp.RetransSegs", 0)
        try:
            sas = esptun_sas(A.ep.status())
        except TestError as e:
            samples.append((el, None, str(e)))
            return
        samples.append((el, len(sas), sum(len(s.get("children") or []) for s in sas),
                        max((s.get("child_rekeys") or 0 for s in sas), default=0),
                        max((s.get("ike_rekeys") or 0 for s in sas), default=0), retrans))
    paced_transfer(rep, tag, src, dst, addr, REKEY_XFER_BYTES, tick=tick)
    rep.check(A.ep.alive() and B.charon.alive(), f"[{tag}] esptun and charon still running")
    bad = [s for s in samples if s[1] is None]
    rep.check(not bad, f"[{tag}] esptun's status answered all {len(samples)} polls during the "
              "transfer", str(bad[:3]))
    good = [s for s in samples if s[1] is not None]
    if good:
        rep.info(f"during the transfer esptun showed up to {max(s[1] for s in good)} IKE SAs and "
                 f"{max(s[2] for s in good)} CHILD_SAs at once for {PEER!r} (polled every ~1 s)")
        rep.info("esptun's rekey counters over time (s: child/ike): " + ", ".join(
            f"{s[0]:.0f}: {s[3]}/{s[4]}" for s in good[::3]))
        steps = [(b[0], b[5] - a[5], b[3] - a[3], b[4] - a[4]) for a, b in zip(good, good[1:])
                 if b[5] != a[5]]
        rep.info(f"{src.name}'s TCP retransmissions by second (t: +segments, +child/+ike "
                 "rekeys in that second): " + (", ".join(
                     f"{t:.0f}: +{r} ({c}/{i})" for t, r, c, i in steps) or "none"))
    view = assert_settled(rep, tag, A, B)
    st = A.ep.status()
    sas = esptun_sas(st)
    e = view[0] if view else (sas[0] if sas else {})
    cr, ir = e.get("child_rekeys"), e.get("ike_rekeys")
    rep.check(isinstance(cr, int) and cr >= 3,
              f"[{tag}] esptun ike.sas[].child_rekeys {cr} >= 3", json.dumps(sas)[:1500])
    rep.check(isinstance(ir, int) and ir >= 1,
              f"[{tag}] esptun ike.sas[].ike_rekeys {ir} >= 1", json.dumps(sas)[:1500])
    if case.get("only_sw_rekeys"):
        mine = [ln for ln in log_lines(A.ep.log) if re.search(
            r": (CHILD_SA|IKE SA) rekeyed(?! by the peer)", ln)]
        rep.check(not mine, f"[{tag}] esptun (rekey_time=0, ike_rekey_time=0) started no rekey "
                  "itself: every rekey in its log is 'by the peer'", "\n".join(mine[:5]))
    text = B.charon.log_text()
    sw_child = len(set(SW_CHILD_RX.findall(text))) - 1
    sw_ike = len(SW_IKE_REKEYED_RX.findall(text))
    coll = [ln for ln in text.splitlines() if SW_COLLISION_RX.search(ln)]
    # On failure: every line of strongSwan's log about rekeying, not just its
    # tail, so a missing rekey can be told from a refused or deferred one.
    rekey_lines = "\n".join(ln for ln in text.splitlines() if SW_REKEY_LOG_RX.search(ln))
    rep.check(sw_child >= 3, f"[{tag}] strongSwan's log: {sw_child} CHILD_SA rekeys "
              "('CHILD_SA net{N} established' after the first) >= 3", rekey_lines)
    rep.check(sw_ike >= 1, f"[{tag}] strongSwan's log: {sw_ike} IKE_SA rekeys ('IKE_SA ab[N] "
              "rekeyed between') >= 1", rekey_lines)
    elog = log_lines(A.ep.log)
    rep.info("rekeys in esptun's log: " + ", ".join(
        f"{k} {sum(1 for ln in elog if rx.search(ln))}" for k, rx in ESPTUN_REKEY_RX.items()))
    ecoll = [ln for ln in elog if re.search(r"collision|refused|lost", ln, re.IGNORECASE)]
    rep.info(f"rekey collisions: strongSwan logged {len(coll)} line(s) naming a collision"
             + (f" (e.g. {coll[0].strip()!r})" if coll else "")
             + f"; esptun logged {len(ecoll)} line(s) with collision/refused/lost"
             + (f" (e.g. {ecoll[0].strip()!r})" if ecoll else ""))
    d = {k: delta(drops(st), drops(sts0), k) for k in drops(st)}
    nz = {k: v for k, v in d.items() if v}
    rep.info(f"esptun drops during the case: {nz or 'none'}")
    c0, c1 = ike_counters(sts0), ike_counters(st)
    rep.info("esptun ike.counters delta: " + ", ".join(
        f"{k} {delta(c1, c0, k)}" for k in c1 if isinstance(c1.get(k), int) and delta(c1, c0, k)))
    rep.check(d.get("unknown_spi", 0) <= MAX_UNKNOWN_SPI,
              f"[{tag}] esptun drops.unknown_spi {d.get('unknown_spi', 0)} <= {MAX_UNKNOWN_SPI} "
              "(make-before-break: a rekey should lose no packet)", json.dumps(drops(st)))
    rep.check(d.get("auth_failed", 0) <= MAX_ESP_AUTH_FAILED,
              f"[{tag}] esptun drops.auth_failed {d.get('auth_failed', 0)} <= "
              f"{MAX_ESP_AUTH_FAILED}", json.dumps(drops(st)))
    snmp_a1, snmp_b1 = snmp(A.ns), snmp(B.ns)
    esp_lines = [ln for ln in text.splitlines() if SW_ESP_RX.search(ln)]
    rep.info(f"TCP retransmitted segments: A {delta(snmp_a1, snmp_a0, 'Tcp.RetransSegs')}, "
             f"B {delta(snmp_b1, snmp_b0, 'Tcp.RetransSegs')}; UDP receive-buffer drops: A "
             f"{delta(snmp_a1, snmp_a0, 'Udp.RcvbufErrors')}, B "
             f"{delta(snmp_b1, snmp_b0, 'Udp.RcvbufErrors')}; strongSwan [ESP] error lines "
             f"(ICV/replay/policy/no SA): {len(esp_lines)}"
             + (f", e.g. {esp_lines[0].strip()!r}" if esp_lines else ""))
    if view:
        ch = view[2]
        rep.info(f"strongSwan's last CHILD_SA: {ch.bytes_in} bytes in, {ch.bytes_out} out")


# --- case 11: perfect forward secrecy for CHILD_SAs ----------------------------

# Case 11's plan (case 12 sets its own with the case key "pfs").
PFS_PLAN = dict(xfer=70 * 1000 * 1000,  # ~21 s at PACED_RATE
                sw_at=(2, 12),  # s into the transfer: strongSwan rekeys the CHILD_SA
                group="x25519", sw_group="CURVE_25519", ours=2, theirs=2)


def pfs_body(rep, tag, case, A, B):
    plan = case.get("pfs", PFS_PLAN)
    group = plan["group"]
    ours_rx = re.compile(r": CHILD_SA rekeyed, SPIs .*PFS " + group)
    theirs_rx = re.compile(r": CHILD_SA rekeyed by the peer, SPIs .*PFS " + group)
    due = list(plan["sw_at"])
    asked = []

    def tick(el):
        if due and el >= due[0]:
            due.pop(0)
            p = B.charon.swanctl("--rekey", "--child", B.charon.cfg.child, check=False)
            asked.append((round(el, 1), p.returncode))
    paced_transfer(rep, tag, A, B, B_IN, plan["xfer"], tick=tick, tick_every=0.25)
    rep.info(f"strongSwan asked to rekey the CHILD_SA at (s, swanctl exit): {asked}")

    def counted():
        elog = log_lines(A.ep.log)
        return (sum(1 for ln in elog if ours_rx.search(ln)),
                sum(1 for ln in elog if theirs_rx.search(ln)))
    # esptun's last planned rekey falls shortly before the transfer's planned
    # end; on a busy machine the two may swap. Its timer keeps running: wait
    # for the rekeys rather than for the clock (what is checked is that they
    # happen, with PFS, and that both sides settle after them).
    t0 = time.monotonic()
    while (counted()[0] < plan["ours"] or counted()[1] < plan["theirs"]) and \
            time.monotonic() - t0 < 20:
        time.sleep(0.25)
    rep.info(f"rekeys (esptun's, strongSwan's) counted {time.monotonic() - t0:.1f} s after the "
             f"transfer: {counted()}")
    rep.check(A.ep.alive() and B.charon.alive(), f"[{tag}] esptun and charon still running")
    view = assert_settled(rep, tag, A, B)
    elog = log_lines(A.ep.log)
    ours = [ln for ln in elog if ours_rx.search(ln)]
    theirs = [ln for ln in elog if theirs_rx.search(ln)]
    plain = [ln for ln in elog if re.search(r": CHILD_SA rekeyed", ln) and "PFS" not in ln]
    refused = [ln for ln in elog if re.search(r"refused|INVALID_KE", ln)
               and not (plan.get("invalid_ke") and "answering INVALID_KE_PAYLOAD" in ln)]
    rep.check(len(ours) >= plan["ours"], f"[{tag}] esptun's log: {len(ours)} CHILD_SA rekeys of "
              f"its own with 'PFS {group}' >= {plan['ours']}", netns.tail(A.ep.log, 20))
    rep.check(len(theirs) >= plan["theirs"], f"[{tag}] esptun's log: {len(theirs)} CHILD_SA "
              f"rekeys by strongSwan with 'PFS {group}' >= {plan['theirs']}",
              netns.tail(A.ep.log, 20))
    rep.check(not plain and not refused, f"[{tag}] esptun's log: no CHILD_SA rekey without PFS "
              "and none refused", "\n".join((plain + refused)[:5]))
    if view:
        e, _, ch = view
        rep.equal(ch.dh_group, plan["sw_group"],
                  f"[{tag}] strongSwan list-sas: the rekeyed CHILD_SA's dh-group")
        kid = (e.get("children") or [{}])[0]
        if "pfs" in kid:
            rep.equal(kid.get("pfs"), group, f"[{tag}] esptun children[].pfs")
        else:
            rep.info("esptun's status reports no children[].pfs")
    text = B.charon.log_text()
    if plan.get("invalid_ke"):
        ike_lines = [ln for ln in elog if "answering INVALID_KE_PAYLOAD" in ln]
        sw_retry = [ln for ln in text.splitlines()
                    if re.search(r"requested " + plan["sw_group"], ln)]
        rep.check(len(ike_lines) == 1 and sw_retry,
                  f"[{tag}] group mismatch: esptun answered INVALID_KE_PAYLOAD once "
                  f"({ike_lines[0].strip() if ike_lines else None!r}) and strongSwan retried "
                  f"({sw_retry[0].strip() if sw_retry else None!r})",
                  "\n".join(ike_lines[:3]) + "\n" + netns.tail(B.charon.log, 20))
    sw_child = len(set(SW_CHILD_RX.findall(text))) - 1
    want = plan["ours"] + plan["theirs"]
    rep.check(sw_child >= want, f"[{tag}] strongSwan's log: {sw_child} CHILD_SA rekeys >= {want}",
              netns.tail(B.charon.log, 20))


def body(rep, build):
    sw_pair.run_cases(rep, build, CASES, {"rekey": rekey_body, "pfs": pfs_body})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_rekey", body, tools=sw_pair.TOOLS)
