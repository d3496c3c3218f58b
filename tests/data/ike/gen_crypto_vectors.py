#!/usr/bin/python3
"""gen_crypto_vectors.py - independent test vectors for ike/keymat.cpp.

Writes tests/data/ike/crypto_vectors.txt (read by tests/unit/ike/crypto_vectors_test.cpp)
and the seed corpus tests/fuzz/corpus/ike_sk_open/. Run from anywhere:

    /usr/bin/python3 tests/data/ike/gen_crypto_vectors.py

Needs the `cryptography` package (38 is installed for /usr/bin/python3) for
AES-CBC, AES-GCM, X25519 and P-256. Everything IKE-specific is written here
from the RFCs, not from the C++: HMAC (RFC 2104, on hashlib), prf+ (RFC 7296
2.13), the key split (2.14, 2.17, 2.18), the AUTH computation (2.15), the SK
payload layout (3.14, RFC 5282), and MODP-2048 arithmetic with the prime
rebuilt from RFC 3526's formula. All "random" inputs come from a hash of a
label, so the output is the same on every run and a diff shows real changes.

File format: records separated by blank lines; a record starts with
"[kind]" and has "name = value" lines (hex, or decimal for ids and lengths).
"""

import hashlib
import hmac as std_hmac
import os
import struct
import sys

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OUT = os.path.join(HERE, "crypto_vectors.txt")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "ike_sk_open")

# ---- IANA "IKEv2 Transform Type" numbers and RFC lengths --------------------

ENCR_AES_CBC, ENCR_AES_GCM_16 = 12, 20
PRF = {5: "sha256", 6: "sha384", 7: "sha512"}  # PRF_HMAC_SHA2_*
# AUTH_HMAC_SHA2_*: (hash, key length, truncated ICV length), RFC 4868 2.1
INTEG = {0: None, 12: ("sha256", 32, 16), 13: ("sha384", 48, 24), 14: ("sha512", 64, 32)}
DH_MODP2048, DH_ECP256, DH_X25519 = 14, 19, 31


def det(label, n):
    """det() - n bytes derived from a label (SHA-256 in counter mode)."""
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{label}/{i}".encode()).digest()
        i += 1
    return out[:n]


# ---- HMAC and the PRF ---------------------------------------------------------


def hmac(hname, key, data):
    """hmac() - RFC 2104 over hashlib, written out (no hmac module)."""
    h = getattr(hashlib, hname)
    block = h().block_size
    if len(key) > block:
        key = h(key).digest()
    key = key.ljust(block, b"\0")
    inner = h(bytes(b ^ 0x36 for b in key) + data).digest()
    return h(bytes(b ^ 0x5C for b in key) + inner).digest()


def prf(prf_id, key, data):
    return hmac(PRF[prf_id], key, data)


def prf_plus(prf_id, key, seed, n):
    """prf_plus() - RFC 7296 2.13: T1 = prf(K, S | 0x01), Tn = prf(K, Tn-1 | S | n)."""
    out, t, i = b"", b"", 1
    while len(out) < n:
        assert i <= 255, "prf+ is limited to 255 blocks"
        t = prf(prf_id, key, t + seed + bytes([i]))
        out += t
        i += 1
    return out[:n]


def prf_len(prf_id):
    return getattr(hashlib, PRF[prf_id])().digest_size


def encr_keymat_len(encr, bits):
    """RFC 5282 7.1: GCM key material is the key plus a 4-byte salt."""
    return bits // 8 + (4 if encr == ENCR_AES_GCM_16 else 0)


def integ_key_len(integ):
    return INTEG[integ][1] if INTEG[integ] else 0


# ---- Key exchange -------------------------------------------------------------


