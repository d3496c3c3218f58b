#!/usr/bin/python3
# test_ike_strongswan.py - IKEv2 interop with strongSwan 5.9 (esptun-gateway
# against charon): both roles, three IKE and three ESP suites, 100 MB
# checksummed transfers, a wrong PSK.
#
# Cases (fresh namespaces and daemons each):
#  1. esptun initiates (IKE_SA_INIT straight to 4500 with the non-ESP marker):
#     aes128gcm16-prfsha256-x25519 / ESP aes128gcm16; ping, 100 MB A -> B.
#  2. strongSwan initiates (port 500, then 4500), esptun a pure responder
#     (no endpoint, PSK from psk_file): aes256-sha256-modp2048 / ESP
#     aes128-sha1; ping, 100 MB B -> A.
#  3. esptun initiates: aes256gcm16-prfsha384-ecp256 / ESP aes256-sha256
#     offered with and without ESN; ping. strongSwan's kernel-libipsec cannot
#     install ESN SAs ("IPsec SA: ESN not supported", see
#     `tests/lib/strongswan.py --selfcheck`), so strongSwan accepts only
#     no-ESN and both sides must agree on ESN off.
#  4. Wrong PSK (esptun initiates): both sides log the authentication
#     failure, no SA anywhere, ping fails.
# 13. IKE fragmentation (RFC 7383) both ways: 30 more networks on B's side
#     make both IKE_AUTH messages long; esptun's ike_fragment_size 576 and
#     charon.fragment_size 400 cut them, each side reassembles the other's
#     (charon's log and esptun's counters say so); ping. Fast: no transfer.
#
# The topology, the set-up of each case and the checks every case makes
# (both sides' view of the SAs) are in tests/lib/sw_pair.py.
#
# usage: test_ike_strongswan.py BUILD_DIR   (root; needs strongSwan installed; BUILD_DIR holds
#        esptun-gateway and esptun-client)
# Environment (diagnostics): see tests/lib/sw_pair.py (ESPTUN_IKE_CASES,
# ESPTUN_IKE_LOGDIR, ESPTUN_IKE_SW_ESP_LOG).
"""IKEv2 interop: esptun-gateway against strongSwan's charon, cases 1-4."""

import os
import sys

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import report  # noqa: E402
import sw_pair  # noqa: E402

# initiator: "esptun" | "strongswan". sw_ike/sw_esp: strongSwan's proposals;
# ike/esp: esptun's. expect_ike/expect_child: strongSwan's list-sas view.
# cipher/esn: what esptun should report for the CHILD_SA (when it reports it).

# Case 13: networks on B's side that only lengthen the traffic selectors.
FRAG_NETS = [f"10.77.{i}.0/24" for i in range(1, 31)]

CASES = [
    dict(num=1,
         title="esptun initiates: aes128gcm16-prfsha256-x25519, ESP aes128gcm16, 100 MB A -> B",
         initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, transfer="a->b",
         expect_ike={"encr_alg": "AES_GCM_16", "encr_keysize": 128,
                     "prf_alg": "PRF_HMAC_SHA2_256", "dh_group": "CURVE_25519"},
         expect_child={"encr_alg": "AES_GCM_16", "encr_keysize": 128, "integ_alg": "",
                       "esn": False}),
    dict(num=2,
         title="strongSwan initiates: aes256-sha256-modp2048, ESP aes128-sha1, 100 MB B -> A",
         initiator="strongswan", ike="aes256-sha256-modp2048", esp="aes128-sha1",
         sw_ike="aes256-sha256-modp2048", sw_esp="aes128-sha1", psk_file=True,
         cipher="aes128-cbc-hmac-sha1", esn=False, transfer="b->a",
         expect_ike={"encr_alg": "AES_CBC", "encr_keysize": 256,
                     "integ_alg": "HMAC_SHA2_256_128", "prf_alg": "PRF_HMAC_SHA2_256",
                     "dh_group": "MODP_2048"},
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 128, "integ_alg": "HMAC_SHA1_96",
                       "esn": False}),
    dict(num=3,
         title="esptun initiates: aes256gcm16-prfsha384-ecp256, ESP aes256-sha256 "
               "(esptun offers ESN and no ESN; libipsec takes no ESN)",
         initiator="esptun", ike="aes256gcm16-prfsha384-ecp256", esp="aes256-sha256",
         sw_ike="aes256gcm16-prfsha384-ecp256", sw_esp="aes256-sha256",
         cipher="aes256-cbc-hmac-sha256", esn=False,
         expect_ike={"encr_alg": "AES_GCM_16", "encr_keysize": 256,
                     "prf_alg": "PRF_HMAC_SHA2_384", "dh_group": "ECP_256"},
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 256,
                       "integ_alg": "HMAC_SHA2_256_128", "esn": False}),
    dict(num=4,
         title="wrong PSK: esptun initiates with a key strongSwan does not have",
         initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16", wrong_psk=True),
    dict(num=13,
         title="IKE fragmentation both ways: esptun ike_fragment_size 576, "
               "charon.fragment_size 400 (RFC 7383)",
         initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, kind="fragments",
         extra_allowed_ips=FRAG_NETS, ike_fragment_size=576,
         sw_cfg=dict(fragment_size=400, local_ts=",".join([f"{sw_pair.B_IN}/32"] + FRAG_NETS)),
         expect_ike=sw_pair.GCM_IKE, expect_child=sw_pair.GCM_CHILD),
]


def fragments_body(rep, tag, case, A, B):
    """Case 13: both IKE_AUTH messages went as fragments and were reassembled.
    charon logs (ike level 1) "splitting IKE message (N bytes) into M
    fragments" and "received fragment #i of M, reassembled fragmented IKE
    message (N bytes)"; esptun counts what it sent and took."""
    split = B.charon.log_search(r"splitting IKE message \(\d+ bytes\) into \d+ fragments")
    rep.check(split, f"[{tag}] charon sent its IKE_AUTH response as fragments", split or
              "\n".join(ln for ln in B.charon.log_text().splitlines() if "IKE_AUTH" in ln)[-1500:])
    joined = B.charon.log_search(r"reassembled fragmented IKE message")
    rep.check(joined, f"[{tag}] charon reassembled esptun's fragmented IKE_AUTH request",
              "\n".join(ln for ln in B.charon.log_text().splitlines() if "fragment" in ln)[-1500:])
    c = (A.ep.status().get("ike") or {}).get("counters") or {}
    rep.check(c.get("fragments_sent", 0) >= 2 and c.get("fragments_received", 0) >= 2 and
              c.get("fragments_dropped") == 0 and c.get("bad_icv") == 0,
              f"[{tag}] esptun sent {c.get('fragments_sent')} fragments and reassembled "
              f"{c.get('fragments_received')} (none dropped, no bad ICV)", str(c))


def body(rep, build):
    sw_pair.run_cases(rep, build, CASES, {"fragments": fragments_body})


if __name__ == "__main__":
    report.main("netns/ike_strongswan", body, tools=sw_pair.TOOLS)
