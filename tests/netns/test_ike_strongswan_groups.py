#!/usr/bin/python3
# test_ike_strongswan_groups.py - IKEv2 interop with strongSwan 5.9: the IKE
# SA algorithms of certificate-era deployments (ECP-384, MODP-3072/4096,
# SHA-384/512), and the weak ones (MODP-1024, SHA-1) only with esptun's
# per-peer allow_weak opt-in.
#
# Cases (fresh namespaces and daemons each; only one IKE proposal on each
# side, so the SA can only come up with exactly these algorithms):
#  1. strongSwan initiates aes256-sha384-ecp384 (PRF follows: prfsha384) /
#     ESP aes256-sha256; ping both ways.
#  2. esptun initiates aes256gcm16-prfsha512-modp4096 / ESP aes128gcm16; ping.
#  3. strongSwan initiates aes128gcm16-prfsha384-modp3072 / ESP aes128gcm16; ping.
#  4. strongSwan initiates aes128-sha1-modp1024 (PRF HMAC-SHA-1) / ESP
#     aes128-sha1, esptun's peer has allow_weak = true and the same
#     proposal; the SA comes up, ping crosses, and esptun warned at start
#     naming the peer and sha1, prfsha1, modp1024, and again on SIGHUP.
#  5. strongSwan initiates aes128-sha1-modp1024 only; esptun's peer has no
#     opt-in (its proposals are strong): strongSwan is told
#     NO_PROPOSAL_CHOSEN, esptun logs what was offered, no SA anywhere.
#
# The topology and the checks of the cases that come up are in
# tests/lib/sw_pair.py.
#
# usage: test_ike_strongswan_groups.py BUILD_DIR   (root; needs strongSwan installed)
# Environment (diagnostics): see tests/lib/sw_pair.py (ESPTUN_IKE_CASES, ESPTUN_IKE_LOGDIR).
"""IKEv2 interop: esptun-gateway against strongSwan's charon, the IKE SA groups and PRFs."""

import os
import re
import signal
import sys

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import netns  # noqa: E402
import report  # noqa: E402
import sw_pair  # noqa: E402
from esptun_ike import PEER  # noqa: E402

CASES = [
    dict(num=1,
         title="strongSwan initiates: aes256-sha384-ecp384, ESP aes256-sha256",
         initiator="strongswan", ike="aes256-sha384-ecp384", esp="aes256-sha256",
         sw_ike="aes256-sha384-ecp384", sw_esp="aes256-sha256",
         cipher="aes256-cbc-hmac-sha256", esn=False,
         expect_ike={"encr_alg": "AES_CBC", "encr_keysize": 256,
                     "integ_alg": "HMAC_SHA2_384_192", "prf_alg": "PRF_HMAC_SHA2_384",
                     "dh_group": "ECP_384"},
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 256,
                       "integ_alg": "HMAC_SHA2_256_128", "esn": False}),
    dict(num=2,
         title="esptun initiates: aes256gcm16-prfsha512-modp4096, ESP aes128gcm16",
         initiator="esptun", ike="aes256gcm16-prfsha512-modp4096", esp="aes128gcm16",
         sw_ike="aes256gcm16-prfsha512-modp4096", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False,
         expect_ike={"encr_alg": "AES_GCM_16", "encr_keysize": 256,
                     "prf_alg": "PRF_HMAC_SHA2_512", "dh_group": "MODP_4096"},
         expect_child={"encr_alg": "AES_GCM_16", "encr_keysize": 128, "integ_alg": "",
                       "esn": False}),
    dict(num=3,
         title="strongSwan initiates: aes128gcm16-prfsha384-modp3072, ESP aes128gcm16",
         initiator="strongswan", ike="aes128gcm16-prfsha384-modp3072", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha384-modp3072", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False,
         expect_ike={"encr_alg": "AES_GCM_16", "encr_keysize": 128,
                     "prf_alg": "PRF_HMAC_SHA2_384", "dh_group": "MODP_3072"},
         expect_child={"encr_alg": "AES_GCM_16", "encr_keysize": 128, "integ_alg": "",
                       "esn": False}),
    dict(num=4,
         title="strongSwan initiates: aes128-sha1-modp1024, esptun's peer has allow_weak = true",
         initiator="strongswan", ike="aes128-sha1-modp1024", esp="aes128-sha1",
         sw_ike="aes128-sha1-modp1024", sw_esp="aes128-sha1", allow_weak=True,
         cipher="aes128-cbc-hmac-sha1", esn=False, kind="weak_warning",
         expect_ike={"encr_alg": "AES_CBC", "encr_keysize": 128, "integ_alg": "HMAC_SHA1_96",
                     "prf_alg": "PRF_HMAC_SHA1", "dh_group": "MODP_1024"},
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 128, "integ_alg": "HMAC_SHA1_96",
                       "esn": False}),
    dict(num=5,
         title="strongSwan offers only aes128-sha1-modp1024, esptun without the opt-in: "
               "NO_PROPOSAL_CHOSEN",
         initiator="strongswan", ike="aes256-sha256-modp2048", esp="aes128-sha1",
         sw_ike="aes128-sha1-modp1024", sw_esp="aes128-sha1", kind="refused"),
]


