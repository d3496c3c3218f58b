#!/usr/bin/python3
# test_ike_strongswan_eap.py - IKEv2 with EAP (RFC 7296 section 2.16)
# against strongSwan 5.9 (charon, an independent implementation), both
# roles: the gateway signs with its certificate (through an intermediate CA),
# the road warrior authenticates by EAP-MSCHAPv2 with a user name and
# password, and AUTH is then computed with the EAP method's MSK.
#
# A PKI is made at test time (tests/lib/test_pki.py): root -> intermediate
# -> a.sw (esptun) or b.sw (strongSwan). Clients trust the root only.
#
# Cases (fresh namespaces and daemons each; topology of tests/lib/sw_pair.py):
#  1. strongSwan road warrior (carol, EAP-MSCHAPv2, asks for a virtual IP)
#     -> esptun-gateway (RSA certificate, users file, address pool
#     10.77.0.0/24): both established; strongSwan verified our signature
#     and logs the MSK; esptun's status names EAP-MSCHAPv2 and the EAP
#     identity carol and leased a pool address, which strongSwan got; ping
#     both ways; 20 MB TCP checksummed; then the CHILD_SA and the IKE SA are
#     rekeyed by esptun (rekey_time 6 s, ike_rekey_time 9 s) and ping
#     still passes.
#  2. the same with a wrong password: esptun logs "wrong password", strongSwan
#     logs the EAP failure; no SA on either side.
#  3. the same with a user not in the users file: esptun logs so; no SA.
#  4. esptun-client (carol, EAP-MSCHAPv2, no addresses of its own) ->
#     strongSwan gateway (ECDSA certificate, eap_id %any, pool 10.66.0.0/24):
#     esptun verified strongSwan's certificate, answered EAP-Identity and
#     MSCHAPv2; virtual IP from strongSwan's pool; ping; 20 MB TCP.
#  5. esptun-client with a wrong password: esptun logs that the gateway
#     refused it; no SA on either side.
#  6. strongSwan road warrior with EAP-TLS (its certificate for
#     carol@esptun.test, ECDSA) -> esptun-gateway (auth = "eap-tls", the
#     clients' CA in ca_dir): as case 1, the EAP identity being the client
#     certificate's subject.
#  7. esptun-client with EAP-TLS (its own certificate) -> strongSwan gateway
#     (remote auth eap-tls): as case 4.
#  8. strongSwan road warrior with EAP-TLS and a certificate from another
#     CA: esptun logs "unknown CA"; no SA on either side.
#  9. strongSwan road warrior authenticating by certificate (AUTH signed
#     with carol's ECDSA key, no EAP) -> esptun-gateway (auth = "cert"): as
#     case 1, esptun's status naming the certificate's key and subject.
# 10. esptun-client with its certificate (no EAP) -> strongSwan gateway
#     (remote auth pubkey): as case 4.
#
# usage: test_ike_strongswan_eap.py BUILD_DIR   (root; strongSwan with
#        libcharon-extauth-plugins, python3-cryptography)
"""IKEv2 interop with EAP-MSCHAPv2: esptun against strongSwan's charon, both roles."""

import ipaddress
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
import transfer as transfer_lib  # noqa: E402
from esptun_ike import PEER, esptun_ike  # noqa: E402
from netns import TestError  # noqa: E402
from esptun_proc import log_line  # noqa: E402
from sw_eap import make_pki, sw_dir_for  # noqa: E402
from test_pki import write  # noqa: E402

A_UL, B_UL, A_IN, B_IN = sw_pair.A_UL, sw_pair.B_UL, sw_pair.A_IN, sw_pair.B_IN
TIMEOUT = sw_pair.ESTABLISH_TIMEOUT
USER, USER_ID, PASSWORD = sw_eap.USER, sw_eap.USER_ID, sw_eap.PASSWORD
ESPTUN_POOL, SW_POOL = "10.77.0.0/24", "10.66.0.0/24"
XFER_BYTES = 20 * 1000 * 1000
IKE, ESP = "aes128gcm16-prfsha256-x25519", "aes128gcm16"
REKEY_TIMEOUT = 30

