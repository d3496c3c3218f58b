# Cipher suites, random SA keys and TOML configs for esptun endpoints, as the
# wire tests write them (one config file per endpoint, see the config contract).
"""Config writing for the wire tests."""

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field

# name -> AES key bytes, HMAC key bytes (0 = AEAD), ICV bytes, IV bytes, block
SUITES = {
    "aes128-gcm": dict(aead=True, enc_len=16, auth_len=0, icv=16, iv=8, block=4),
    "aes256-gcm": dict(aead=True, enc_len=32, auth_len=0, icv=16, iv=8, block=4),
    "aes128-cbc-hmac-sha1": dict(aead=False, enc_len=16, auth_len=20, icv=12, iv=16, block=16,
                                 hash="sha1"),
    "aes256-cbc-hmac-sha1": dict(aead=False, enc_len=32, auth_len=20, icv=12, iv=16, block=16,
                                 hash="sha1"),
    "aes128-cbc-hmac-sha256": dict(aead=False, enc_len=16, auth_len=32, icv=16, iv=16, block=16,
                                   hash="sha256"),
    "aes256-cbc-hmac-sha256": dict(aead=False, enc_len=32, auth_len=32, icv=16, iv=16, block=16,
                                   hash="sha256"),
}


def gcm_impl():
    """gcm_impl() - the AES-GCM code esptun must pick here ("crypto_impl" in
    its status): "gcm-vaes" where /proc/cpuinfo lists AVX-512 F/BW/VL, VAES
    and VPCLMULQDQ, else "gcm-evp"."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    need = {"avx512f", "avx512bw", "avx512vl", "vaes", "vpclmulqdq", "aes", "pclmulqdq"}
    return "gcm-vaes" if need.issubset(flags) else "gcm-evp"


@dataclass
class SaKeys:
    """One SA direction: SPI and key material (GCM: key || 4-byte salt in enc)."""
    spi: int
    enc: bytes
    auth: bytes = b""

    @staticmethod
    def random(suite, spi):
        s = SUITES[suite]
        if s["aead"]:
            return SaKeys(spi, secrets.token_bytes(s["enc_len"] + 4))
        return SaKeys(spi, secrets.token_bytes(s["enc_len"]), secrets.token_bytes(s["auth_len"]))


@dataclass
class Peer:
    name: str
    cipher: str
    out: SaKeys
    inb: SaKeys
    allowed_ips: list
    endpoint: str = None  # None: learned
    esn: bool = True
    replay_window: int = 1024


@dataclass
class Endpoint:
    """One esptun endpoint's [tunnel] table and its peers."""
    interface: str
    addresses: list
    control_socket: str
    listen: str = "0.0.0.0:4500"
    mtu: int = 0
    tun_io: str = "direct"
    crypto_impl: str = "auto"  # auto | stitched | two-pass (CBC-HMAC suites)
    peers: list = field(default_factory=list)
    # None: a folder next to the config file (the test's temporary folder),
    # never the system's /var/lib/esptun.
    state_dir: str = None
    workers: int = None  # None: the gateway's default (one per CPU)
    io_engine: str = None  # None: auto
    # Further [tunnel] keys, written as they are: {"queue_target_us": 0}.
    extra: dict = field(default_factory=dict)

    def render(self):
        return render(self)

    def write(self, path):
        if self.state_dir is None:
            self.state_dir = os.path.join(os.path.dirname(os.path.abspath(path)),
                                          f"state-{self.interface}")
        return write_private(path, self.render())


def _hex(b):
    return "0x" + b.hex()


def _list(items):
    return "[" + ", ".join(f'"{x}"' for x in items) + "]"


def render(ep):
    """render() - the TOML text of an endpoint config."""
    lines = [
        "[tunnel]",
        f'interface = "{ep.interface}"',
        f"addresses = {_list(ep.addresses)}",
        f'listen = "{ep.listen}"',
        f"mtu = {ep.mtu}",
        f'tun_io = "{ep.tun_io}"',
        f'crypto_impl = "{ep.crypto_impl}"',
        f'control_socket = "{ep.control_socket}"',
    ]
    if ep.state_dir:
        lines.append(f'state_dir = "{ep.state_dir}"')
    if ep.workers is not None:
        lines.append(f"workers = {ep.workers}")
    if ep.io_engine is not None:
        lines.append(f'io_engine = "{ep.io_engine}"')
    for key, value in ep.extra.items():
        lines.append(f"{key} = {_toml_value(value)}")
    for p in ep.peers:
        aead = SUITES[p.cipher]["aead"]
        lines += ["", "[[peer]]", f'name = "{p.name}"']
        if p.endpoint:
            lines.append(f'endpoint = "{p.endpoint}"')
        lines += [f"allowed_ips = {_list(p.allowed_ips)}",
                  f'cipher = "{p.cipher}"',
                  f"esn = {'true' if p.esn else 'false'}",
                  f"replay_window = {p.replay_window}"]
        for table, sa in (("out", p.out), ("in", p.inb)):
            lines += [f"  [peer.{table}]", f"  spi = 0x{sa.spi:x}"]
            if aead:
                lines.append(f'  key = "{_hex(sa.enc)}"')
            else:
                lines += [f'  enc_key = "{_hex(sa.enc)}"', f'  auth_key = "{_hex(sa.auth)}"']
    return "\n".join(lines) + "\n"


def seq_fingerprint(sa):
    """seq_fingerprint() - how esptun's sequence state file names the key of
    a static SA (service/seq_state.cpp key_fingerprint()): HMAC-SHA256 under
    a fixed label over the AES key and the HMAC key, each behind its 32-bit
    big-endian length."""
    msg = b"".join(len(k).to_bytes(4, "big") + k for k in (sa.enc, sa.auth))
    return hmac.new(b"esptun seq-state key fingerprint v1", msg, hashlib.sha256).hexdigest()


def sa_pair(cipher, spi_base=0x1000):
    """sa_pair() - fresh keys for both directions between two endpoints A and B:
    (keys A sends with = B's in, keys B sends with = A's in)."""
    a_out = SaKeys.random(cipher, spi_base + 1)
    b_out = SaKeys.random(cipher, spi_base + 0x1001)
    return a_out, b_out


# ---------------------------------------------------------------------------
# IKEv2 configs (peers with psk instead of [peer.out]/[peer.in] keys), for the
# road-warrior tests: [tunnel] and [[peer]] tables given as dicts, any keys.

def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    s = str(v)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_ike_config(tunnel, peers):
    """render_ike_config() - TOML text from a [tunnel] dict and a list of
    [[peer]] dicts; keys in the order given, a key whose value is None is
    left out (e.g. a client's addresses, a responder-only peer's endpoint)."""
    lines = ["[tunnel]"] + [f"{k} = {_toml_value(v)}" for k, v in tunnel.items()
                            if v is not None]
    return "\n".join(lines) + "\n" + render_tables("peer", peers)


def render_tables(name, rows):
    """render_tables() - TOML [[name]] tables from a list of dicts, as
    render_ike_config() writes peers (e.g. the [[user]] tables of a users
    file); a key whose value is None is left out."""
    lines = []
    for row in rows:
        lines += ["", f"[[{name}]]"] + [f"{k} = {_toml_value(v)}" for k, v in row.items()
                                        if v is not None]
    return "\n".join(lines) + "\n" if lines else ""


def write_private(path, text):
    """write_private() - write a config (it holds keys) readable by its owner
    only: created at mode 0600, so it is never readable by others, not even
    for a moment (esptun refuses a config with inline keys that is)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
