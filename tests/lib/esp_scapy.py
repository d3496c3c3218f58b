# The independent ESP peer of the wire tests: scapy's SecurityAssociation in
# tunnel mode with UDP encapsulation (RFC 4303 + RFC 3948) seals and opens
# the ESP datagrams that esptun exchanges, so esptun is checked against code
# it shares nothing with.
#
# scapy 2.5 gap, filled here: with ESN, RFC 4303 section 3.3.3 / 3.4.4.1
# appends the high 32 sequence bits to the data under the ICV. scapy 2.5 puts
# them into the AES-GCM AAD (RFC 4106 section 5) but its HMAC path for ESP
# ignores esn_en, so for CBC+HMAC with ESN this module computes the ICV
# itself (HMAC over SPI..ciphertext || seq_hi, truncated) around scapy's
# encryption. The trailer (padding bytes, pad length, next header) is also
# opened here with python-cryptography, because scapy's decrypt loses the
# padding bytes.
"""scapy-based ESP peer for interop and bad-input tests."""

import hashlib
import hmac
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation, _ESPPlain, CRYPT_ALGOS
from scapy.packet import Raw, raw

from esptun_conf import SUITES

NAT_T_PORT = 4500

SCAPY_ALGOS = {  # esptun cipher -> (scapy crypt_algo, scapy auth_algo)
    "aes128-gcm": ("AES-GCM", None),
    "aes256-gcm": ("AES-GCM", None),
    "aes128-cbc-hmac-sha1": ("AES-CBC", "HMAC-SHA1-96"),
    "aes256-cbc-hmac-sha1": ("AES-CBC", "HMAC-SHA1-96"),
    "aes128-cbc-hmac-sha256": ("AES-CBC", "SHA2-256-128"),
    "aes256-cbc-hmac-sha256": ("AES-CBC", "SHA2-256-128"),
}