def pi_times_2_to(bits):
    """floor(pi * 2^bits), by Machin's formula in integer arithmetic."""
    guard = 64
    one = 1 << (bits + guard)

    def arctan_inv(x):
        total = term = one // x
        n, sign = 1, 1
        while term:
            term //= x * x
            n += 2
            sign = -sign
            total += sign * (term // n)
        return total

    return (16 * arctan_inv(5) - 4 * arctan_inv(239)) >> guard


# RFC 3526 section 3: p = 2^2048 - 2^1984 - 1 + 2^64 * { [2^1918 pi] + 124476 }, g = 2
MODP_P = 2**2048 - 2**1984 - 1 + 2**64 * (pi_times_2_to(1918) + 124476)
MODP_P_HEX = (  # as printed in RFC 3526 section 3, to cross-check the formula
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A0879"
    "8E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B"
    "0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA4836"
    "1C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804"
    "F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6"
    "955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF"
)
assert MODP_P == int(MODP_P_HEX, 16), "RFC 3526 prime: formula and printed value disagree"
assert pow(3, MODP_P - 1, MODP_P) == 1


def be(n, length):
    return n.to_bytes(length, "big")


def modp_pub(x):
    return be(pow(2, int.from_bytes(x, "big"), MODP_P), 256)


def modp_shared(x, peer_pub):
    return be(pow(int.from_bytes(peer_pub, "big"), int.from_bytes(x, "big"), MODP_P), 256)


def x25519_pub(priv):
    k = x25519.X25519PrivateKey.from_private_bytes(priv)
    return k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def x25519_shared(priv, peer_pub):
    k = x25519.X25519PrivateKey.from_private_bytes(priv)
    return k.exchange(x25519.X25519PublicKey.from_public_bytes(peer_pub))


P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def ecp_priv(label):
    return be(int.from_bytes(det(label, 32), "big") % (P256_N - 1) + 1, 32)


def ecp_pub(priv):
    """RFC 5903 7: the KE data is x | y, each 32 bytes, no point format octet."""
    k = ec.derive_private_key(int.from_bytes(priv, "big"), ec.SECP256R1())
    n = k.public_key().public_numbers()
    return be(n.x, 32) + be(n.y, 32)


def ecp_shared(priv, peer_pub):
    """RFC 5903 7: the shared secret is the x coordinate only."""
    k = ec.derive_private_key(int.from_bytes(priv, "big"), ec.SECP256R1())
    peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + peer_pub)
    return k.exchange(ec.ECDH(), peer)


def dh_pair(group, label):
    """dh_pair() - (private, public) for a group, from a label."""
    if group == DH_X25519:
        priv = det(label, 32)
        return priv, x25519_pub(priv)
    if group == DH_ECP256:
        priv = ecp_priv(label)
        return priv, ecp_pub(priv)
    priv = det(label, 32)
    return priv, modp_pub(priv)


def dh_shared(group, priv, peer_pub):
    return {DH_X25519: x25519_shared, DH_ECP256: ecp_shared, DH_MODP2048: modp_shared}[group](priv, peer_pub)


# ---- Key schedule -------------------------------------------------------------

KEY_NAMES = ["sk_d", "sk_ai", "sk_ar", "sk_ei", "sk_er", "sk_pi", "sk_pr"]


def split_keys(suite, skeyseed, ni, nr, spi_i, spi_r):
    """RFC 7296 2.14: {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(...)."""
    encr, bits, integ, prf_id = suite
    p, i, e = prf_len(prf_id), integ_key_len(integ), encr_keymat_len(encr, bits)
    lens = [p, i, i, e, e, p, p]
    stream = prf_plus(prf_id, skeyseed, ni + nr + struct.pack(">QQ", spi_i, spi_r), sum(lens))
    keys, off = {}, 0
    for name, n in zip(KEY_NAMES, lens):
        keys[name] = stream[off : off + n]
        off += n
    return keys


def ike_keys(suite, ni, nr, g_ir, spi_i, spi_r):
    """RFC 7296 2.14: SKEYSEED = prf(Ni | Nr, g^ir)."""
    return split_keys(suite, prf(suite[3], ni + nr, g_ir), ni, nr, spi_i, spi_r)


def rekeyed_ike_keys(old_prf, old_sk_d, suite, g_ir, ni, nr, spi_i, spi_r):
    """RFC 7296 2.18: SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr), old PRF."""
    return split_keys(suite, prf(old_prf, old_sk_d, g_ir + ni + nr), ni, nr, spi_i, spi_r)