def weak_warning(rep, tag, case, A, B):
    """Case 4's extra: esptun warned once at start, naming the peer and the
    weak algorithms (its log is read after the SA came up), and again on a
    reload (SIGHUP, the config unchanged); the SA survives the reload."""
    rx = re.compile(rf"warn.*peer {re.escape(PEER)} uses weak algorithms \(sha1, prfsha1, "
                    r"modp1024\) by its allow_weak = true", re.IGNORECASE)

    def hits():
        with open(A.ep.log, errors="replace") as f:
            return [ln.strip() for ln in f if rx.search(ln)]
    at_start = hits()
    rep.check(len(at_start) == 1, f"[{tag}] esptun warned once at start naming peer {PEER!r} and "
              f"sha1, prfsha1, modp1024: {at_start[0] if at_start else None!r}",
              netns.tail(A.ep.log, 20))
    A.ep.proc.send_signal(signal.SIGHUP)
    try:
        netns.wait_until(lambda: len(hits()) >= 2, 5, interval=0.1,
                         what="esptun's weak-algorithm warning after SIGHUP")
    except netns.TestError:
        pass
    after = hits()
    rep.check(len(after) == 2 and "reload: " in after[-1],
              f"[{tag}] SIGHUP (config unchanged): the warning again, as a reload line: "
              f"{after[-1] if len(after) > 1 else None!r}", netns.tail(A.ep.log, 20))
    sw_pair.ping(rep, tag, A, sw_pair.B_IN, count=1)


def refused(rep, ctx, idx, case):
    """Case 5: strongSwan initiates with only MODP-1024/SHA-1 to an esptun
    peer without allow_weak; esptun answers NO_PROPOSAL_CHOSEN."""
    tag = f"case {idx + 1}"
    A, B, path = sw_pair.build_case(ctx, idx, case)
    A.ep = sw_pair.esptun_proc.Endpoint(ctx.build, A.ns, path, os.path.join(ctx.tmp, f"a{idx}.log"))
    ctx.logs += [A.ep.log, B.charon.log]
    ctx.configs.append(path)
    try:
        sw_pair.start_pair(rep, A, B, path, "esptun-gateway run", sw_pair.EsptunDown)
        ok, out = B.charon.initiate(timeout=5)
        rep.check(not ok, f"[{tag}] swanctl --initiate fails", out.strip()[-800:])
        sw_line = B.charon.log_search(r"received NO_PROPOSAL_CHOSEN notify")
        rep.check(sw_line is not None, f"[{tag}] strongSwan logs NO_PROPOSAL_CHOSEN from esptun: "
                  f"{sw_line.strip() if sw_line else None!r}", netns.tail(B.charon.log, 20))
        rx = re.compile(r"no IKE proposal in common; it offered aes128-sha1-prfsha1-modp1024")
        with open(A.ep.log, errors="replace") as f:
            line = next((ln.strip() for ln in f if rx.search(ln)), None)
        rep.check(line is not None, f"[{tag}] esptun logs the refused offer: {line!r}",
                  netns.tail(A.ep.log, 20))
        rep.check(not B.charon.list_sas(), "[case 5] strongSwan list-sas: no IKE_SA",
                  B.charon.list_sas_text())
        st = A.ep.status()
        ike, children, _ = sw_pair.esptun_ike(st)
        rep.check(not children and str(ike.get("state", "")).lower() != "established",
                  f"[{tag}] esptun status: no SA for {PEER!r}", str(ike)[:1000])
        sw_pair.ping(rep, tag, A, sw_pair.B_IN, count=1, expect=False)
    finally:
        sw_pair.stop_both(rep, tag, dict(case, wrong_psk=True), A, B)


def body(rep, build):
    sw_pair.run_cases(rep, build, CASES, {"weak_warning": weak_warning}, {"refused": refused})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_groups", body, tools=sw_pair.TOOLS)
