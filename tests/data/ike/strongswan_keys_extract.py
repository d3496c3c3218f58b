#!/usr/bin/python3
"""strongswan_keys_extract.py - turn capture-strongswan-keys.sh's charon logs and
pcaps into tests/data/ike/crypto_strongswan.txt (same record format as
crypto_vectors.txt), printed to stdout.

Usage: strongswan_keys_extract.py SCRATCH PSK NAME|IKE_PROPOSAL|ESP_PROPOSAL...

Everything comes from strongSwan: the negotiated suite from its "selected
proposal" line, g^ir, SK_* and the CHILD_SA keys from its level-4 key dumps,
the plaintext of each SK payload from its level-3 "plain" dump, and the
messages themselves (with the nonces and SPIs in them) from the wire.
"""

import os
import re
import struct
import sys

# strongSwan's transform names -> IANA numbers (RFC 7296 3.3.2, IANA registry)
ENCR = {"AES_CBC_128": (12, 128), "AES_CBC_256": (12, 256), "AES_GCM_16_128": (20, 128), "AES_GCM_16_256": (20, 256)}
INTEG = {"HMAC_SHA2_256_128": 12, "HMAC_SHA2_384_192": 13, "HMAC_SHA2_512_256": 14}
PRF = {"PRF_HMAC_SHA2_256": 5, "PRF_HMAC_SHA2_384": 6, "PRF_HMAC_SHA2_512": 7}
DH = {"MODP_2048": 14, "ECP_256": 19, "CURVE_25519": 31}


def read_lines(log_path):
    return open(log_path, errors="replace").read().splitlines()


def dumps(lines):
    """dumps() - [(label, bytes)] of every "label => N bytes @ addr" hex dump, in log order."""
    out = []
    head = re.compile(r"^\d+\[\w+\] (.*?) => (\d+) bytes @ ")
    row = re.compile(r"^\d+\[\w+\]\s+\d+: ((?:[0-9A-F]{2} ?)+)")
    i = 0
    while i < len(lines):
        m = head.match(lines[i])
        i += 1
        if not m:
            continue
        label, n = m.group(1).strip(), int(m.group(2))
        data = b""
        while len(data) < n and i < len(lines):
            r = row.match(lines[i])
            if not r:
                break
            data += bytes.fromhex(r.group(1)[: 3 * 16].replace(" ", ""))
            i += 1
        if len(data) != n:
            sys.exit(f"dump '{label}' has {len(data)} of {n} bytes")
        out.append((label, data))
    return out


def first(ds, label, nth=0):
    hits = [d for lab, d in ds if lab == label]
    if len(hits) <= nth:
        sys.exit(f"no dump '{label}' #{nth}")
    return hits[nth]


def sk_plain(lines, which):
    """The 'plain' dump of the first "encrypted payload <which>:" block (encryption/decryption)."""
    start = next(k for k, line in enumerate(lines) if line.endswith(f"encrypted payload {which}:"))
    return first(dumps(lines[start:]), "plain")


def ike_messages(pcap_path):
    """IKE messages (no non-ESP marker) from an Ethernet/IPv4 pcap, in capture order."""
    data = open(pcap_path, "rb").read()
    end = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    assert struct.unpack(end + "I", data[20:24])[0] == 1, "Ethernet captures expected"
    pos, out = 24, []
    while pos + 16 <= len(data):
        incl = struct.unpack(end + "I", data[pos + 8 : pos + 12])[0]
        frame = data[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        if frame[12:14] != b"\x08\x00" or frame[23] != 17:
            continue
        ip = frame[14:]
        udp = ip[(ip[0] & 15) * 4 :]
        sport, dport, ulen = struct.unpack(">HHH", udp[:6])
        body = udp[8:ulen]
        if 4500 in (sport, dport):
            if body[:4] != b"\0\0\0\0":
                continue  # ESP
            body = body[4:]
        if len(body) >= 28:
            out.append(body)
    return out


def payloads(msg):
    """[(type, offset)] of the payload chain after the IKE header (SK not entered)."""
    out, nxt, off = [], msg[16], 28
    while nxt != 0 and off + 4 <= len(msg):
        out.append((nxt, off))
        if nxt == 46:
            break
        nxt, length = msg[off], struct.unpack(">H", msg[off + 2 : off + 4])[0]
        off += length
    return out


def nonce_of(msg):
    for t, off in payloads(msg):
        if t == 40:
            length = struct.unpack(">H", msg[off + 2 : off + 4])[0]
            return msg[off + 4 : off + length]
    sys.exit("no Nonce payload")


def sk_offset(msg):
    for t, off in payloads(msg):
        if t == 46:
            return off
    sys.exit("no SK payload")


def one_run(scratch, psk, name, ike_prop, esp_prop):
    lines = read_lines(os.path.join(scratch, f"{name}-a.log"))
    text = "\n".join(lines)
    sel = re.search(r"selected proposal: IKE:(\S+)", text).group(1).split("/")
    encr, key_bits = ENCR[sel[0]]
    integ = INTEG.get(sel[1], 0)
    prf, dh = PRF[sel[-2]], DH[sel[-1]]
    esp = re.search(r"selected proposal: ESP:(\S+)", text).group(1)
    msgs = ike_messages(os.path.join(scratch, f"{name}.pcap"))
    by_kind = {}
    for m in msgs:  # first of each (exchange, response?) pair
        by_kind.setdefault((m[18], bool(m[19] & 0x20)), m)
    init_req, init_resp = by_kind[(34, False)], by_kind[(34, True)]
    auth_req, auth_resp = by_kind[(35, False)], by_kind[(35, True)]
    ds = dumps(lines)
    names = ["sk_d", "sk_ai", "sk_ar", "sk_ei", "sk_er", "sk_pi", "sk_pr"]
    # With AEAD there is no SK_a*, and strongSwan dumps none.
    keys = {k: first(ds, f"Sk_{k[3:]} secret") if integ or k not in ("sk_ai", "sk_ar") else b"" for k in names}
    child = first(ds, "encryption initiator key") + first(ds, "encryption responder key")
    fields = dict(
        name=name, strongswan_ike=ike_prop, strongswan_esp=esp_prop, esp_selected=esp,
        encr=encr, key_bits=key_bits, integ=integ, prf=prf, dh=dh,
        psk=psk.encode(),
        spi_i=auth_req[0:8].hex(), spi_r=auth_req[8:16].hex(),
        ni=nonce_of(init_req), nr=nonce_of(init_resp),
        g_ir=first(ds, "shared Diffie Hellman secret"),
        **keys,
        init_request=init_req, init_response=init_resp,
        auth_request=auth_req, auth_request_sk=sk_offset(auth_req), auth_request_plain=sk_plain(lines, "encryption"),
        auth_response=auth_resp, auth_response_sk=sk_offset(auth_resp),
        auth_response_plain=sk_plain(lines, "decryption"),
        child_keymat=child,
    )
    print()
    print("[strongswan]")
    for k, v in fields.items():
        print(f"{k} = {v.hex() if isinstance(v, bytes) else v}")


def main():
    scratch, psk = sys.argv[1], sys.argv[2]
    print("# strongSwan 5.9's own IKEv2 keys and messages, captured by")
    print("# tests/data/ike/capture-strongswan-keys.sh (throw-away keys). Do not edit.")
    for run in sys.argv[3:]:
        one_run(scratch, psk, *run.split("|"))


if __name__ == "__main__":
    main()
