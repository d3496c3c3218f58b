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
]


def body(rep, build):
    sw_pair.run_cases(rep, build, CASES, {})


if __name__ == "__main__":
    report.main("netns/ike_strongswan", body, tools=sw_pair.TOOLS)
