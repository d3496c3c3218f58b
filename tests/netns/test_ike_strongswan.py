#!/usr/bin/python3
# test_ike_strongswan.py - IKEv2 interop with strongSwan 5.9: esptun-gateway
# (case 10: esptun-client as a road warrior) against charon with its
# userspace ESP (kernel-libipsec), each in its own namespace; PSK, IKE in UDP
# 500/4500, ESP in UDP 4500. Both roles (esptun initiates / strongSwan
# initiates), three IKE suites (GCM + X25519, CBC/HMAC + MODP-2048, GCM +
# ECP-256 with PRF-SHA384) and three ESP suites, traffic both ways, 100 MB
# checksummed TCP transfers, a wrong PSK, CHILD and IKE rekeying under load,
# dead peer detection, an IKE junk flood, CHILD_SA rekey collisions, and a
# road-warrior client given a virtual IP and DNS from a strongSwan pool,
# with traffic selectors narrowed by strongSwan.
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
#  9. CHILD_SA rekey collisions (RFC 7296 section 2.8.1), esptun initiates,
#     through a userspace relay (R, tests/lib/udp_relay.py delay_main) that
#     holds every datagram 400 ms each way, so CREATE_CHILD_SA requests of
#     both sides cross: esptun rekey_time=8 (it jitters by up to -10%),
#     strongSwan CHILD rekey_time=8s, rand_time=0s (no randomization),
#     life_time=30s; no IKE rekeys. 30 MB A -> B paced at 6 Mbit/s (~40 s).
#     Collisions are read from both logs (esptun "CHILD_SA rekey collision
#     resolved, keeping SPI in X"; charon "CHILD_SA rekey collision won/lost")
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
#   netns A (client)                          netns B (charon, gateway)
#   tun ikcN 10.66.0.x/32 (from the pool)     lo 10.88.1.1/32; pool rw 10.66.0.0/24
#     route 10.88.1.0/24 -> tun (narrowed)      table 220: VIP via ipsec0 src 10.88.1.1
#   swa 192.168.88.1/24 ----------------- veth ----------------- swb 192.168.88.2/24
#
# Both sides are asserted: strongSwan's `swanctl --list-sas` (states,
# algorithms, traffic selectors, ports) and esptun's status JSON (the IKE SA
# of peer "sw" in peers[].ike or in ike.sas[] with "peer": "sw": its state,
# initiator, spi_i/spi_r, and children[].spi_in/spi_out/cipher/esn), with the
# IKE SPIs equal and the CHILD SPIs crosswise equal (our in = their out).
#
# usage: test_ike_strongswan.py BUILD_DIR   (root; needs strongSwan installed; BUILD_DIR
#        holds esptun-gateway and, for case 10, esptun-client)
# Environment (diagnostics): ESPTUN_IKE_CASES=5,7 runs only those cases;
# ESPTUN_IKE_LOGDIR=DIR keeps every log there; ESPTUN_IKE_SW_ESP_LOG=2 makes
# charon log every ESP packet (and drops for unknown SPIs, at level 2 only);
# ESPTUN_IKE_COLL_TIMELINE=1 prints case 9's merged rekey timeline (esptun,
# charon, relay) also when it passes.
# The file doubles as its own helper processes (--recv, --paced-send, --flood,
# --delay-relay).
"""IKEv2 interop: esptun-gateway against strongSwan's charon."""

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
sys.path.insert(0, LIB)

import esptun_conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
import strongswan  # noqa: E402
import transfer as transfer_lib  # noqa: E402
from netns import TestError  # noqa: E402

XFER_BYTES = 100 * 1000 * 1000
XFER_TIMEOUT = 60  # ~2-3 s expected through strongSwan's userspace ESP
ESTABLISH_TIMEOUT = 15
A_UL, B_UL = strongswan.UNDERLAY_A, strongswan.UNDERLAY_B
A_IN, B_IN = strongswan.INNER_A, strongswan.INNER_B
PEER = "sw"  # esptun's name for the strongSwan peer
PSK = strongswan.PSK
WRONG_PSK = "this-is-not-the-psk-strongswan-has-42"

# strongSwan's short timers for the rekey cases (see
# ../shared/reference/strongswan-peer/README.md: rand_time defaults to
# life_time - rekey_time, so it is set; IKE rand_time defaults to over_time).
SW_SHORT_TIMERS = dict(child_rekey_time=8, child_life_time=20, child_rand_time=1,
                       ike_rekey_time=15, ike_over_time=10)
GCM_IKE = {"encr_alg": "AES_GCM_16", "encr_keysize": 128, "prf_alg": "PRF_HMAC_SHA2_256",
           "dh_group": "CURVE_25519"}
GCM_CHILD = {"encr_alg": "AES_GCM_16", "encr_keysize": 128, "integ_alg": "", "esn": False}
FLOOD_NATT, FLOOD_IKE = 20000, 4000  # case 8: junk datagrams to :4500 and :500
# Case 9: the relay's addresses (A's side, B's side) and B's underlay there.
RELAY_A, RELAY_B, COLL_B_UL = "192.168.88.3", "192.168.89.3", "192.168.89.2"
COLL_DELAY = 0.4  # s, one way
# strongSwan's timers for case 9: the same CHILD rekey time as esptun's, no
# randomization (rand_time=0s is allowed and means none), no IKE rekey; a
# 2 s retransmit timeout (the round trip is 0.8 s); times in its log with ms.
SW_COLLISION_CFG = dict(child_rekey_time=8, child_life_time=30, child_rand_time=0,
                        ike_rekey_time="4h", retransmit_timeout=2.0, log_ms=True)