def psk_auth(prf_id, psk, message, nonce, sk_p, id_body):
    """RFC 7296 2.15: prf(prf(Shared Secret, "Key Pad for IKEv2"), <InitiatorSignedOctets>)."""
    octets = message + nonce + prf(prf_id, sk_p, id_body)
    return prf(prf_id, prf(prf_id, psk, b"Key Pad for IKEv2"), octets)


# ---- SK payload -----------------------------------------------------------------

IKE_AUTH, INFORMATIONAL = 35, 37
PT_SK, PT_IDI, PT_AUTH, PT_NOTIFY, PT_VENDOR = 46, 35, 39, 41, 43


def ike_header(spi_i, spi_r, next_payload, exchange, flags, mid, length):
    """RFC 7296 3.1: SPIs, Next Payload, version 2.0, exchange, flags, Message ID, Length."""
    return struct.pack(">QQBBBBII", spi_i, spi_r, next_payload, 0x20, exchange, flags, mid, length)


def payload(next_payload, body):
    """RFC 7296 3.2: generic payload header (critical bit clear) and body."""
    return struct.pack(">BBH", next_payload, 0, 4 + len(body)) + body


def sample_inner(label, size_hint):
    """A plausible inner chain: IDi (FQDN), AUTH (PSK), then Notify payloads to size."""
    chain = [
        (PT_IDI, bytes([2, 0, 0, 0]) + b"client.example.org"),
        (PT_AUTH, bytes([2, 0, 0, 0]) + det(label + "/auth", 32)),
    ]
    n = 0
    while sum(4 + len(b) for _, b in chain) < size_hint:
        chain.append((PT_NOTIFY, bytes([0, 0]) + struct.pack(">H", 16384 + n) + det(f"{label}/n{n}", 40)))
        n += 1
    out = b""
    for k, (_, body) in enumerate(chain):
        nxt = chain[k + 1][0] if k + 1 < len(chain) else 0
        out += payload(nxt, body)
    return chain[0][0], out


def sk_message(suite, sk_e, sk_a, first, inner, *, pad=None, pad_fill=0, pad_len_override=None,
               sk_len_delta=0, before=b"", before_type=None, iv_label="iv"):
    """
    sk_message() - a whole message with the SK payload (RFC 7296 3.14, RFC 5282 5).
    pad: Padding length (default: the least that aligns); pad_fill: its byte value;
    pad_len_override: a Pad Length octet that disagrees with the padding;
    sk_len_delta: added to the SK payload's length field (still authenticated);
    before/before_type: one unencrypted payload ahead of SK.
    Returns (message, offset of the SK payload).
    """
    encr, bits, integ, _ = suite
    gcm = encr == ENCR_AES_GCM_16
    block = 1 if gcm else 16  # GCM is a stream mode: any length aligns
    if pad is None:
        pad = (-(len(inner) + 1)) % block
    plain = inner + bytes([pad_fill]) * pad + bytes([pad if pad_len_override is None else pad_len_override])
    assert len(plain) % block == 0
    iv = det(iv_label, 8 if gcm else 16)
    icv_len = 16 if gcm else INTEG[integ][2]
    sk_len = 4 + len(iv) + len(plain) + icv_len
    first_type = before_type if before else PT_SK
    total = 28 + len(before) + sk_len
    hdr = ike_header(0x1122334455667788, 0x99AABBCCDDEEFF00, first_type, IKE_AUTH, 0x08, 1, total)
    sk_hdr = struct.pack(">BBH", first, 0, sk_len + sk_len_delta)
    if gcm:
        key, salt = sk_e[:-4], sk_e[-4:]
        aad = hdr + before + sk_hdr  # RFC 5282 5.1: IKE header .. SK generic header
        sealed = AESGCM(key).encrypt(salt + iv, plain, aad)  # RFC 5282 4: nonce = salt | IV
        msg = aad + iv + sealed
    else:
        enc = Cipher(algorithms.AES(sk_e), modes.CBC(iv)).encryptor()
        ct = enc.update(plain) + enc.finalize()
        signed = hdr + before + sk_hdr + iv + ct  # 3.14: header through the ciphertext
        msg = signed + hmac(INTEG[integ][0], sk_a, signed)[:icv_len]
    assert len(msg) == total
    return msg, 28 + len(before)


