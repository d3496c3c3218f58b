#!/usr/bin/python3
# test_ike_strongswan_certs.py - IKEv2 certificate authentication against
# strongSwan 5.9 (charon, an independent implementation): RFC 7427 Digital
# Signature AUTH with CERT, CERTREQ and SIGNATURE_HASH_ALGORITHMS, chains
# through an intermediate CA, and the refusals.
#
# A PKI is made at test time (tests/lib/test_pki.py, python3-cryptography;
# strongswan-pki is not among the packages, and the library makes CRLs
# without an openssl-ca database):
# root CA -> intermediate CA -> a.sw (esptun) and b.sw (strongSwan), each
# with its name as DNS subjectAltName. Each side trusts the root only and
# gets the intermediate in the peer's CERT payloads.
#
# Cases (fresh namespaces and daemons each; topology of tests/lib/sw_pair.py):
#  1. strongSwan initiates, esptun-gateway responds: esptun RSA-2048,
#     strongSwan ECDSA P-256; SA up, ping both ways, esptun's status names
#     the peer's key and certificate. Both sides' fragment size is 576
#     bytes, so each IKE_AUTH crosses as RFC 7383 fragments: strongSwan logs
#     that it reassembled ours, our counters show we sent and reassembled.
#  2. esptun initiates, strongSwan responds: esptun ECDSA P-384, strongSwan
#     RSA-2048; SA up, fragments both ways, ping both ways.
#  3. strongSwan initiates with a revoked certificate (esptun has both CAs'
#     CRLs, the intermediate's listing b.sw): esptun logs "revoked" and
#     answers AUTHENTICATION_FAILED, which strongSwan logs; no SA, no ping.
#  4. esptun initiates to a strongSwan whose certificate is from another CA:
#     esptun logs "unknown CA"; no SA, no ping.
#  5. esptun initiates with rsa_pss = true (RSA-2048), strongSwan P-256:
#     strongSwan logs that it verified our AUTH as RSA_EMSA_PSS (SHA2-256,
#     32-byte salt).
#  6. strongSwan initiates with charon.rsa_pss = yes (RSA-2048), esptun
#     P-256: strongSwan logs signing RSA_EMSA_PSS, esptun's status peer_auth
#     names RSASSA-PSS.
#  7. strongSwan initiates, Ed25519 on both sides (RFC 8420): each verifies
#     the other's Ed25519 AUTH (strongSwan logs ED25519 both ways, esptun's
#     peer_auth names Ed25519).
#  8. the underlay's MTU is 1280 and both sides keep their default fragment
#     size (1280, whole IP datagrams): strongSwan initiates, RSA-2048 keys
#     and the intermediate on both sides make each IKE_AUTH larger than the
#     path MTU, and it crosses as RFC 7383 fragments both ways.
#  9. strongSwan initiates with a certificate that expired yesterday:
#     esptun logs "expired" and answers AUTHENTICATION_FAILED; no SA, no ping.
#  Cases 5-8 check SA, ping and fragments as case 1 does. (Not here: an
#  identity its certificate does not name; strongSwan never sends one, it
#  falls back to the certificate's subject. engine_cert_test covers it.)
#
# usage: test_ike_strongswan_certs.py BUILD_DIR   (root; strongSwan and
#        python3-cryptography installed)
"""IKEv2 interop with certificates: esptun-gateway against strongSwan's charon."""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
import strongswan  # noqa: E402
import sw_eap  # noqa: E402
import sw_pair  # noqa: E402
import test_pki  # noqa: E402
from esptun_ike import PEER, esptun_ike_config  # noqa: E402
from test_pki import write  # noqa: E402

A_UL, B_UL, A_IN, B_IN = sw_pair.A_UL, sw_pair.B_UL, sw_pair.A_IN, sw_pair.B_IN
TIMEOUT = sw_pair.ESTABLISH_TIMEOUT
# IKE fragment size (RFC 7383; whole IP datagrams) on both sides: a
# certificate chain makes every IKE_AUTH longer, so both directions are
# fragmented and reassembled by the other implementation.
FRAGMENT_SIZE = 576