# Case 10: charon as a road-warrior gateway. The client asks for RW_ALLOWED,
# charon offers only RW_NET (RW_HOST on its lo) and a virtual IP of RW_POOL.
RW_ID = "carol@esptun.test"
RW_POOL_NAME, RW_POOL, RW_DNS = "rw", "10.66.0.0/24", "10.66.0.53"
RW_NET, RW_HOST, RW_ALLOWED = "10.88.1.0/24", "10.88.1.1", "10.88.0.0/16"
RW_XFER_BYTES = 100 * 1000 * 1000
RW_RELEASE_TIMEOUT = 5  # s from the client's SIGTERM to charon's lease offline

# initiator: "esptun" | "strongswan". sw_ike/sw_esp: strongSwan's proposals;
# ike/esp: esptun's. expect_ike/expect_child: strongSwan's list-sas view.
# cipher/esn: what esptun should report for the CHILD_SA (when it reports it).
CASES = [
    dict(title="esptun initiates: aes128gcm16-prfsha256-x25519, ESP aes128gcm16, 100 MB A -> B",
         initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, transfer="a->b",
         expect_ike={"encr_alg": "AES_GCM_16", "encr_keysize": 128,
                     "prf_alg": "PRF_HMAC_SHA2_256", "dh_group": "CURVE_25519"},
         expect_child={"encr_alg": "AES_GCM_16", "encr_keysize": 128, "integ_alg": "",
                       "esn": False}),
    dict(title="strongSwan initiates: aes256-sha256-modp2048, ESP aes128-sha1, 100 MB B -> A",
         initiator="strongswan", ike="aes256-sha256-modp2048", esp="aes128-sha1",
         sw_ike="aes256-sha256-modp2048", sw_esp="aes128-sha1", psk_file=True,
         cipher="aes128-cbc-hmac-sha1", esn=False, transfer="b->a",
         expect_ike={"encr_alg": "AES_CBC", "encr_keysize": 256,
                     "integ_alg": "HMAC_SHA2_256_128", "prf_alg": "PRF_HMAC_SHA2_256",
                     "dh_group": "MODP_2048"},
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 128, "integ_alg": "HMAC_SHA1_96",
                       "esn": False}),
    dict(title="esptun initiates: aes256gcm16-prfsha384-ecp256, ESP aes256-sha256 "
               "(esptun offers ESN and no ESN; libipsec takes no ESN)",
         initiator="esptun", ike="aes256gcm16-prfsha384-ecp256", esp="aes256-sha256",
         sw_ike="aes256gcm16-prfsha384-ecp256", sw_esp="aes256-sha256",
         cipher="aes256-cbc-hmac-sha256", esn=False,
         expect_ike={"encr_alg": "AES_GCM_16", "encr_keysize": 256,
                     "prf_alg": "PRF_HMAC_SHA2_384", "dh_group": "ECP_256"},
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 256,
                       "integ_alg": "HMAC_SHA2_256_128", "esn": False}),
    dict(title="wrong PSK: esptun initiates with a key strongSwan does not have",
         initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16", wrong_psk=True),
    dict(title="rekeys under load, esptun initiates: esptun CHILD 6 s / IKE 13 s, strongSwan "
               "CHILD 8 s / IKE 15 s; 100 MB A -> B paced over ~30 s",
         kind="rekey", initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, transfer="a->b", rekey_time=6, ike_rekey_time=13,
         sw_cfg=SW_SHORT_TIMERS, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
    dict(title="rekeys under load, strongSwan initiates and alone rekeys (CHILD 8 s / IKE 15 s; "
               "esptun rekey_time=0, ike_rekey_time=0); 100 MB B -> A paced over ~30 s",
         kind="rekey", initiator="strongswan", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128-sha1", sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128-sha1",
         cipher="aes128-cbc-hmac-sha1", esn=False, transfer="b->a", rekey_time=0,
         ike_rekey_time=0, only_sw_rekeys=True, sw_cfg=SW_SHORT_TIMERS, expect_ike=GCM_IKE,
         expect_child={"encr_alg": "AES_CBC", "encr_keysize": 128,
                       "integ_alg": "HMAC_SHA1_96", "esn": False}),
    dict(title="DPD: esptun initiates with dpd_interval=3; charon SIGKILLed, then started again",
         kind="dpd", initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, dpd_interval=3,
         expect_ike=GCM_IKE, expect_child=GCM_CHILD),
    dict(title=f"malformed IKE during traffic: {FLOOD_NATT} junk datagrams to :4500 (marker) "
               f"and {FLOOD_IKE} to :500 while 32 MB A -> B flow",
         kind="flood", initiator="esptun", ike="aes128gcm16-prfsha256-x25519", esp="aes128gcm16",
         sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
    dict(title="CHILD_SA rekey collisions through a 400 ms (one way) relay: esptun rekey_time=8, "
               "strongSwan CHILD 8 s (rand_time 0); 30 MB A -> B paced over ~40 s",
         kind="collision", relay=True, initiator="esptun", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128gcm16", sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, rekey_time=8, ike_rekey_time=0,
         sw_cfg=SW_COLLISION_CFG, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
    dict(title=f"road warrior: esptun-client ({RW_ID}) gets a virtual IP and DNS from charon's "
               f"pool; charon narrows {RW_ALLOWED} to {RW_NET}; 100 MB client -> {RW_HOST}",
         kind="roadwarrior", initiator="esptun", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128gcm16", sw_ike="aes128gcm16-prfsha256-x25519", sw_esp="aes128gcm16",
         cipher="aes128-gcm", esn=False, expect_ike=GCM_IKE, expect_child=GCM_CHILD),
    dict(title="PFS: esp_proposals aes128gcm16-x25519 on both sides, CHILD_SA rekeys by each "
               "side (esptun rekey_time=8, strongSwan made to rekey at 2/12 s); 70 MB A -> B",
         kind="pfs", initiator="esptun", ike="aes128gcm16-prfsha256-x25519",
         esp="aes128gcm16-x25519", sw_ike="aes128gcm16-prfsha256-x25519",
         sw_esp="aes128gcm16-x25519", cipher="aes128-gcm", esn=False, rekey_time=8,
         ike_rekey_time=0, sw_cfg=dict(child_rekey_time="1h", ike_rekey_time="4h"),
         expect_ike=GCM_IKE, expect_child=dict(GCM_CHILD, dh_group="")),
    dict(title="PFS: esp_proposals aes256-sha256-modp2048 on both sides, strongSwan initiates; "
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


# ---------------------------------------------------------------------------
# esptun's IKE config (the format being implemented; see the brief in the
# commit adding this test).

def _q(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(items):
    return "[" + ", ".join(_q(x) for x in items) + "]"


def esptun_ike_config(interface, control_socket, state_dir, peer, local_id="a.sw",
                      addresses=(f"{A_IN}/32",), listen=f"{A_UL}:4500", ike_port=500):
    """esptun_ike_config() - TOML for one esptun-gateway with one IKE peer.
    peer: dict with name, allowed_ips, remote_id, ike_proposals, esp_proposals
    and optionally endpoint, psk or psk_file, rekey_time, ike_rekey_time,
    dpd_interval, initiate."""
    lines = ["[tunnel]",
             f"interface = {_q(interface)}",
             f"addresses = {_list(addresses)}",
             f"listen = {_q(listen)}",
             f"ike_port = {ike_port}",
             f"local_id = {_q(local_id)}",
             'tun_io = "direct"',
             f"control_socket = {_q(control_socket)}",
             f"state_dir = {_q(state_dir)}",
             "",
             "[[peer]]",
             f"name = {_q(peer['name'])}"]
    if peer.get("endpoint"):
        lines.append(f"endpoint = {_q(peer['endpoint'])}")
    lines.append(f"allowed_ips = {_list(peer['allowed_ips'])}")
    if peer.get("psk_file"):
        lines.append(f"psk_file = {_q(peer['psk_file'])}")
    else:
        lines.append(f"psk = {_q(peer['psk'])}")
    lines += [f"remote_id = {_q(peer['remote_id'])}",
              f"ike_proposals = {_list(peer['ike_proposals'])}",
              f"esp_proposals = {_list(peer['esp_proposals'])}"]
    for key in ("rekey_time", "ike_rekey_time", "dpd_interval"):
        if peer.get(key) is not None:
            lines.append(f"{key} = {peer[key]}")
    if peer.get("initiate") is not None:
        lines.append(f"initiate = {'true' if peer['initiate'] else 'false'}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# esptun's status JSON, read defensively: the IKE part is new.

def spi_value(v):
    """spi_value() - an SPI given as int, "0x1234abcd" or "1234abcd"; None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 16)
        except ValueError:
            return None
    return None


def esptun_ike(status):
    """esptun_ike() - (ike dict or {}, [children with int spi_in/spi_out], where).
    Looks for peers[name=sw].ike (an object, or a list of IKE SAs) with its
    children (the designed place); failing that, a top-level ike_sas[] or
    ike.sas[] entry with "peer": "sw", and for the CHILD SPIs the peer's
    sa_in/sa_out (`where` says which was used)."""
    p = esptun_proc.peer(status, PEER)
    ike, where = p.get("ike"), "peers[].ike.children"
    if not ike:  # a global list of IKE SAs, each naming its peer?
        top = status.get("ike")
        for lst, name in ((status.get("ike_sas"), "ike_sas[]"),
                          (top.get("sas") if isinstance(top, dict) else top, "ike.sas[]")):
            if isinstance(lst, list):
                mine = [s for s in lst if isinstance(s, dict) and s.get("peer") == PEER]
                if mine:
                    ike, where = mine, f"{name} with peer {PEER!r}"
                    break
    if isinstance(ike, list):  # a list of IKE SAs: take an established one, else the first
        ike = next((s for s in ike if isinstance(s, dict) and s.get("state") == "established"),
                   ike[0] if ike else {})
    ike = ike if isinstance(ike, dict) else {}
    children = []
    for c in ike.get("children") or []:
        if isinstance(c, dict):
            children.append(dict(c, spi_in=spi_value(c.get("spi_in")),
                                 spi_out=spi_value(c.get("spi_out"))))
    if not children and "children" not in ike:
        si, so = p.get("sa_in") or {}, p.get("sa_out") or {}
        spi_in = spi_value(si.get("spi_hex", si.get("spi")))
        spi_out = spi_value(so.get("spi_hex", so.get("spi")))
        if spi_in and spi_out:
            children = [dict(spi_in=spi_in, spi_out=spi_out, cipher=p.get("cipher"),
                             esn=p.get("esn"))]
            where = "peers[].sa_in/sa_out (no peers[].ike.children)"
    return ike, children, where


def esptun_established(ep):
    """esptun_established() - (ike, children, where) once esptun reports the IKE SA
    established with a CHILD_SA that has both SPIs, else None."""
    ike, children, where = esptun_ike(ep.status())
    kids = [c for c in children if c.get("spi_in") and c.get("spi_out")]
    if str(ike.get("state", "")).lower() == "established" and kids:
        return ike, kids, where
    return None


def find_key(obj, key):
    """find_key() - every value of `key` anywhere in a JSON tree."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                out.append(v)
            out += find_key(v, key)
    elif isinstance(obj, list):
        for v in obj:
            out += find_key(v, key)
    return out


# ---------------------------------------------------------------------------

class Site:
    def __init__(self, name, ns):
        self.name, self.ns = name, ns
        # B: strongSwan's IKE_SA ends as it sees them (case 9: through the relay).
        self.sw_local, self.sw_remote = f"{B_UL}:4500", f"{A_UL}:4500"
        self.relay = None  # case 9 (A only): the relay process, its namespace and log


def ping(rep, tag, src, dst, count=3, expect=True):
    got, out = strongswan.ping(src.ns, dst, count=count, timeout=2)
    if expect:
        return rep.check(got == count, f"[{tag}] ping {src.name} -> {dst}: {count}/{count} "
                         "replies", out[-300:])
    return rep.check(got <= 0, f"[{tag}] ping {src.name} -> {dst} fails", out[-300:])


def transfer(rep, tag, src, dst, dst_addr):
    sent, got, secs = transfer_lib.run(src.ns, dst.ns, dst_addr, 5201, XFER_BYTES, XFER_TIMEOUT)
    mbit = XFER_BYTES * 8 / secs / 1e6
    rep.check(sent and got and sent.get("bytes") == XFER_BYTES and got.get("bytes") == XFER_BYTES
              and sent.get("sha256") == got.get("sha256"),
              f"[{tag}] {XFER_BYTES // 1000000} MB TCP {src.name} -> {dst.name} ({dst_addr}): "
              f"SHA-256 equal on both ends ({secs:.1f} s, {mbit:.0f} Mbit/s)",
              f"sender {sent}, receiver {got}")


def start_relay(ctx, key, a, b):
    """Case 9: netns R between A and B (two veths, two subnets) running
    udp_relay.delay_main with COLL_DELAY each way on UDP 4500, logging the
    IKE messages it carries. Returns (R, process, IKE log path)."""
    r = netns.Netns(netns.unique("ikesw", f"{key}-r"))
    netns.veth(a, r, "swa", "rla", [f"{A_UL}/24"], [f"{RELAY_A}/24"])
    netns.veth(r, b, "rlb", "swb", [f"{RELAY_B}/24"], [f"{COLL_B_UL}/24"])
    log = os.path.join(ctx.tmp, f"relay{key}.log")
    proc = r.spawn("/usr/bin/python3", SELF, "--delay-relay", f"{RELAY_A}:4500", f"{A_UL}:4500",
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
    peer = dict(name=PEER, allowed_ips=[f"{B_IN}/32"], remote_id="b.sw",
                ike_proposals=[case["ike"]], esp_proposals=[case["esp"]],
                dpd_interval=case.get("dpd_interval", 30),
                rekey_time=case.get("rekey_time"), ike_rekey_time=case.get("ike_rekey_time"))
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


def assert_established(rep, tag, case, A, B):
    """Both sides established; algorithms, selectors, ports; SPIs crosswise."""
    sw_ike, sw_child = B.charon.wait_established(ESTABLISH_TIMEOUT)
    try:
        e_ike, e_kids, where = netns.wait_until(lambda: esptun_established(A.ep),
                                                ESTABLISH_TIMEOUT, interval=0.1,
                                                what="esptun's status to show the IKE SA "
                                                     "established with a CHILD_SA")
    except TestError as e:
        st = A.ep.status()
        rep.check(False, f"[{tag}] esptun: IKE SA of {PEER!r} (peers[].ike or ike.sas[]) "
                  f"state \"established\" with children[].spi_in/spi_out ({e})",
                  json.dumps({"peer": esptun_proc.peer(st, PEER), "ike": st.get("ike")})[:2000])
        raise
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
    tag = f"case {idx + 1}" + (f" run {attempt + 1}" if attempt else "")
    A, B, path = build_case(ctx, idx, case, attempt)
    key = f"{idx}" if not attempt else f"{idx}r{attempt}"
    A.ep = esptun_proc.Endpoint(ctx.build, A.ns, path, os.path.join(ctx.tmp, f"a{key}.log"))
    ctx.logs += [A.ep.log, B.charon.log] + ([A.relay[2]] if A.relay else [])
    ctx.configs.append(path)
    if idx == 0:
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
            return {"rekey": rekey_body, "dpd": dpd_body, "flood": flood_body,
                    "collision": collision_body, "pfs": pfs_body}[kind](rep, tag, case, A, B)
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


# ---------------------------------------------------------------------------
# Cases 5-8: rekeying under load, DPD, malformed IKE during traffic.

SELF = os.path.abspath(__file__)
PACED_RATE = 27_000_000  # bit/s: 100 MB take ~30 s
REKEY_XFER_BYTES = 100 * 1000 * 1000
FLOOD_XFER_BYTES = 32 * 1000 * 1000  # ~9.5 s at PACED_RATE
SLOW_FACTOR = 1.5  # a paced transfer may take at most this times its plan
MAX_GAP_S = 5.0  # longest pause of the receiver's byte stream
MAX_UNKNOWN_SPI = 5  # "a handful": make-before-break should lose none
MAX_ESP_AUTH_FAILED = 5
FLOOD_SECS = 5.0
FLOOD_MAX_LOG_LINES = 30
DPD_STAY_DEAD = 10  # s the peer stays dead after esptun noticed (retries back off meanwhile)
SETTLE_TIMEOUT = 10  # rekeys every ~6 s: a quiet moment comes well within this


def esptun_sas(status):
    """esptun_sas() - every ike.sas[] entry of peer "sw" (any state)."""
    top = status.get("ike")
    lst = top.get("sas") if isinstance(top, dict) else None
    return [s for s in lst or [] if isinstance(s, dict) and s.get("peer") == PEER]


def ike_counters(status):
    top = status.get("ike")
    c = top.get("counters") if isinstance(top, dict) else None
    return c if isinstance(c, dict) else {}


def drops(status):
    d = status.get("drops")
    return d if isinstance(d, dict) else {}


def delta(after, before, key):
    return (after.get(key) or 0) - (before.get(key) or 0)


def snmp(ns):
    """snmp() - the namespace's /proc/net/snmp and /proc/net/netstat as
    {"Tcp.RetransSegs": n, "TcpExt.TCPTimeouts": n, ...}."""
    p = ns.run("cat", "/proc/net/snmp", "/proc/net/netstat", check=False)
    out, lines = {}, p.stdout.splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        proto, _, names = head.partition(":")
        _, _, nums = vals.partition(":")
        for k, v in zip(names.split(), nums.split()):
            try:
                out[f"{proto}.{k}"] = int(v)
            except ValueError:
                pass
    return out


def log_lines(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def sa_brief(s):
    """sa_brief() - one esptun IKE SA as a short string for reports."""
    kids = ", ".join(f"{c.get('spi_in')}/{c.get('spi_out')}{'' if c.get('sending') else ' (idle)'}"
                     for c in s.get("children") or [])
    return (f"{s.get('state')} {s.get('spi_i')}/{s.get('spi_r')} child_rekeys "
            f"{s.get('child_rekeys')} ike_rekeys {s.get('ike_rekeys')} children [{kids}]")


def settled_view(A, B):
    """settled_view() - (esptun SA, strongSwan IkeSa, strongSwan ChildSa) when
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
    return (e2[0], ike, ch), seen


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
    e, ike, ch = view
    p = esptun_proc.peer(A.ep.status(), PEER)
    out_spi = spi_value((p.get("sa_out") or {}).get("spi_hex"))
    ins = [spi_value(x.get("spi_hex")) for x in p.get("sas_in") or []]
    rep.check(out_spi == ch.spi_in and ch.spi_out in ins,
              f"[{tag}] esptun's data path sends on {ch.spi_in:08x} and takes {ch.spi_out:08x} "
              f"(peers[].sas_in: {len(ins)} inbound SA(s), sas_retiring {p.get('sas_retiring')})",
              json.dumps(p)[:1000])
    rep.check(True, f"[{tag}] one IKE SA ({ike.spi_i:016x}/{ike.spi_r:016x}) with one CHILD_SA "
              f"on both sides: esptun in {ch.spi_out:08x} = strongSwan out, esptun out "
              f"{ch.spi_in:08x} = strongSwan in, sending (settled after "
              f"{time.monotonic() - t0:.1f} s)")
    return view


# --- helper processes (this file run as --paced-send / --recv / --flood /
# --delay-relay) ---------------------------------------------------------------

def _emit(**kw):
    print(json.dumps(kw), flush=True)


def _helper_recv(bind, port):
    """Accept one TCP connection, hash everything; report bytes, SHA-256 and
    the longest pause between two reads (a stall shows up here)."""
    import hashlib
    import socket
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(1)
    srv.settimeout(30)
    _emit(ready=True)
    conn, _ = srv.accept()
    conn.settimeout(30)
    h, n, t0 = hashlib.sha256(), 0, time.monotonic()
    last, max_gap, gap_at = None, 0.0, 0.0
    while True:
        b = conn.recv(256 * 1024)
        now = time.monotonic()
        if not b:
            break
        if last is not None and now - last > max_gap:
            max_gap, gap_at = now - last, last - t0
        last = now
        h.update(b)
        n += len(b)
    _emit(bytes=n, sha256=h.hexdigest(), secs=round(time.monotonic() - t0, 3),
          max_gap=round(max_gap, 3), gap_at=round(gap_at, 2))


def _helper_paced_send(dest, port, total, rate):
    """Send `total` random bytes at `rate` bit/s (token schedule: byte n is
    due at n*8/rate s); report bytes, SHA-256 and how far it fell behind."""
    import hashlib
    import socket
    s = socket.create_connection((dest, port), timeout=30)
    s.settimeout(30)
    h, n, t0, behind = hashlib.sha256(), 0, time.monotonic(), 0.0
    block, chunk = os.urandom(4 << 20), 32 * 1024
    while n < total:
        due = t0 + n * 8 / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        else:
            behind = max(behind, now - due)
        if n and n % len(block) == 0:
            block = os.urandom(len(block))  # fresh data: a repeat could hide reordering
        off = n % len(block)
        b = block[off:off + min(chunk, total - n, len(block) - off)]
        s.sendall(b)
        h.update(b)
        n += len(b)
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):
        pass
    s.close()
    _emit(bytes=n, sha256=h.hexdigest(), secs=round(time.monotonic() - t0, 3),
          max_behind=round(behind, 3))


def _junk(rnd):
    """_junk() - (kind, bytes): one datagram body that is no valid IKE message
    of any SA. Never an IKE_SA_INIT request with a zero responder SPI and
    message ID 0 (that one would open a half-open SA: a different test)."""
    import struct
    k = rnd.random()

    def header(exchange, flags, length, spi_r=None, version=0x20, first=46, mid=None):
        return struct.pack("!QQBBBBII", rnd.getrandbits(64) | 1,
                           rnd.getrandbits(64) | 1 if spi_r is None else spi_r,
                           first, version, exchange, flags,
                           rnd.getrandbits(32) if mid is None else mid, length)

    if k < 0.30:  # raw junk of any length
        return "random", rnd.randbytes(rnd.randint(1, 1400))
    if k < 0.55:  # a plausible header with an SK payload of an unknown SA
        body = rnd.randbytes(rnd.randint(0, 400))
        sk = struct.pack("!BBH", rnd.choice((0, 33, 35, 41, 42)), 0, 4 + len(body)) + body
        msg = header(rnd.choice((35, 36, 37)), rnd.choice((0x00, 0x08, 0x20, 0x28)),
                     28 + len(sk)) + sk
        return "sk_unknown_sa", msg
    if k < 0.70:  # the same, truncated: the length field claims more
        body = rnd.randbytes(rnd.randint(8, 400))
        sk = struct.pack("!BBH", 33, 0, 4 + len(body)) + body
        msg = header(rnd.choice((35, 36, 37)), 0x08, 28 + len(sk)) + sk
        return "truncated", msg[:rnd.randint(1, len(msg) - 1)]
    if k < 0.78:  # shorter than an IKE header
        return "short_header", header(37, 0x08, 28)[:rnd.randint(1, 27)]
    if k < 0.86:  # IKE_SA_INIT "request" with a responder SPI, payloads cut short
        body = rnd.randbytes(rnd.randint(4, 300))
        sa = struct.pack("!BBH", 34, 0, 4 + len(body) + 20) + body  # claims 20 more bytes
        return "init_bad_request", header(34, 0x08, 28 + len(sa), first=33, mid=0) + sa
    if k < 0.93:  # IKE_SA_INIT "response" for an SA nobody started
        body = rnd.randbytes(rnd.randint(0, 300))
        sa = struct.pack("!BBH", 0, 0, 4 + len(body)) + body
        return "init_stray_response", header(34, 0x20, 28 + len(sa), first=33, mid=0) + sa
    # wrong version (IKEv1 / 3.0), wrong length field, random payload type
    body = rnd.randbytes(rnd.randint(0, 200))
    return "bad_version_or_length", header(rnd.choice((35, 37)), 0x08,
                                           rnd.choice((0, 27, 28 + len(body) + 100)),
                                           version=rnd.choice((0x10, 0x30, 0x20)),
                                           first=rnd.randint(0, 255)) + body


def _helper_flood(src, dst, n_natt, n_ike, secs, seed):
    """Send n_natt junk datagrams (non-ESP marker first) to dst:4500 and n_ike
    to dst:500, interleaved, spread over secs seconds, from src:<ephemeral>."""
    import random
    import socket
    rnd = random.Random(seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    plan = [4500] * n_natt + [500] * n_ike
    rnd.shuffle(plan)
    sent, kinds, errors = {"4500": 0, "500": 0}, {}, 0
    t0 = time.monotonic()
    for i, port in enumerate(plan):
        if i % 50 == 0:
            due = t0 + secs * i / len(plan)
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
        kind, body = _junk(rnd)
        data = b"\0\0\0\0" + body if port == 4500 else body
        try:
            s.sendto(data, (dst, port))
        except OSError:
            errors += 1
            continue
        sent[str(port)] += 1
        kinds[kind] = kinds.get(kind, 0) + 1
    _emit(sent=sent, kinds=kinds, errors=errors, secs=round(time.monotonic() - t0, 3),
          src_port=s.getsockname()[1])


def helper_main(argv):
    mode = argv[1]
    if mode == "--recv":
        _helper_recv(argv[2], int(argv[3]))
    elif mode == "--paced-send":
        _helper_paced_send(argv[2], int(argv[3]), int(argv[4]), float(argv[5]))
    elif mode == "--flood":
        _helper_flood(argv[2], argv[3], int(argv[4]), int(argv[5]), float(argv[6]), int(argv[7]))
    elif mode == "--delay-relay":
        import udp_relay
        sys.exit(udp_relay.delay_main(argv[2:]))
    else:
        raise SystemExit(f"unknown helper mode {mode!r}")


# --- the paced transfer -------------------------------------------------------

TCP_STATS = ("Tcp.OutSegs", "Tcp.RetransSegs", "TcpExt.TCPTimeouts", "TcpExt.TCPLossProbes",
             "TcpExt.TCPFastRetrans", "TcpExt.TCPSackRecovery", "TcpExt.TCPDSACKRecv",
             "TcpExt.TCPSACKReorder", "TcpExt.TCPSpuriousRTOs")

def paced_transfer(rep, tag, src, dst, dst_addr, nbytes, rate=PACED_RATE, tick=None,
                   tick_every=1.0, port=5201):
    """paced_transfer() - nbytes from src to dst_addr at `rate` bit/s; calls
    tick(elapsed) about every tick_every s meanwhile. Checks the SHA-256 on
    both ends, the time (<= SLOW_FACTOR x plan) and the longest pause of the
    receiver. Returns (ok, secs, receiver result)."""
    planned = nbytes * 8 / rate
    limit = planned * SLOW_FACTOR + 10
    recv = dst.ns.spawn("timeout", str(int(limit + 15)), "/usr/bin/python3", SELF, "--recv",
                        dst_addr, str(port), stdout=subprocess.PIPE, text=True)
    line = netns.read_line(recv.stdout, 10)
    if not line or not json.loads(line).get("ready"):
        netns.stop_process(recv)
        raise TestError(f"transfer receiver did not start: {line!r}")
    t0 = time.monotonic()
    send = src.ns.spawn("timeout", str(int(limit + 10)), "/usr/bin/python3", SELF,
                        "--paced-send", dst_addr, str(port), str(nbytes), str(rate),
                        stdout=subprocess.PIPE, text=True)
    tcp0 = snmp(src.ns)
    sent, next_tick, deadline = None, t0, t0 + limit + 12
    while time.monotonic() < deadline:
        if tick and time.monotonic() >= next_tick:
            next_tick = time.monotonic() + tick_every
            tick(time.monotonic() - t0)
        line = netns.read_line(send.stdout, 0.1)
        if line is None:
            continue
        if line == "":  # EOF: the sender exited without its result line
            break
        sent = json.loads(line)
        break
    secs = time.monotonic() - t0
    try:
        out, _ = recv.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        recv.kill()
        out, _ = recv.communicate()
    got = json.loads(out.strip().splitlines()[-1]) if out and out.strip() else {}
    netns.stop_process(send, timeout=5)
    tcp1 = snmp(src.ns)
    real = delta(tcp1, tcp0, "Tcp.RetransSegs") - delta(tcp1, tcp0, "TcpExt.TCPDSACKRecv")
    rep.info(f"sender ({src.name}) TCP: " + ", ".join(
        f"{k.split('.')[1]} {delta(tcp1, tcp0, k)}" for k in TCP_STATS)
        + f"; retransmissions not proven spurious by a DSACK: {max(0, real)}")
    ok = rep.check(sent and got and sent.get("bytes") == nbytes and got.get("bytes") == nbytes
                   and sent.get("sha256") == got.get("sha256"),
                   f"[{tag}] {nbytes // 1000000} MB TCP {src.name} -> {dst.name} paced at "
                   f"{rate / 1e6:.0f} Mbit/s: SHA-256 equal on both ends",
                   f"sender {sent}, receiver {got}")
    rep.check(secs <= planned * SLOW_FACTOR,
              f"[{tag}] no stall: took {secs:.1f} s for a plan of {planned:.1f} s "
              f"(limit {SLOW_FACTOR}x = {planned * SLOW_FACTOR:.1f} s)", f"sender {sent}")
    gap = got.get("max_gap")
    rep.check(gap is not None and gap <= MAX_GAP_S,
              f"[{tag}] longest pause of the received stream {gap} s at t={got.get('gap_at')} s "
              f"(<= {MAX_GAP_S} s); the sender fell behind its schedule by at most "
              f"{(sent or {}).get('max_behind')} s", f"receiver {got}")
    return ok, secs, got


# --- case 5/6: rekeys under load ----------------------------------------------

# 5.9 logs "inbound CHILD_SA net{N} established" and "outbound ..." for one
# CHILD_SA when it delays the outbound SA (responder of a rekey): count N once.
SW_CHILD_RX = re.compile(r"CHILD_SA \S+\{(\d+)\} established with SPIs")
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
    inbox = delta(c1, c0, "inbox_dropped")
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
    rep.check(total - lost - 5 <= got <= total + 5 and got >= 0.5 * total,
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
SW_COLL_RX = re.compile(r"CHILD_SA rekey collision (won|lost), deleting (old|redundant) "
                        r"child \S+\{(\d+)\}")
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
        m = SW_COLL_RX.search(ln)
        if m:
            # "won": strongSwan's exchange made the SA that stays; "lost": esptun's
            sw.append((stamp_secs(ln), m.group(1), m.group(3),
                       "strongSwan" if m.group(1) == "won" else "esptun",
                       spis.get(m.group(3)), ln.strip()))
        elif SW_DETECT_RX.search(ln) or "rekey/delete collision" in ln:
            detected.append(ln.strip())
    return dict(esptun=e, strongswan=sw, detected=detected, ours=ours, theirs=theirs)


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
    if n:
        rep.check(True, f"[{tag}] CHILD_SA rekey collisions happened: esptun logged {len(e_coll)}, "
                  f"strongSwan {len(s_coll)}, {len(crossings)} crossing request pairs on the wire")
        # Both sides must agree on every winner (section 2.8.1 decides from
        # the four nonces, which both sides know).
        e_seq = [who for _, _, who, _ in e_coll]
        s_seq = [who for _, _, _, who, _, _ in s_coll]
        rep.check(e_seq == s_seq,
                  f"[{tag}] both sides resolved the same collisions the same way: esptun "
                  f"{e_seq}, strongSwan {s_seq} (whose exchange made the SA that stays)",
                  collision_timeline(A, B, relay_log, t_start))
        # strongSwan's "lost" names the SA it deletes: esptun must not keep it.
        kept = {w for _, w, _, _ in e_coll}
        bad = [(ln, sp) for _, wl, _, _, sp, ln in s_coll
               if wl == "lost" and sp and sp[1] in kept]
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
        if n is None or n > 0:
            return
        left = COLL_RUNS - attempt - 1
        rep.info(f"run {attempt + 1}: no CHILD_SA rekey collision in either log"
                 + (f"; running the case again (at most {left} more)" if left else ""))
    rep.check(False, f"[case {idx + 1}] test-design problem: no CHILD_SA rekey collision in "
              f"{COLL_RUNS} runs of ~40 s with equal rekey times and a {COLL_DELAY * 1000:.0f} ms "
              "one-way delay")


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
        mbit = RW_XFER_BYTES * 8 / secs / 1e6
        rep.check(sent and got and sent.get("bytes") == RW_XFER_BYTES
                  and got.get("bytes") == RW_XFER_BYTES and sent.get("sha256") == got.get("sha256"),
                  f"[{tag}] {RW_XFER_BYTES // 1000000} MB TCP client -> {RW_HOST}: SHA-256 equal "
                  f"on both ends ({secs:.1f} s, {mbit:.0f} Mbit/s)",
                  f"sender {sent}, receiver {got}")
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
    try:
        e_ike, e_kids, where = netns.wait_until(lambda: esptun_established(A.ep),
                                                ESTABLISH_TIMEOUT, interval=0.1,
                                                what="esptun-client's status to show the IKE "
                                                     "SA established with a CHILD_SA")
    except TestError as e:
        st = A.ep.status_or_empty()
        rep.check(False, f"[{tag}] esptun-client: IKE SA of {PEER!r} established with a "
                  f"CHILD_SA within {ESTABLISH_TIMEOUT} s ({str(e).splitlines()[0]})",
                  f"ike: {json.dumps(st.get('ike'))[:2000]}\nlog:\n{netns.tail(A.ep.log, 15)}")
        raise
    rep.check(True, f"[{tag}] esptun-client: IKE SA of {PEER!r} established "
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
    netns.require_environment(("ip", "ping", "timeout", "unshare", "mount"))
    strongswan.require_tools()

    class Ctx:
        pass

    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.logs, ctx.configs = build, netns.make_tempdir("ikesw"), [], []
    ctx.check_ok = True

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
    for idx, case in enumerate(CASES):
        if chosen is not None and idx + 1 not in chosen:
            continue
        rep.section(f"case {idx + 1}/{len(CASES)}: {case['title']}")
        t0 = time.monotonic()
        try:
            if case.get("kind") == "collision":
                run_collision_case(rep, ctx, idx, case)
            elif case.get("kind") == "roadwarrior":
                run_roadwarrior_case(rep, ctx, idx, case)
            else:
                run_case(rep, ctx, idx, case)
        except TestError as e:
            first, _, rest = str(e).partition("\n")
            rep.check(False, f"[case {idx + 1}] {first}", rest.strip()[:2000])
            if isinstance(e, EsptunDown) and not ctx.check_ok:
                # check and run both refuse the IKE config: every case would
                # fail the same way. Stop here (the test has failed).
                rep.check(False, f"cases {idx + 2}-{len(CASES)} not run: this esptun-gateway "
                          "refuses the IKE peer config (check and run)")
                break
        rep.info(f"case {idx + 1} took {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--recv", "--paced-send", "--flood",
                                             "--delay-relay"):
        helper_main(sys.argv)  # a helper process of cases 5-9, inside a namespace
        sys.exit(0)
    report.main("netns/ike_strongswan", body, tools=("ip", "ping", "timeout", "unshare", "mount"))