# ---- Output -----------------------------------------------------------------------


class Writer:
    def __init__(self):
        self.lines = [
            "# IKEv2 crypto test vectors, generated by tests/data/ike/gen_crypto_vectors.py",
            "# (an implementation independent of ike/keymat.cpp). Do not edit; rerun it.",
        ]

    def record(self, kind, **fields):
        self.lines.append("")
        self.lines.append(f"[{kind}]")
        for k, v in fields.items():
            self.lines.append(f"{k} = {v.hex() if isinstance(v, bytes) else v}")

    def text(self):
        return "\n".join(self.lines) + "\n"


def suite_fields(suite, dh):
    encr, bits, integ, prf_id = suite
    return dict(encr=encr, key_bits=bits, integ=integ, prf=prf_id, dh=dh)


def gen_prf_plus(w):
    for prf_id in PRF:
        L = prf_len(prf_id)
        lengths = [1, L - 1, L, L + 1, 2 * L, 3 * L + 5, 200]
        if prf_id == 5:
            lengths.append(255 * L)  # the largest prf+ can give
        for n in lengths:
            key = det(f"prfplus-key-{prf_id}-{n}", 17 + n % 50)
            seed = det(f"prfplus-seed-{prf_id}-{n}", 1 + n % 77)
            w.record("prf_plus", prf=prf_id, key=key, seed=seed, len=n, out=prf_plus(prf_id, key, seed, n))


def gen_dh(w):
    for group in (DH_X25519, DH_ECP256, DH_MODP2048):
        a, pa = dh_pair(group, f"dh-{group}-a")
        b, pb = dh_pair(group, f"dh-{group}-b")
        s = dh_shared(group, a, pb)
        assert s == dh_shared(group, b, pa)
        w.record("dh", why="random pair", group=group, priv_a=a, pub_a=pa, priv_b=b, pub_b=pb, shared=s)
    # MODP padding: a public value and a shared secret with a leading zero byte
    # must still be 256 bytes (RFC 7296 3.4, 2.14).
    i = 0
    while True:
        a = det(f"modp-lead-a-{i}", 32)
        pa = modp_pub(a)
        if pa[0] == 0:
            break
        i += 1
    j = 0
    while True:
        b = det(f"modp-lead-b-{j}", 32)
        pb = modp_pub(b)
        s = modp_shared(a, pb)
        if s[0] == 0 and pb[0] != 0:
            break
        j += 1
    assert s == modp_shared(b, pa)
    w.record("dh", why="MODP public value and shared secret with a leading zero byte", group=DH_MODP2048,
             priv_a=a, pub_a=pa, priv_b=b, pub_b=pb, shared=s)


SUITES_IKE = [
    # (encr, key bits, integ, prf), dh
    ((ENCR_AES_GCM_16, 128, 0, 5), DH_X25519),
    ((ENCR_AES_GCM_16, 256, 0, 6), DH_ECP256),
    ((ENCR_AES_CBC, 128, 12, 5), DH_MODP2048),
    ((ENCR_AES_CBC, 256, 13, 6), DH_ECP256),
    ((ENCR_AES_CBC, 256, 14, 7), DH_X25519),
]


def gen_ike_keys(w):
    for n, (suite, dh) in enumerate(SUITES_IKE):
        a, pa = dh_pair(dh, f"ike-{n}-i")
        b, pb = dh_pair(dh, f"ike-{n}-r")
        g_ir = dh_shared(dh, a, pb)
        ni, nr = det(f"ike-{n}-ni", 32), det(f"ike-{n}-nr", 16 + 16 * n)
        spi_i = int.from_bytes(det(f"ike-{n}-spii", 8), "big")
        spi_r = int.from_bytes(det(f"ike-{n}-spir", 8), "big")
        keys = ike_keys(suite, ni, nr, g_ir, spi_i, spi_r)
        w.record("ike_keys", **suite_fields(suite, dh), priv_i=a, pub_i=pa, priv_r=b, pub_r=pb, g_ir=g_ir,
                 ni=ni, nr=nr, spi_i=f"{spi_i:016x}", spi_r=f"{spi_r:016x}", **keys)