CASES = [
    dict(num=1, kind="certs", initiator="strongswan", a_key="rsa", b_key="p256",
         title="strongSwan initiates: esptun RSA-2048, strongSwan ECDSA P-256, via an intermediate",
         peer_auth="ECDSA-P256"),
    dict(num=2, kind="certs", initiator="esptun", a_key="p384", b_key="rsa",
         title="esptun initiates: esptun ECDSA P-384, strongSwan RSA-2048, via an intermediate",
         peer_auth="RSA-2048"),
    dict(num=3, kind="certs", initiator="strongswan", a_key="p256", b_key="p256", revoked=True,
         title="strongSwan initiates with a revoked certificate: esptun refuses it",
         reason="revoked"),
    dict(num=4, kind="certs", initiator="esptun", a_key="p256", b_key="p256", other_ca=True,
         title="esptun initiates to a strongSwan whose certificate has another CA: refused",
         reason="unknown CA"),
    # sw_verified / sw_signed: a regex for the scheme strongSwan's log names
    # for our AUTH ("authentication of 'a.sw' with X successful") and for its
    # own; PSS as RSA_EMSA_PSS_<hash>_SALT_<bytes>, so ours is SHA2-256 with a
    # salt as long as the hash.
    dict(num=5, kind="certs", initiator="esptun", a_key="rsa", b_key="p256", a_pss=True,
         title="esptun initiates with rsa_pss = true: strongSwan verifies RSASSA-PSS",
         peer_auth="ECDSA-P256", sw_verified="RSA_EMSA_PSS_SHA2_256_SALT_32"),
    dict(num=6, kind="certs", initiator="strongswan", a_key="p256", b_key="rsa", sw_pss=True,
         title="strongSwan initiates signing RSASSA-PSS (charon.rsa_pss): esptun verifies it",
         peer_auth="RSA-2048, RSASSA-PSS", sw_signed=r"RSA_EMSA_PSS_SHA2_\d+_SALT_\d+"),
    dict(num=7, kind="certs", initiator="strongswan", a_key="ed25519", b_key="ed25519",
         title="strongSwan initiates: Ed25519 both ways (RFC 8420)",
         peer_auth="Ed25519", sw_verified="ED25519", sw_signed="ED25519"),
    dict(num=8, kind="certs", initiator="strongswan", a_key="rsa", b_key="rsa", mtu=1280,
         title="underlay MTU 1280, default fragment sizes: RSA chains cross as fragments",
         peer_auth="RSA-2048"),
    dict(num=9, kind="certs", initiator="strongswan", a_key="p256", b_key="p256", expired=True,
         title="strongSwan initiates with an expired certificate: esptun refuses it",
         reason="expired"),
]

# swanctl's folder for each key kind: Ed25519 keys are PKCS#8 (they have no
# "traditional" PEM form).
SW_KEY_DIR = {"rsa": "rsa", "p256": "ecdsa", "p384": "ecdsa", "ed25519": "pkcs8"}


def make_files(tmp, key, case):
    """The PKI of a case: esptun's files (dict of config keys) and strongSwan's
    SWANCTL_DIR (x509/, x509ca/, rsa/, ecdsa/ or pkcs8/)."""
    pki = test_pki.Pki()
    a = pki.issue("a.sw", case["a_key"])
    b_pki = test_pki.Pki("Other Root") if case.get("other_ca") else pki
    b = b_pki.issue("b.sw", case["b_key"])
    if case.get("expired"):  # valid from ten days ago until yesterday
        b = test_pki.Cert("b.sw", test_pki.new_key(case["b_key"]), issuer=b_pki.inter,
                          dns=("b.sw",), days=(-10, -1))
    d = os.path.join(tmp, f"pki{key}")
    ca = os.path.join(d, "ca")
    os.makedirs(ca)
    esptun = dict(cert_file=write(os.path.join(d, "a.pem"), a.pem()),
                  private_key_file=write(os.path.join(d, "a.key"), a.key_pem(), 0o600),
                  cert_chain_file=write(os.path.join(d, "inter.pem"), pki.inter.pem()),
                  ca_dir=ca)
    write(os.path.join(ca, "root.pem"), pki.root.pem())
    if case.get("revoked"):
        esptun["crl_files"] = [write(os.path.join(d, "root.crl"), pki.root.crl_pem()),
                               write(os.path.join(d, "inter.crl"), pki.inter.crl_pem([b]))]
    # swanctl reads credentials from beside its swanctl.conf: charon's own folder.
    sw = os.path.join(tmp, f"sw-b{key}")
    for sub in ("x509", "x509ca", "rsa", "ecdsa", "pkcs8"):
        os.makedirs(os.path.join(sw, sub))
    write(os.path.join(sw, "x509", "b.pem"), b.pem())
    # strongSwan trusts our root and sends its own intermediate (from x509ca).
    write(os.path.join(sw, "x509ca", "root.pem"), pki.root.pem())
    write(os.path.join(sw, "x509ca", "b-inter.pem"), b_pki.inter.pem())
    if case.get("other_ca"):
        write(os.path.join(sw, "x509ca", "b-root.pem"), b_pki.root.pem())
    write(os.path.join(sw, SW_KEY_DIR[case["b_key"]], "b.key"),
          b.key_pem() if case["b_key"] == "ed25519" else b.key_pem_traditional(), 0o600)
    return esptun, sw