CASES = [
    dict(num=1, kind="eap", gateway="esptun",
         title="strongSwan road warrior, EAP-MSCHAPv2 -> esptun-gateway (RSA certificate): "
               "virtual IP, ping, 20 MB, rekeys"),
    dict(num=2, kind="eap", gateway="esptun", password="wrong password",
         title="strongSwan road warrior with a wrong password: refused",
         reason="wrong password",
         sw_reason=r"EAP-MS-CHAPv2 failed with error ERROR_AUTHENTICATION_FAILURE"),
    dict(num=3, kind="eap", gateway="esptun", user="mallory",
         title="strongSwan road warrior with a user not in the users file: refused",
         reason="not in the users file",
         sw_reason=r"EAP-MS-CHAPv2 failed with error ERROR_AUTHENTICATION_FAILURE"),
    dict(num=4, kind="eap", gateway="strongswan",
         title="esptun-client, EAP-MSCHAPv2 -> strongSwan gateway (ECDSA certificate): "
               "virtual IP, ping, 20 MB"),
    dict(num=5, kind="eap", gateway="strongswan", password="wrong password",
         title="esptun-client with a wrong password: refused by strongSwan",
         reason="refused our EAP-MSCHAPv2", sw_reason=r"EAP method EAP_MSCHAPV2 failed"),
    dict(num=6, kind="eap", gateway="esptun", method="tls",
         title="strongSwan road warrior, EAP-TLS -> esptun-gateway: virtual IP, ping, 20 MB, "
               "rekeys"),
    dict(num=7, kind="eap", gateway="strongswan", method="tls",
         title="esptun-client, EAP-TLS -> strongSwan gateway: virtual IP, ping, 20 MB"),
    dict(num=8, kind="eap", gateway="esptun", method="tls", other_ca=True,
         title="strongSwan road warrior, EAP-TLS with a certificate of another CA: refused",
         reason="unknown CA", sw_reason=r"received fatal TLS alert 'unknown ca'"),
    dict(num=9, kind="eap", gateway="esptun", method="cert",
         title="strongSwan road warrior, certificate -> esptun-gateway: virtual IP, ping, 20 MB, "
               "rekeys"),
    dict(num=10, kind="eap", gateway="strongswan", method="cert",
         title="esptun-client, certificate -> strongSwan gateway: virtual IP, ping, 20 MB"),
]