class Opened:
    """What open() found in one ESP datagram."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return f"Opened(spi=0x{self.spi:x}, seq={self.seq}, padlen={self.padlen}, nh={self.nh})"


class ScapyEsp:
    """One SA direction handled by scapy.

    @cipher: esptun cipher name; @keys: esptun_conf.SaKeys; @esn: ESN on/off;
    @outer_src/@outer_dst: underlay addresses of the sender of this SA (they
    only fill scapy's tunnel_header; the bytes go out through a UDP socket).
    """

    def __init__(self, cipher, keys, esn, outer_src, outer_dst):
        self.cipher = cipher
        self.suite = SUITES[cipher]
        self.keys = keys
        self.esn = esn
        self.outer_src, self.outer_dst = outer_src, outer_dst
        self.crypt_name, self.auth_name = SCAPY_ALGOS[cipher]
        self._sas = {}

    # -- scapy SAs ----------------------------------------------------------

    def _outer(self):
        if ":" in self.outer_src:
            return IPv6(src=self.outer_src, dst=self.outer_dst)
        return IP(src=self.outer_src, dst=self.outer_dst)

    def sa(self, esn, with_auth=True, seq_hi=0):
        """sa() - scapy's SA in tunnel mode with the NAT-T UDP header."""
        key = (esn, with_auth, seq_hi)
        if key not in self._sas:
            self._sas[key] = SecurityAssociation(
                ESP, spi=self.keys.spi, crypt_algo=self.crypt_name, crypt_key=self.keys.enc,
                auth_algo=self.auth_name if with_auth else None,
                auth_key=self.keys.auth if with_auth else None,
                tunnel_header=self._outer(),
                nat_t_header=UDP(sport=NAT_T_PORT, dport=NAT_T_PORT),
                esn_en=esn, esn=seq_hi)
        return self._sas[key]

    def _icv(self, esp_bytes, seq_hi, esn):
        digest = hashlib.sha1 if self.suite["hash"] == "sha1" else hashlib.sha256
        extra = struct.pack("!I", seq_hi) if esn else b""
        return hmac.new(self.keys.auth, esp_bytes + extra, digest).digest()[:self.suite["icv"]]

    # -- sealing ------------------------------------------------------------

    def seal(self, inner, seq, esn=None, seq_hi=0):
        """seal() - the UDP payload (ESP header..ICV) carrying inner (an IP/IPv6
        scapy packet) with sequence number seq (low 32 bits on the wire, seq_hi
        under the ICV when ESN is on). esn overrides the SA's ESN mode (to
        build deliberately mismatched packets)."""
        esn = self.esn if esn is None else esn
        if self.suite["aead"] or not esn:
            pkt = self._encrypt(self.sa(esn, seq_hi=seq_hi if esn else 0), inner, seq)
            return raw(pkt[ESP])
        # CBC+HMAC with ESN: scapy encrypts, the ICV covers seq_hi too (see top).
        pkt = self._encrypt(self.sa(esn, with_auth=False), inner, seq)
        body = raw(pkt[ESP])
        return body + self._icv(body, seq_hi, True)

    @staticmethod
    def _encrypt(sa, inner, seq):
        if seq == 0:  # scapy reads seq_num=0 as "not given": use its counter
            sa.seq_num = 0
            return sa.encrypt(inner)
        return sa.encrypt(inner, seq_num=seq)

    def seal_raw(self, payload, nh, seq, padding=None, padlen=None):
        """seal_raw() - an ESP datagram with any payload and next header, optionally
        with chosen padding bytes / pad length (for bad-input tests)."""
        algo = CRYPT_ALGOS[self.crypt_name]
        plain = _ESPPlain(spi=self.keys.spi, seq=seq, iv=algo.generate_iv())
        plain.data = Raw(payload)
        plain.nh = nh
        plain = algo.pad(plain)
        if padding is not None:
            plain.padding = padding
        if padlen is not None:
            plain.padlen = padlen
        sa = self.sa(self.esn, with_auth=False)
        enc = algo.encrypt(sa, plain, sa.crypt_key, None, esn_en=self.esn, esn=0)
        body = raw(enc)
        if self.suite["aead"]:
            return body
        return body + self._icv(body, 0, self.esn)

    # -- opening ------------------------------------------------------------

    def open(self, data, seq_hi=0):
        """open() - verify and decrypt one ESP datagram (UDP payload) with scapy.
        Returns Opened(spi, seq, iv, inner (scapy packet), padding, padlen, nh).
        Raises scapy.layers.ipsec.IPSecIntegrityError (or ValueError) when
        the ICV does not verify."""
        spi, seq = struct.unpack("!II", data[:8])
        outer = self._outer() / UDP(sport=NAT_T_PORT, dport=NAT_T_PORT)
        if self.suite["aead"] or not self.esn:
            inner = self.sa(self.esn).decrypt(outer / ESP(data))
        else:
            icv_len = self.suite["icv"]
            body, icv = data[:-icv_len], data[-icv_len:]
            if not hmac.compare_digest(icv, self._icv(body, seq_hi, True)):
                raise ValueError("ICV mismatch (HMAC with ESN)")
            inner = self.sa(True, with_auth=False).decrypt(outer / ESP(body))
        iv, padding, padlen, nh = self._trailer(data, seq_hi)
        return Opened(spi=spi, seq=seq, iv=iv, inner=inner, padding=padding, padlen=padlen,
                      nh=nh, length=len(data))

    def _trailer(self, data, seq_hi):
        """_trailer() - IV, padding bytes, pad length and next header, decrypted
        with python-cryptography (after scapy verified the ICV)."""
        s = self.suite
        iv = data[8:8 + s["iv"]]
        ct = data[8 + s["iv"]:len(data) - s["icv"]]
        if s["aead"]:
            key, salt = self.keys.enc[:-4], self.keys.enc[-4:]
            aad = data[:4] + (struct.pack("!I", seq_hi) if self.esn else b"") + data[4:8]
            pt = AESGCM(key).decrypt(salt + iv, ct + data[len(data) - s["icv"]:], aad)
        else:
            d = Cipher(algorithms.AES(self.keys.enc), modes.CBC(iv)).decryptor()
            pt = d.update(ct) + d.finalize()
        padlen, nh = pt[-2], pt[-1]
        return iv, pt[len(pt) - 2 - padlen:len(pt) - 2], padlen, nh


def expected_padlen(suite, payload_len):
    """expected_padlen() - the minimal RFC 4303 padding for a payload length."""
    align = SUITES[suite]["block"]
    return -(payload_len + 2) % align