def gen_rekey(w):
    cases = [(5, (ENCR_AES_GCM_16, 256, 0, 6)), (6, (ENCR_AES_CBC, 128, 12, 5)), (7, (ENCR_AES_GCM_16, 128, 0, 7))]
    for n, (old_prf, suite) in enumerate(cases):
        old_sk_d = det(f"rekey-{n}-skd", prf_len(old_prf))
        g_ir = det(f"rekey-{n}-gir", 32 + 32 * n)
        ni, nr = det(f"rekey-{n}-ni", 32), det(f"rekey-{n}-nr", 32)
        spi_i = int.from_bytes(det(f"rekey-{n}-spii", 8), "big")
        spi_r = int.from_bytes(det(f"rekey-{n}-spir", 8), "big")
        keys = rekeyed_ike_keys(old_prf, old_sk_d, suite, g_ir, ni, nr, spi_i, spi_r)
        w.record("rekey", old_prf=old_prf, old_sk_d=old_sk_d, **suite_fields(suite, DH_X25519), g_ir=g_ir, ni=ni,
                 nr=nr, spi_i=f"{spi_i:016x}", spi_r=f"{spi_r:016x}", **keys)


def gen_child(w):
    for n, (prf_id, pfs, length) in enumerate([(5, False, 72), (5, True, 72), (6, True, 160), (7, False, 64 * 3 + 7)]):
        sk_d = det(f"child-{n}-skd", prf_len(prf_id))
        g_ir = det(f"child-{n}-gir", 32) if pfs else b""
        ni, nr = det(f"child-{n}-ni", 32), det(f"child-{n}-nr", 24)
        # RFC 7296 2.17: KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr)
        w.record("child_keymat", prf=prf_id, sk_d=sk_d, g_ir=g_ir, ni=ni, nr=nr, len=length,
                 out=prf_plus(prf_id, sk_d, g_ir + ni + nr, length))


def gen_psk(w):
    for n, prf_id in enumerate([5, 6, 7]):
        psk = b"capture-only-psk-not-a-secret-0000" if n == 0 else det(f"psk-{n}", 20 + 30 * n)
        message = det(f"psk-{n}-msg", 300 + n)
        nonce = det(f"psk-{n}-nonce", 32)
        sk_p = det(f"psk-{n}-skp", prf_len(prf_id))
        id_body = bytes([2, 0, 0, 0]) + b"a.cap.example"
        w.record("psk_auth", prf=prf_id, psk=psk, message=message, nonce=nonce, sk_p=sk_p, id_body=id_body,
                 out=psk_auth(prf_id, psk, message, nonce, sk_p, id_body))


SUITES_SK = [
    (ENCR_AES_CBC, 128, 12, 5),
    (ENCR_AES_CBC, 192, 12, 5),
    (ENCR_AES_CBC, 256, 13, 6),
    (ENCR_AES_CBC, 256, 14, 7),
    (ENCR_AES_GCM_16, 128, 0, 5),
    (ENCR_AES_GCM_16, 256, 0, 6),
]


def sk_keys(suite, label):
    encr, bits, integ, _ = suite
    return det(label + "/e", encr_keymat_len(encr, bits)), det(label + "/a", integ_key_len(integ))