def build(ctx, idx, case):
    key = f"{idx}"
    a = netns.Netns(netns.unique("ikeeap", f"{key}-a"))
    b = netns.Netns(netns.unique("ikeeap", f"{key}-b"))
    netns.veth(a, b, "swa", "swb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    A, B = sw_pair.Site("A", a), sw_pair.Site("B", b)
    pki, cert_a, cert_b, d = make_pki(ctx.tmp, key)
    cert_auth = case.get("method") == "cert"
    tls = case.get("method") == "tls" or cert_auth  # carol has a certificate
    # EAP-TLS: carol's certificate (from another CA's intermediate in case 8).
    user_pki = test_pki.Pki("Other Root") if case.get("other_ca") else pki
    cert_user = user_pki.issue_user(USER_ID, "p256") if tls else None
    method = "cert" if cert_auth else "eap-tls" if tls else "eap-mschapv2"
    sfx = f"{os.getpid() % 100000}x{idx}"
    A.tun = f"ike{sfx}"
    tunnel = dict(interface=A.tun, listen=f"{A_UL}:4500" if case["gateway"] == "esptun"
                  else "0.0.0.0:4500", tun_io="direct",
                  control_socket=os.path.join(ctx.tmp, f"a{key}.sock"),
                  state_dir=os.path.join(ctx.tmp, f"state-a{key}"))
    if case["gateway"] == "esptun":
        # esptun-gateway: signs as a.sw, checks carol's password, leases an address.
        tunnel.update(addresses=[f"{A_IN}/32"], local_id="a.sw", address_pool=[ESPTUN_POOL])
        peer = sw_eap.gateway_peer(d, pki, cert_a, USER_ID, method,
                                   ike_proposals=[IKE], esp_proposals=[ESP],
                                   rekey_time=6 if not case.get("reason") else None,
                                   ike_rekey_time=9 if not case.get("reason") else None)
        role = "gateway"
        sw = sw_dir_for(ctx.tmp, key, pki, user=cert_user, user_pki=user_pki)
        cfg = strongswan.pair_config(
            "b", start_action="none", swanctl_dir=sw, local_id=USER_ID, remote_id="a.sw",
            local_ts="dynamic", remote_ts=f"{A_IN}/32", vips="0.0.0.0", ike_proposals=IKE,
            esp_proposals=ESP, retransmit_tries=2,
            local_auth="pubkey" if cert_auth else method, remote_auth="pubkey",
            cert="carol.pem" if tls else None,
            local_eap_id=None if tls else case.get("user", USER),
            eap_secrets=None if tls else {case.get("user", USER): case.get("password", PASSWORD)})
    else:
        # esptun-client: logs in as carol, trusts the root for the gateway's certificate.
        tunnel.update(local_id=USER_ID)
        peer = dict(name=PEER, endpoint=f"{B_UL}:4500", allowed_ips=[f"{B_IN}/32"],
                    remote_id="b.sw", auth=method,
                    eap_identity=None if cert_auth else USER_ID if tls else USER,
                    ca_dir=os.path.join(d, "ca"), ike_proposals=[IKE], esp_proposals=[ESP])
        if tls:
            peer.update(cert_file=write(os.path.join(d, "carol.pem"), cert_user.pem()),
                        private_key_file=write(os.path.join(d, "carol.key"),
                                               cert_user.key_pem(), 0o600),
                        cert_chain_file=write(os.path.join(d, "inter.pem"), pki.inter.pem()))
        else:
            peer["eap_password_file"] = write(os.path.join(d, "password"),
                                              case.get("password", PASSWORD) + "\n", 0o600)
        role = "client"
        b.ip("addr", "add", f"{B_IN}/32", "dev", "lo")
        sw = sw_dir_for(ctx.tmp, key, pki, own=cert_b)
        cfg = strongswan.pair_config(
            "b", start_action="none", swanctl_dir=sw, cert="b.pem", local_id="b.sw",
            remote_id=USER_ID, remote_addr="%any", local_ts=f"{B_IN}/32", remote_ts="dynamic",
            ike_proposals=IKE, esp_proposals=ESP, retransmit_tries=2, local_auth="pubkey",
            remote_auth="pubkey" if cert_auth else method,
            remote_eap_id=None if cert_auth else "%any",
            eap_secrets=None if tls else {USER: PASSWORD}, pools={"rw": {"addrs": SW_POOL}})
    path = esptun_conf.write_private(os.path.join(ctx.tmp, f"a{key}.toml"),
                                     esptun_conf.render_ike_config(tunnel, [peer]))
    ctx.configs.append(path)
    B.charon = strongswan.Charon(b, sw, cfg, tag="B")
    A.ep = esptun_proc.Endpoint(ctx.build, A.ns, path, os.path.join(ctx.tmp, f"a{key}.log"),
                                role=role)
    ctx.logs += [A.ep.log, B.charon.log]
    return A, B, path, role


def check_accepts(rep, ctx, path, role, tag):
    p = esptun_proc.run_check(ctx.build, path, f"esptun-{role}")
    out = (p.stdout + p.stderr).strip()
    rep.check(p.returncode == 0, f"[{tag}] `esptun-{role} check` accepts the config",
              out[-800:])


def run(rep, ctx, idx, case):
    tag = f"case {idx + 1}"
    A, B, path, role = build(ctx, idx, case)
    check_accepts(rep, ctx, path, role, tag)
    try:
        sw_pair.start_pair(rep, A, B, path, f"esptun-{role} run", sw_pair.EsptunDown)
        if case["gateway"] == "esptun":
            ok, out = B.charon.initiate(timeout=6 if case.get("reason") else TIMEOUT)
            rep.check(ok == (not case.get("reason")),
                      f"[{tag}] swanctl --initiate {'fails' if case.get('reason') else 'succeeds'}",
                      out.strip()[-800:])
        if case.get("reason"):
            refused(rep, tag, case, A, B)
            return
        sw_ike, _ = B.charon.wait_established(TIMEOUT)
        e_ike, _, _ = sw_pair.wait_esptun_established(rep, tag, A)
        if case.get("method") == "cert":
            eap = B.charon.log_search(r"EAP method|EAP/|EAP identity")
            rep.check(eap is None, f"[{tag}] strongSwan's log shows no EAP: the user "
                      "authenticated by certificate alone", eap or "")
        else:
            msk = B.charon.log_search(r"EAP method EAP_(MSCHAPV2|TLS) succeeded, MSK established")
            rep.check(msk is not None, f"[{tag}] strongSwan: {msk.strip() if msk else None!r}",
                      netns.tail(B.charon.log, 30))
        if case["gateway"] == "esptun":
            esptun_gateway_checks(rep, tag, case, A, B, sw_ike, e_ike)
        else:
            esptun_client_checks(rep, tag, case, A, B, sw_ike, e_ike)
    finally:
        sw_pair.stop_both(rep, tag, dict(case, wrong_psk=bool(case.get("reason"))), A, B)


def esptun_gateway_checks(rep, tag, case, A, B, sw_ike, e_ike):
    sig = B.charon.log_search(r"authentication of 'a\.sw' with RSA.* successful")
    rep.check(sig is not None, f"[{tag}] strongSwan verified our certificate signature: "
              f"{sig.strip() if sig else None!r}", netns.tail(B.charon.log, 30))
    if case.get("method") == "cert":
        rep.check("ECDSA-P256" in str(e_ike.get("peer_auth", "")) and not e_ike.get("eap_identity")
                  and USER_ID in str(e_ike.get("peer_subject", "")),
                  f"[{tag}] esptun status: peer_auth {e_ike.get('peer_auth')!r}, peer_subject "
                  f"{e_ike.get('peer_subject')!r}, no EAP identity", json.dumps(e_ike)[:1500])
    else:
        tls = case.get("method") == "tls"
        want = ("EAP-TLS", f"O=esptun interop, CN={USER_ID}") if tls else ("EAP-MSCHAPv2", USER)
        rep.check((e_ike.get("peer_auth"), e_ike.get("eap_identity")) == want,
                  f"[{tag}] esptun status: peer_auth {e_ike.get('peer_auth')!r}, eap_identity "
                  f"{e_ike.get('eap_identity')!r}", json.dumps(e_ike)[:1500])
    vips = e_ike.get("virtual_ips") or []
    in_pool = [v for v in vips if ipaddress.ip_address(v) in ipaddress.ip_network(ESPTUN_POOL)]
    rep.check(len(in_pool) == 1 and list(sw_ike.local_vips or []) == in_pool,
              f"[{tag}] virtual IP: esptun leased {vips}, strongSwan got {sw_ike.local_vips}",
              json.dumps(sw_ike.raw)[:1000])
    if len(in_pool) != 1:
        return
    vip = in_pool[0]
    sw_pair.ping(rep, tag, B, A_IN)
    sw_pair.ping(rep, tag, A, vip)
    sent, got, secs = transfer_lib.run(B.ns, A.ns, A_IN, 5201, XFER_BYTES, sw_pair.XFER_TIMEOUT)
    transfer_lib.check(rep, f"[{tag}] {XFER_BYTES // 1000000} MB TCP strongSwan -> {A_IN}",
                       sent, got, XFER_BYTES, secs)
    # Rekeys of an IKE SA that EAP authenticated: esptun starts both.
    try:
        ike = netns.wait_until(
            lambda: (lambda s: s if s.get("child_rekeys", 0) >= 1 and s.get("ike_rekeys", 0) >= 1
                     else None)(esptun_ike(A.ep.status())[0]),
            REKEY_TIMEOUT, interval=0.5, what="a CHILD_SA and an IKE SA rekey")
    except TestError:
        ike = esptun_ike(A.ep.status())[0]
    rep.check(ike.get("child_rekeys", 0) >= 1 and ike.get("ike_rekeys", 0) >= 1,
              f"[{tag}] esptun rekeyed: child_rekeys {ike.get('child_rekeys')}, ike_rekeys "
              f"{ike.get('ike_rekeys')}", json.dumps(ike)[:1500])
    rekeyed = B.charon.log_search(r"IKE_SA .* rekeyed|rekeyed IKE_SA")
    rep.check(rekeyed is not None, f"[{tag}] strongSwan logged the IKE SA rekey: "
              f"{rekeyed.strip() if rekeyed else None!r}", netns.tail(B.charon.log, 30))
    sw_pair.ping(rep, tag, B, A_IN)


def esptun_client_checks(rep, tag, case, A, B, sw_ike, e_ike):
    auth = log_line(A.ep.log, r"authenticated by certificate .*CN=b\.sw")
    rep.check(auth is not None, f"[{tag}] esptun verified strongSwan's certificate: {auth!r}",
              netns.tail(A.ep.log, 20))
    rep.check("ECDSA-P256" in str(e_ike.get("peer_auth", "")),
              f"[{tag}] esptun status: peer_auth {e_ike.get('peer_auth')!r}",
              json.dumps(e_ike)[:1500])
    vips = e_ike.get("virtual_ips") or []
    in_pool = [v for v in vips if ipaddress.ip_address(v) in ipaddress.ip_network(SW_POOL)]
    rep.check(len(in_pool) == 1 and list(sw_ike.remote_vips or []) == in_pool,
              f"[{tag}] virtual IP: strongSwan handed out {sw_ike.remote_vips}, esptun has "
              f"{vips}", json.dumps(sw_ike.raw)[:1000])
    if case.get("method") == "cert":
        sig = B.charon.log_search(r"authentication of '" + re.escape(USER_ID)
                                  + r"' with ECDSA.* successful")
        rep.check(sig is not None, f"[{tag}] strongSwan verified our certificate signature: "
                  f"{sig.strip() if sig else None!r}", netns.tail(B.charon.log, 30))
    else:
        user = USER_ID if case.get("method") == "tls" else USER
        ident = B.charon.log_search(r"received EAP identity '" + re.escape(user) + "'")
        rep.check(ident is not None, f"[{tag}] strongSwan got our EAP-Identity: "
                  f"{ident.strip() if ident else None!r}", netns.tail(B.charon.log, 30))
    sw_pair.ping(rep, tag, A, B_IN)
    sent, got, secs = transfer_lib.run(A.ns, B.ns, B_IN, 5201, XFER_BYTES, sw_pair.XFER_TIMEOUT)
    transfer_lib.check(rep, f"[{tag}] {XFER_BYTES // 1000000} MB TCP esptun -> {B_IN}",
                       sent, got, XFER_BYTES, secs)


def refused(rep, tag, case, A, B):
    line = esptun_proc.wait_log_line(A.ep.log, TIMEOUT, re.escape(case["reason"]))
    rep.check(line is not None, f"[{tag}] esptun logs the refusal ({case['reason']!r}): {line!r}",
              netns.tail(A.ep.log, 20))
    try:
        sw = netns.wait_until(lambda: B.charon.log_search(case["sw_reason"]), 5, interval=0.1,
                              what="strongSwan's EAP failure line")
    except TestError:
        sw = None
    rep.check(sw is not None, f"[{tag}] strongSwan logs the EAP failure: "
              f"{sw.strip() if sw else None!r}", netns.tail(B.charon.log, 20))
    sw_eap.check_no_sa(rep, tag, A, B)


def body(rep, build_dir):
    sw_pair.run_cases(rep, build_dir, CASES, runners={"eap": run})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_eap", body, tools=sw_pair.TOOLS)
