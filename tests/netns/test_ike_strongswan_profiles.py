#!/usr/bin/python3
# test_ike_strongswan_profiles.py - the IKEv2 clients built into Windows,
# macOS/iOS and the strongSwan app for Android, as each configures itself,
# against esptun-gateway set up as docs/road-warrior.md says: the gateway
# signs with an RSA certificate whose subjectAltName is its DNS name
# (vpn.esptun.test, also its local_id), checks the user's password by
# EAP-MSCHAPv2 (users file), leases an address from its pool and has DNS
# servers to give. strongSwan 5.9.8 (charon, tests/lib/strongswan.py) plays
# each client with that client's proposal lists, identities and MOBIKE; the
# frame is tests/lib/sw_pair.py (topology drawn there), the gateway's side
# tests/lib/sw_eap.py (shared with test_ike_strongswan_eap.py).
#
# The profiles (what each client sends; sources in PROFILES below):
#  - Windows 10/11 as it comes: IKE aes256-sha1-modp1024, 3des-sha1-modp1024,
#    ESP aes256-sha1, 3des-sha1; IDi its own IP address; no IDr (it checks
#    the server certificate's name instead: charon's wildcard remote id
#    "*.esptun.test" sends no IDr and still checks the name); MOBIKE
#    ("VPN Reconnect").
#  - Windows after docs/road-warrior.md's Set-VpnConnectionIPsecConfiguration
#    line (AES256 / SHA256 / Group14, GCMAES256, no PFS): IKE
#    aes256-sha256-modp2048, ESP aes256gcm16.
#  - macOS/iOS, a VPN set up in Settings without a configuration profile:
#    IKE aes256-sha256-modp2048, aes256-sha256-ecp256, aes256-sha256-modp1536,
#    aes128-sha1-modp1024, 3des-sha1-modp1024; ESP aes256-sha256, aes128-sha1,
#    3des-sha1 - the list of iOS 16.5 in strongSwan's interop notes
#    (docs.strongswan.org/docs/5.9/interop/ios.html, "Default IKE/ESP
#    proposals sent by iOS/macOS"), which agrees with Apple's documented
#    defaults of NEVPNIKEv2SecurityAssociationParameters (AES-256, SHA2-256,
#    group 14 since iOS 14 / macOS 11); IDi the Local ID (carol@esptun.test),
#    IDr the Remote ID (vpn.esptun.test); MOBIKE on (Apple's DisableMOBIKE
#    defaults to 0).
#  - the strongSwan app for Android: charon's default proposals, IDi the user
#    name (the app's "Client identity" defaults to it), no IDr (its "Server
#    identity" is checked, and sent only when set by hand); MOBIKE on.
# Every client asks for a virtual address (CP request); EAP identity carol.
#
# Cases (fresh namespaces and daemons each):
#  1. Windows as it comes -> a gateway without allow_weak: refused with
#     NO_PROPOSAL_CHOSEN; esptun's log line names the offer and says that
#     allow_weak = true (with the suite in ike_proposals) would accept it, or
#     the client's Set-VpnConnectionIPsecConfiguration; no SA on either side.
#  2. the same client -> the peer with allow_weak = true and
#     aes256-sha1-modp1024 in its ike_proposals: connects with
#     AES-CBC-256/HMAC-SHA1/MODP-1024 (esptun skips the 3DES proposals: it has
#     no 3DES) and ESP aes256-sha1; esptun warned about the weak algorithms.
#  3. Windows hardened -> the default proposals: connects (MODP-2048, ESP AES-GCM-256).
#  4. macOS/iOS -> the default proposals: connects (MODP-2048, ESP
#     aes256-sha256); charon offered MOBIKE, esptun did not take it up and
#     logged no error or warning.
#  5. Android app -> the default proposals: connects; MOBIKE as in 4.
# "Connects": both sides established; charon got a virtual address from the
# gateway's pool and esptun's status names that lease, EAP-MSCHAPv2 and
# carol; ping both ways through the tunnel.
#
# Not emulated: DNS. charon asks for DNS servers (INTERNAL_IP4_DNS) only
# through its resolve plugin, which rewrites the host's resolv.conf, so it is
# never loaded here (strongswan.py's explicit plugin list); the CP request
# carries the address only, and the gateway's dns setting goes unused: its
# status must list no DNS servers for that IKE SA (test_ike_dns.py checks
# DNS with esptun-client). The clients' full-tunnel
# traffic selector (0.0.0.0/0) is not used either: charon's route for it in
# the namespace would carry its own IKE packets; the test asks for the
# gateway's inner address.
#
# usage: test_ike_strongswan_profiles.py BUILD_DIR   (root; strongSwan with
#        libcharon-extauth-plugins, python3-cryptography)
"""IKEv2 as the built-in clients configure themselves, against esptun-gateway."""

