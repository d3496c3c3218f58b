# sw_eap.py - what the EAP road-warrior tests against strongSwan share
# (tests/netns/test_ike_strongswan_eap.py, test_ike_strongswan_profiles.py):
#  - the PKI: root -> intermediate -> the gateway's certificate (its DNS name
#    as subjectAltName) and strongSwan's, made at test time (test_pki.py);
#  - strongSwan's swanctl folder with the CAs it trusts and its own
#    certificate and key;
#  - esptun-gateway's users file and the [[peer]] table of an EAP gateway:
#    the one place that spells the peer's config keys for these tests, so a
#    renamed key is renamed here only;
#  - the checks of a refused login: esptun's log line, no SA on either side.
"""The esptun-gateway side of the EAP tests against strongSwan, and their checks."""

import json
import os

import netns
import test_pki
from esptun_ike import PEER, esptun_ike
from netns import TestError
from test_pki import write

USER, USER_ID, PASSWORD = "carol", "carol@esptun.test", "Open sesame, 7 times!"
OTHER_USER, OTHER_PASSWORD = "dave", "another one entirely"
TIMEOUT = 15


def make_pki(tmp, key, gateway="a.sw", client="b.sw"):
    """make_pki() - the PKI: the gateway's certificate (@gateway, RSA) and
    strongSwan's (@client, ECDSA P-256), both under one root and
    intermediate, each with its name as DNS subjectAltName. Returns (pki,
    gateway cert, client cert, folder) with the root in folder/ca."""
    pki = test_pki.Pki()
    a = pki.issue(gateway, "rsa")
    b = pki.issue(client, "p256")
    d = os.path.join(tmp, f"pki{key}")
    os.makedirs(os.path.join(d, "ca"))
    write(os.path.join(d, "ca", "root.pem"), pki.root.pem())
    return pki, a, b, d


def sw_dir_for(tmp, key, pki, own=None, user=None, user_pki=None):
    """sw_dir_for() - strongSwan's swanctl folder: the root (and
    intermediate) it trusts, its own certificate and key when it has one
    (b.sw as a gateway, carol's for EAP-TLS as a client, with her CA's
    intermediate to send)."""
    sw = os.path.join(tmp, f"sw-b{key}")
    for sub in ("x509", "x509ca", "ecdsa"):
        os.makedirs(os.path.join(sw, sub))
    write(os.path.join(sw, "x509ca", "root.pem"), pki.root.pem())
    write(os.path.join(sw, "x509ca", "inter.pem"), pki.inter.pem())
    for name, cert in (("b", own), ("carol", user)):
        if cert:
            write(os.path.join(sw, "x509", f"{name}.pem"), cert.pem())
            write(os.path.join(sw, "ecdsa", f"{name}.key"), cert.key_pem_traditional(), 0o600)
    if user and user_pki is not pki:
        write(os.path.join(sw, "x509ca", "user-inter.pem"), user_pki.inter.pem())
        write(os.path.join(sw, "x509ca", "user-root.pem"), user_pki.root.pem())
    return sw


def write_users(d):
    """write_users() - esptun-gateway's users file in @d (mode 0600): carol
    and dave. Returns its path."""
    return write(os.path.join(d, "users.toml"),
                 f'[[user]]\nname = "{USER}"\npassword = "{PASSWORD}"\n\n'
                 f'[[user]]\nname = "{OTHER_USER}"\npassword = "{OTHER_PASSWORD}"\n', 0o600)


def gateway_peer(d, pki, cert, remote_id, method="eap-mschapv2", **extra):
    """gateway_peer() - the [[peer]] table (a dict for
    esptun_conf.render_ike_config) of an esptun-gateway that signs with
    @cert (chain: @pki's intermediate, files written to @d) and
    authenticates the user whose IKE identity is @remote_id by @method:
    EAP-MSCHAPv2 against write_users(), EAP-TLS or a certificate ("cert")
    against d/ca. @extra:
    further keys (ike_proposals, allow_weak, rekey_time, ...; None leaves
    one out)."""
    tls = method in ("eap-tls", "cert")
    peer = dict(name=PEER, remote_id=remote_id, auth=method,
                cert_file=write(os.path.join(d, "a.pem"), cert.pem()),
                private_key_file=write(os.path.join(d, "a.key"), cert.key_pem(), 0o600),
                cert_chain_file=write(os.path.join(d, "inter.pem"), pki.inter.pem()),
                users_file=None if tls else write_users(d),
                ca_dir=os.path.join(d, "ca") if tls else None)
    peer.update(extra)
    return peer


def check_no_sa(rep, tag, A, B):
    """check_no_sa() - after a refusal: strongSwan holds no ESTABLISHED
    IKE_SA (within 5 s), esptun no CHILD_SA and no established IKE SA."""
    try:
        netns.wait_until(lambda: not [s for s in B.charon.list_sas() if s.state == "ESTABLISHED"],
                         5, interval=0.2, what="strongSwan to hold no ESTABLISHED IKE_SA")
        none = True
    except TestError:
        none = False
    rep.check(none, f"[{tag}] strongSwan list-sas: no ESTABLISHED IKE_SA", B.charon.list_sas_text())
    ike, children, _ = esptun_ike(A.ep.status())
    rep.check(not children and str(ike.get("state", "")).lower() != "established",
              f"[{tag}] esptun status: no CHILD_SA, no established IKE SA", json.dumps(ike)[:1000])
