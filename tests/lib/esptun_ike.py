# esptun_ike.py - esptun's side of the IKEv2 tests: the TOML of an
# esptun-gateway with one IKE peer (against strongSwan), and its status JSON
# read defensively (ike.sas[], the established ones, the address pool's
# leases; the IKE SAs of peer "sw", their children and SPIs, counters).
"""esptun's IKE config and status, as the IKE tests use them."""

import esptun_proc
import strongswan

PEER = "sw"  # esptun's name for the strongSwan peer
A_UL, A_IN = strongswan.UNDERLAY_A, strongswan.INNER_A


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
    and optionally endpoint, psk or psk_file (or cert_file, private_key_file,
    cert_chain_file, ca_dir, crl_files), rekey_time, ike_rekey_time,
    dpd_interval, ike_fragment_size, initiate, allow_weak, rsa_pss."""
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
    if peer.get("cert_file"):  # certificates: cert_file, private_key_file, ca_dir, ...
        for key in ("cert_file", "private_key_file", "cert_chain_file", "ca_dir"):
            if peer.get(key):
                lines.append(f"{key} = {_q(peer[key])}")
        if peer.get("crl_files"):
            lines.append(f"crl_files = {_list(peer['crl_files'])}")
    elif peer.get("psk_file"):
        lines.append(f"psk_file = {_q(peer['psk_file'])}")
    else:
        lines.append(f"psk = {_q(peer['psk'])}")
    lines += [f"remote_id = {_q(peer['remote_id'])}",
              f"ike_proposals = {_list(peer['ike_proposals'])}",
              f"esp_proposals = {_list(peer['esp_proposals'])}"]
    for key in ("rekey_time", "ike_rekey_time", "dpd_interval", "ike_fragment_size"):
        if peer.get(key) is not None:
            lines.append(f"{key} = {peer[key]}")
    for key in ("initiate", "allow_weak", "rsa_pss"):
        if peer.get(key) is not None:
            lines.append(f"{key} = {'true' if peer[key] else 'false'}")
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


def ike_sas(status):
    """ike_sas() - the IKE SAs of a status JSON: ike.sas[] (the designed place),
    else a top-level ike_sas[]; always a list of dicts."""
    ike = status.get("ike")
    lst = ike.get("sas") if isinstance(ike, dict) else None
    if not isinstance(lst, list):
        lst = status.get("ike_sas")
    return [s for s in lst if isinstance(s, dict)] if isinstance(lst, list) else []


def established(status, peer=None):
    """established() - the established IKE SAs of a status JSON (of peer only, when given)."""
    return [s for s in ike_sas(status) if str(s.get("state", "")).lower() == "established"
            and (peer is None or s.get("peer") == peer)]


def pool_leases(status):
    """pool_leases() - (leased, usable) summed over the status's
    ike.address_pool[]; (None, None) when it has none."""
    pools = status.get("ike", {}).get("address_pool") if isinstance(status.get("ike"), dict) \
        else None
    if not isinstance(pools, list):
        return None, None
    return (sum(p.get("leased", 0) for p in pools if isinstance(p, dict)),
            sum(p.get("usable", 0) for p in pools if isinstance(p, dict)))


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


def sa_brief(s):
    """sa_brief() - one esptun IKE SA as a short string for reports."""
    kids = ", ".join(f"{c.get('spi_in')}/{c.get('spi_out')}{'' if c.get('sending') else ' (idle)'}"
                     for c in s.get("children") or [])
    return (f"{s.get('state')} {s.get('spi_i')}/{s.get('spi_r')} child_rekeys "
            f"{s.get('child_rekeys')} ike_rekeys {s.get('ike_rekeys')} children [{kids}]")