import ipaddress
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
import strongswan  # noqa: E402
import sw_eap  # noqa: E402
import sw_pair  # noqa: E402

A_UL, B_UL, A_IN = sw_pair.A_UL, sw_pair.B_UL, sw_pair.A_IN
TIMEOUT = sw_pair.ESTABLISH_TIMEOUT
GATEWAY = "vpn.esptun.test"  # the gateway's DNS name: certificate SAN and local_id
ANY_GATEWAY = "*.esptun.test"  # charon: check the name, send no IDr
POOL, DNS = "10.77.0.0/24", "10.77.0.53"
USER, USER_ID, PASSWORD = sw_eap.USER, sw_eap.USER_ID, sw_eap.PASSWORD
WEAK_SUITE = "aes256-sha1-prfsha1-modp1024"  # esptun's spelling of Windows' first proposal

# strongSwan settings per client: proposals, IDi (and so the gateway peer's
# remote_id), the remote id charon checks (and sends as IDr unless a wildcard).
PROFILES = {
    # Windows 10/11 built-in IKEv2 defaults (Microsoft's IKEv2 client offers
    # 3DES/AES-CBC-256 with SHA-1/SHA-256 and DH group 2; strongSwan's Windows
    # interop notes name aes256-sha1-modp1024 and 3des-sha1-modp1024).
    "windows": dict(ike="aes256-sha1-modp1024,3des-sha1-modp1024", esp="aes256-sha1,3des-sha1",
                    idi=B_UL, remote=ANY_GATEWAY, mobike=True),
    # Set-VpnConnectionIPsecConfiguration -AuthenticationTransformConstants
    # GCMAES256 -CipherTransformConstants GCMAES256 -EncryptionMethod AES256
    # -IntegrityCheckMethod SHA256 -DHGroup Group14 -PfsGroup None.
    "windows-hardened": dict(ike="aes256-sha256-modp2048", esp="aes256gcm16", idi=B_UL,
                             remote=ANY_GATEWAY, mobike=True),
    "apple": dict(ike="aes256-sha256-modp2048,aes256-sha256-ecp256,aes256-sha256-modp1536,"
                      "aes128-sha1-modp1024,3des-sha1-modp1024",
                  esp="aes256-sha256,aes128-sha1,3des-sha1", idi=USER_ID, remote=GATEWAY,
                  mobike=True),
    "android": dict(ike="default", esp="default", idi=USER, remote=ANY_GATEWAY, mobike=True),
}

CASES = [
    dict(num=1, kind="profile", profile="windows",
         title="Windows 10/11 defaults (SHA-1, MODP-1024, 3DES) -> a gateway without allow_weak: "
               "refused, the log says which setting to change",
         refused=True),
    dict(num=2, kind="profile", profile="windows", allow_weak=True,
         ike_proposals=["aes256-sha256-modp2048", "aes256-sha1-modp1024"],
         title="Windows 10/11 defaults -> the peer with allow_weak = true: connects",
         expect_ike=dict(encr_alg="AES_CBC", encr_keysize=256, integ_alg="HMAC_SHA1_96",
                         prf_alg="PRF_HMAC_SHA1", dh_group="MODP_1024"),
         expect_child=dict(encr_alg="AES_CBC", encr_keysize=256, integ_alg="HMAC_SHA1_96")),
    dict(num=3, kind="profile", profile="windows-hardened",
         title="Windows after Set-VpnConnectionIPsecConfiguration (AES256/SHA256/Group14, "
               "GCMAES256) -> the default proposals: connects",
         expect_ike=dict(encr_alg="AES_CBC", encr_keysize=256, integ_alg="HMAC_SHA2_256_128",
                         prf_alg="PRF_HMAC_SHA2_256", dh_group="MODP_2048"),
         expect_child=dict(encr_alg="AES_GCM_16", encr_keysize=256)),
    dict(num=4, kind="profile", profile="apple",
         title="macOS/iOS built-in defaults, MOBIKE offered -> the default proposals: connects",
         expect_ike=dict(encr_alg="AES_CBC", encr_keysize=256, integ_alg="HMAC_SHA2_256_128",
                         prf_alg="PRF_HMAC_SHA2_256", dh_group="MODP_2048"),
         expect_child=dict(encr_alg="AES_CBC", encr_keysize=256,
                           integ_alg="HMAC_SHA2_256_128")),
    dict(num=5, kind="profile", profile="android",
         title="strongSwan app for Android defaults, MOBIKE offered -> the default proposals: "
               "connects"),
]