def gen_sk(w):
    for n, suite in enumerate(SUITES_SK):
        sk_e, sk_a = sk_keys(suite, f"sk-{n}")
        fields = dict(encr=suite[0], key_bits=suite[1], integ=suite[2], sk_e=sk_e, sk_a=sk_a)
        gcm = suite[0] == ENCR_AES_GCM_16
        block = 1 if gcm else 16
        first, inner = sample_inner(f"sk-{n}", 60)
        _, big = sample_inner(f"sk-{n}-big", 900)
        least = (-(len(inner) + 1)) % block
        vendor_id = dict(before=payload(PT_SK, det("vid", 16)), before_type=PT_VENDOR)
        accept = [
            ("least padding", first, inner, {}),
            ("empty inner chain (INFORMATIONAL liveness check)", 0, b"", {}),
            ("larger chain", first, big, {}),
            ("extra padding of 0xa5 bytes", first, inner, dict(pad=(3 if gcm else 32) + least, pad_fill=0xA5)),
            ("unencrypted Vendor ID payload before SK", first, inner, vendor_id),
            ("padding only: Pad Length = plaintext length - 1", 0, b"", dict(pad=31 if not gcm else 7)),
        ]
        for k, (why, fp, body, opts) in enumerate(accept):
            msg, off = sk_message(suite, sk_e, sk_a, fp, body, iv_label=f"sk-{n}-{k}", **opts)
            w.record("sk_open", why=why, **fields, msg=msg, sk_offset=off, first=fp, inner=body)
        plain_len = len(inner) + least + 1
        reject = [
            ("Pad Length one more than fits", dict(pad_len_override=plain_len)),
            ("Pad Length 255", dict(pad_len_override=255)),
            ("SK payload length field one too large (authenticated)", dict(sk_len_delta=1)),
            ("SK payload length field one too small (authenticated)", dict(sk_len_delta=-1)),
        ]
        for k, (why, opts) in enumerate(reject):
            msg, off = sk_message(suite, sk_e, sk_a, first, inner, iv_label=f"sk-{n}-bad{k}", **opts)
            w.record("sk_reject", why=why, **fields, msg=msg, sk_offset=off)


# The fuzz target's fixed keys (tests/fuzz/fuzz_ike_sk_open.cpp): key material
# byte i is 0x40 + i, the integrity key is all 0x24. Order = the target's suite table.
FUZZ_SUITES = [
    (ENCR_AES_CBC, 128, 12, 5),
    (ENCR_AES_CBC, 256, 13, 6),
    (ENCR_AES_CBC, 256, 14, 7),
    (ENCR_AES_GCM_16, 128, 0, 5),
    (ENCR_AES_GCM_16, 256, 0, 6),
]


def gen_corpus():
    """Seeds: [suite index][SK offset][message] with messages sealed under the fuzz keys."""
    os.makedirs(CORPUS, exist_ok=True)
    for n, suite in enumerate(FUZZ_SUITES):
        encr, bits, integ, _ = suite
        sk_e = bytes(0x40 + i for i in range(encr_keymat_len(encr, bits)))
        sk_a = bytes([0x24]) * integ_key_len(integ)
        for k, size in enumerate([0, 60, 300]):
            first, inner = sample_inner(f"fuzz-{n}-{k}", size) if size else (0, b"")
            msg, off = sk_message(suite, sk_e, sk_a, first, inner, iv_label=f"fuzz-{n}-{k}")
            with open(os.path.join(CORPUS, f"seed-{n}-{k}"), "wb") as f:
                f.write(bytes([n, off]) + msg)


def self_check():
    """The hand-written HMAC against Python's own, and RFC 7748 6.1 through cryptography."""
    for h in ("sha256", "sha384", "sha512"):
        for key in (b"", b"k", bytes(200)):
            assert hmac(h, key, b"data") == std_hmac.new(key, b"data", h).digest()
    alice = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    bob_pub = bytes.fromhex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
    assert x25519_shared(alice, bob_pub).hex() == "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"


def main():
    self_check()
    w = Writer()
    gen_prf_plus(w)
    gen_dh(w)
    gen_ike_keys(w)
    gen_rekey(w)
    gen_child(w)
    gen_psk(w)
    gen_sk(w)
    with open(OUT, "w") as f:
        f.write(w.text())
    gen_corpus()
    print(f"wrote {OUT} and {CORPUS}/", file=sys.stderr)


if __name__ == "__main__":
    main()