def build(ctx, idx, case):
    key = f"{idx}"
    a = netns.Netns(netns.unique("ikecert", f"{key}-a"))
    b = netns.Netns(netns.unique("ikecert", f"{key}-b"))
    netns.veth(a, b, "swa", "swb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    if case.get("mtu"):
        a.ip("link", "set", "swa", "mtu", str(case["mtu"]))
        b.ip("link", "set", "swb", "mtu", str(case["mtu"]))
    b.ip("addr", "add", f"{B_IN}/32", "dev", "lo")
    A, B = sw_pair.Site("A", a), sw_pair.Site("B", b)
    files, sw_dir = make_files(ctx.tmp, key, case)
    # Case 8 keeps both sides' default fragment size (None: not configured).
    frag = None if case.get("mtu") else FRAGMENT_SIZE
    sfx = f"{os.getpid() % 100000}x{idx}"
    peer = dict(name=PEER, allowed_ips=[f"{B_IN}/32"], remote_id="b.sw",
                ike_proposals=["aes128gcm16-prfsha256-x25519"], esp_proposals=["aes128gcm16"],
                ike_fragment_size=frag, **files)
    if case["initiator"] == "esptun":
        peer["endpoint"] = f"{B_UL}:4500"
    if case.get("a_pss"):
        peer["rsa_pss"] = True
    text = esptun_ike_config(f"ikc{sfx}", os.path.join(ctx.tmp, f"a{key}.sock"),
                             os.path.join(ctx.tmp, f"state-a{key}"), peer)
    path = esptun_conf.write_private(os.path.join(ctx.tmp, f"a{key}.toml"), text)
    A.tun = f"ikc{sfx}"
    cfg = strongswan.pair_config("b", start_action="none", swanctl_dir=sw_dir, cert="b.pem",
                                 ike_proposals="aes128gcm16-prfsha256-x25519",
                                 esp_proposals="aes128gcm16", retransmit_tries=2,
                                 fragment_size=frag, rsa_pss=bool(case.get("sw_pss")))
    B.charon = strongswan.Charon(b, sw_dir, cfg, tag="B")
    A.ep = esptun_proc.Endpoint(ctx.build, A.ns, path, os.path.join(ctx.tmp, f"a{key}.log"))
    ctx.logs += [A.ep.log, B.charon.log]
    return A, B, path


def run(rep, ctx, idx, case):
    tag = f"case {idx + 1}"
    A, B, path = build(ctx, idx, case)
    if not ctx.checked:
        ctx.checked = True
        ctx.check_ok = sw_pair.check_esptun_accepts(rep, ctx, path)
    try:
        t0 = sw_pair.start_pair(rep, A, B, path, "esptun-gateway run", sw_pair.EsptunDown)
        if case["initiator"] == "strongswan":
            ok, out = B.charon.initiate(timeout=5 if case.get("reason") else TIMEOUT)
            rep.check(ok == (not case.get("reason")),
                      f"[{tag}] swanctl --initiate {'succeeds' if not case.get('reason') else 'fails'}",
                      out.strip()[-800:])
        if case.get("reason"):
            refused(rep, tag, case, A, B)
            return
        sw_ike, sw_child = B.charon.wait_established(TIMEOUT)
        e_ike, e_kids, where = sw_pair.wait_esptun_established(rep, tag, A)
        rep.info(f"established {time.monotonic() - t0:.2f} s after start")
        rep.check(sw_ike.state == "ESTABLISHED" and sw_ike.local_id == "b.sw"
                  and sw_ike.remote_id == "a.sw",
                  f"[{tag}] strongSwan: IKE_SA ESTABLISHED, b.sw <-> a.sw", json.dumps(sw_ike.raw))
        sw_line = B.charon.log_search(r"authentication of 'a\.sw' with .*successful")
        rep.check(sw_line is not None, f"[{tag}] strongSwan verified our signature: "
                  f"{sw_line.strip() if sw_line else None!r}", netns.tail(B.charon.log, 30))
        check_schemes(rep, tag, case, B)
        chain = B.charon.log_search(r"reached self-signed root ca")
        rep.check(chain is not None, f"[{tag}] strongSwan built our chain to the root "
                  f"(intermediate from our CERT payload)", netns.tail(B.charon.log, 30))
        rep.check(case["peer_auth"] in str(e_ike.get("peer_auth", "")),
                  f"[{tag}] esptun status: peer_auth {e_ike.get('peer_auth')!r} names "
                  f"{case['peer_auth']}", json.dumps(e_ike)[:1500])
        rep.check("CN=b.sw" in str(e_ike.get("peer_subject", "")) and
                  "Intermediate" in str(e_ike.get("peer_issuer", "")),
                  f"[{tag}] esptun status: peer_subject {e_ike.get('peer_subject')!r}, issuer "
                  f"{e_ike.get('peer_issuer')!r}", json.dumps(e_ike)[:1500])
        check_fragments(rep, tag, A, B)
        sw_pair.ping(rep, tag, A, B_IN)
        sw_pair.ping(rep, tag, B, A_IN)
    finally:
        sw_pair.stop_both(rep, tag, dict(case, wrong_psk=bool(case.get("reason"))), A, B)


def check_schemes(rep, tag, case, B):
    """The signature schemes strongSwan names in its log: what it verified
    ours as (case key sw_verified) and what it signed with (sw_signed)."""
    for key, who in (("sw_verified", r"'a\.sw'"), ("sw_signed", r"'b\.sw' \(myself\)")):
        if not case.get(key):
            continue
        rx = rf"authentication of {who} with {case[key]} successful"
        line = B.charon.log_search(rx, flags=0)
        rep.check(line is not None, f"[{tag}] strongSwan's log: /{rx}/: "
                  f"{line.strip() if line else None!r}",
                  "\n".join(ln for ln in B.charon.log_text().splitlines()
                            if "authentication of" in ln))


def check_fragments(rep, tag, A, B):
    """IKE_AUTH with a certificate chain is longer than FRAGMENT_SIZE each way:
    strongSwan reassembled our SKF fragments (RFC 7383) and we its."""
    line = B.charon.log_search(r"reassembled fragmented IKE message")
    rep.check(line is not None, f"[{tag}] strongSwan reassembled our fragments: "
              f"{line.strip() if line else None!r}", netns.tail(B.charon.log, 30))
    counters = (A.ep.status().get("ike") or {}).get("counters") or {}
    rep.check(counters.get("fragments_sent", 0) >= 2 and counters.get("fragments_received", 0) >= 2
              and counters.get("fragments_dropped") == 0,
              f"[{tag}] esptun sent {counters.get('fragments_sent')} and reassembled "
              f"{counters.get('fragments_received')} fragments, dropped "
              f"{counters.get('fragments_dropped')}", json.dumps(counters))


def refused(rep, tag, case, A, B):
    line = esptun_proc.wait_log_line(A.ep.log, TIMEOUT,
                                     rf"authentication failed.*{re.escape(case['reason'])}")
    rep.check(line is not None, f"[{tag}] esptun logs the refusal naming the reason "
              f"({case['reason']!r}): {line!r}", netns.tail(A.ep.log, 20))
    if case["initiator"] == "strongswan":
        sw = B.charon.log_search(r"AUTHENTICATION_FAILED")
        rep.check(sw is not None, f"[{tag}] strongSwan got AUTHENTICATION_FAILED: "
                  f"{sw.strip() if sw else None!r}", netns.tail(B.charon.log, 20))
    # As responder of case 4 strongSwan had authenticated us: our Delete ends its IKE_SA.
    sw_eap.check_no_sa(rep, tag, A, B)
    sw_pair.ping(rep, tag, A, B_IN, count=1, expect=False)


def body(rep, build_dir):
    sw_pair.run_cases(rep, build_dir, CASES, runners={"certs": run})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_certs", body, tools=sw_pair.TOOLS)