def build(ctx, idx, case):
    """Namespaces, the PKI, the gateway's config and the client's."""
    prof = PROFILES[case["profile"]]
    a = netns.Netns(netns.unique("ikeprof", f"{idx}-a"))
    b = netns.Netns(netns.unique("ikeprof", f"{idx}-b"))
    netns.veth(a, b, "swa", "swb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    A, B = sw_pair.Site("A", a), sw_pair.Site("B", b)
    pki, cert_gw, _, d = sw_eap.make_pki(ctx.tmp, idx, gateway=GATEWAY)
    A.tun = f"ikp{os.getpid() % 100000}x{idx}"
    tunnel = dict(interface=A.tun, listen=f"{A_UL}:4500", ike_port=500, tun_io="direct",
                  control_socket=os.path.join(ctx.tmp, f"a{idx}.sock"),
                  state_dir=os.path.join(ctx.tmp, f"state-a{idx}"),
                  addresses=[f"{A_IN}/32"], local_id=GATEWAY, address_pool=[POOL], dns=[DNS])
    peer = sw_eap.gateway_peer(d, pki, cert_gw, prof["idi"], allow_weak=case.get("allow_weak"),
                               ike_proposals=case.get("ike_proposals"))
    path = esptun_conf.write_private(os.path.join(ctx.tmp, f"a{idx}.toml"),
                                     esptun_conf.render_ike_config(tunnel, [peer]))
    ctx.configs.append(path)
    sw = sw_eap.sw_dir_for(ctx.tmp, idx, pki)
    cfg = strongswan.pair_config(
        "b", start_action="none", swanctl_dir=sw, local_id=prof["idi"], remote_id=prof["remote"],
        local_ts="dynamic", remote_ts=f"{A_IN}/32", vips="0.0.0.0", ike_proposals=prof["ike"],
        esp_proposals=prof["esp"], mobike=prof["mobike"], retransmit_tries=2,
        local_auth="eap-mschapv2", remote_auth="pubkey", local_eap_id=USER,
        eap_secrets={USER: PASSWORD})
    B.charon = strongswan.Charon(b, sw, cfg, tag="B")
    A.ep = esptun_proc.Endpoint(ctx.build, A.ns, path, os.path.join(ctx.tmp, f"a{idx}.log"))
    ctx.logs += [A.ep.log, B.charon.log]
    return A, B, path


def run(rep, ctx, idx, case):
    tag = f"case {idx + 1}"
    A, B, path = build(ctx, idx, case)
    sw_pair.check_esptun_accepts(rep, ctx, path)
    refused = case.get("refused", False)
    try:
        sw_pair.start_pair(rep, A, B, path, "esptun-gateway run", sw_pair.EsptunDown)
        ok, out = B.charon.initiate(timeout=6 if refused else TIMEOUT)
        rep.check(ok != refused, f"[{tag}] swanctl --initiate {'fails' if refused else 'succeeds'}",
                  out.strip()[-800:])
        request = B.charon.log_search(r"generating IKE_AUTH request 1 ")
        rep.info(f"charon's IKE_AUTH request: {request.strip() if request else None!r}")
        if refused:
            check_refused(rep, tag, A, B)
        else:
            check_connected(rep, tag, case, A, B)
    finally:
        sw_pair.stop_both(rep, tag, dict(case, wrong_psk=refused), A, B)


def check_refused(rep, tag, A, B):
    """Case 1: NO_PROPOSAL_CHOSEN, esptun's line naming the setting, no SA."""
    line = esptun_proc.wait_log_line(A.ep.log, TIMEOUT, r"no IKE proposal in common")
    rep.check(line is not None, f"[{tag}] esptun logs the refused offer: {line!r}",
              netns.tail(A.ep.log, 20))
    line = line or ""
    rep.check(f"it offered {WEAK_SUITE}, 3des-sha1-prfsha1-modp1024" in line,
              f"[{tag}] the line names Windows' offer ({WEAK_SUITE}, 3des-...)", line)
    rep.check(f"{WEAK_SUITE} would be accepted from a peer with allow_weak = true" in line
              and "Set-VpnConnectionIPsecConfiguration" in line,
              f"[{tag}] the line says what to change: allow_weak = true with {WEAK_SUITE} in "
              "ike_proposals, or the client's Set-VpnConnectionIPsecConfiguration", line)
    sw = B.charon.log_search(r"received NO_PROPOSAL_CHOSEN notify error")
    rep.check(sw is not None, f"[{tag}] strongSwan got NO_PROPOSAL_CHOSEN: "
              f"{sw.strip() if sw else None!r}", netns.tail(B.charon.log, 20))
    sw_eap.check_no_sa(rep, tag, A, B)


def check_connected(rep, tag, case, A, B):
    """Both sides up; algorithms; the pool address; EAP; ping; MOBIKE."""
    sw_ike, sw_child = B.charon.wait_established(TIMEOUT)
    e_ike, _, _ = sw_pair.wait_esptun_established(rep, tag, A)
    rep.check(sw_ike.state == "ESTABLISHED" and sw_ike.initiator
              and sw_ike.remote_id == GATEWAY,
              f"[{tag}] strongSwan: IKE_SA ESTABLISHED as initiator, {sw_ike.local_id} <-> "
              f"{sw_ike.remote_id}", json.dumps(sw_ike.raw)[:1000])
    rep.info(f"IKE {sw_ike.encr_alg}-{sw_ike.encr_keysize}/{sw_ike.integ_alg}/{sw_ike.prf_alg}/"
             f"{sw_ike.dh_group}, ESP {sw_child.encr_alg}-{sw_child.encr_keysize}/"
             f"{sw_child.integ_alg or 'AEAD'}")
    for field, want in case.get("expect_ike", {}).items():
        rep.equal(getattr(sw_ike, field), want, f"[{tag}] strongSwan IKE_SA {field}")
    for field, want in case.get("expect_child", {}).items():
        rep.equal(getattr(sw_child, field), want, f"[{tag}] strongSwan CHILD_SA {field}")
    sig = B.charon.log_search(rf"authentication of '{re.escape(GATEWAY)}' with RSA.* successful")
    rep.check(sig is not None, f"[{tag}] strongSwan checked the gateway's certificate for "
              f"{GATEWAY}: {sig.strip() if sig else None!r}", netns.tail(B.charon.log, 30))
    rep.check((e_ike.get("peer_auth"), e_ike.get("eap_identity")) == ("EAP-MSCHAPv2", USER),
              f"[{tag}] esptun status: peer_auth {e_ike.get('peer_auth')!r}, eap_identity "
              f"{e_ike.get('eap_identity')!r}", json.dumps(e_ike)[:1500])
    # The client asked for an address only: status lists no DNS servers as handed out.
    rep.check(e_ike.get("dns") == [], f"[{tag}] esptun status: no DNS servers handed out "
              f"(none asked for): {e_ike.get('dns')!r}")
    vips = e_ike.get("virtual_ips") or []
    in_pool = [v for v in vips if ipaddress.ip_address(v) in ipaddress.ip_network(POOL)]
    rep.check(len(in_pool) == 1 and list(sw_ike.local_vips or []) == in_pool,
              f"[{tag}] virtual IP: esptun leased {vips} from {POOL}, strongSwan got "
              f"{sw_ike.local_vips}", json.dumps(sw_ike.raw)[:1000])
    sw_pair.ping(rep, tag, B, A_IN)
    if in_pool:
        sw_pair.ping(rep, tag, A, in_pool[0])
    if case.get("allow_weak"):
        warn = esptun_proc.log_line(A.ep.log, r"uses weak algorithms")
        rep.check(warn is not None, f"[{tag}] esptun warned about the weak peer: {warn!r}",
                  netns.tail(A.ep.log, 20))
    if PROFILES[case["profile"]]["mobike"]:
        check_mobike(rep, tag, A, B)


def check_mobike(rep, tag, A, B):
    """charon offered MOBIKE in IKE_AUTH; esptun, which has no MOBIKE, did
    not answer it (so charon will not move the SA) and logged nothing about
    it: no error or warning line at all during the set-up."""
    offered = B.charon.log_search(r"generating IKE_AUTH request \d+ .*N\(MOBIKE_SUP\)")
    rep.check(offered is not None, f"[{tag}] charon offered MOBIKE: "
              f"{offered.strip() if offered else None!r}", netns.tail(B.charon.log, 30))
    answers = [ln for ln in B.charon.log_text().splitlines()
               if re.search(r"parsed IKE_AUTH response \d+ ", ln)]
    rep.check(answers and not any("MOBIKE_SUP" in ln for ln in answers),
              f"[{tag}] esptun's IKE_AUTH answers carry no MOBIKE_SUPPORTED", "\n".join(answers))
    noisy = [ln for ln in sw_pair.log_lines(A.ep.log)
             if (re.search(r" (error|warning): ", ln) and "uses weak algorithms" not in ln)
             or re.search(r"mobike|unsupported|unknown", ln, re.I)]
    rep.check(not noisy, f"[{tag}] esptun's log has no error or warning line and none about "
              "MOBIKE (the allow_weak warning aside)", "\n".join(noisy[:20]))


def body(rep, build_dir):
    sw_pair.run_cases(rep, build_dir, CASES, runners={"profile": run})


if __name__ == "__main__":
    report.main("netns/ike_strongswan_profiles", body, tools=sw_pair.TOOLS)
