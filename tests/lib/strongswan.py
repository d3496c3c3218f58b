#!/usr/bin/python3
# strongswan.py - one strongSwan 5.9 charon (IKEv2, PSK) per network
# namespace, as the IKE interop peer of the wire tests. strongSwan's
# kernel-libipsec plugin does ESP in userspace over a TUN device (ipsec0), so
# it works although the test machines' kernel has no ESP; it always
# encapsulates ESP in UDP 4500. Each daemon gets
#   - its own strongswan.conf with an explicit plugin list (kernel-libipsec
#     before kernel-netlink: libipsec is the IPsec backend, netlink still does
#     addresses and routes), its own VICI socket and a stderr log captured in
#     a file of the scratch folder;
#   - its own /run (charon's PID file path is fixed): `unshare -m` and a bind
#     mount, inside `ip netns exec`.
# Routes to the peer's traffic selector go to table 220 via ipsec0, with the
# local traffic selector's address as the source: that address must be on
# some interface of the namespace (the tests put it on lo).
#
# Everything started here is stopped at clean-up (netns.on_cleanup) even when
# a test fails or is interrupted; the scratch folder goes with the caller's
# temp folder. Charon.kill() SIGKILLs the daemon (a crash, for DPD tests) and
# start() may run it again.
#
# list_sas() parses `swanctl --list-sas --pretty` (one item per line, so IDs
# with spaces cannot confuse it) into IkeSa/ChildSa: states, SPIs,
# algorithms, traffic selectors, ports, byte counters, virtual IPs.
# Config.pools makes charon a road-warrior gateway handing out virtual IPs
# and attributes (DNS, ...) from swanctl.conf pools; list_pools() parses
# `swanctl --list-pools --leases --pretty` (leases online / offline).
#
# `/usr/bin/python3 tests/lib/strongswan.py --selfcheck` (root) runs two
# charons against each other through this module and needs no esptun build:
# three suites (either side initiating, by swanctl or start_action=start),
# ping both ways, the list-sas parser (IKE SPIs equal, CHILD SPIs crosswise,
# algorithms), a wrong PSK (the log lines the esptun test relies on), and
# that kernel-libipsec refuses ESN ("IPsec SA: ESN not supported").
"""strongSwan charon as a test peer in a network namespace."""

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import netns
import ping
from netns import TestError

CHARON = "/usr/lib/ipsec/charon"
SWANCTL = "swanctl"
PLUGINS = ("random nonce openssl pem pkcs1 x509 pubkey aes sha1 sha2 hmac gcm curve25519 gmp "
           "kdf kernel-libipsec kernel-netlink socket-default vici")
PACKAGES = ("strongswan-charon strongswan-swanctl libcharon-extra-plugins "
            "libcharon-extauth-plugins libstrongswan-extra-plugins")


def require_tools():
    """require_tools() - charon and swanctl installed, else TestError naming the packages."""
    missing = [t for t in (CHARON, SWANCTL, "unshare", "mount") if not _which(t)]
    if missing:
        raise TestError(f"strongSwan interop needs {', '.join(missing)} "
                        f"(apt-get install {PACKAGES})")


def _which(tool):
    if os.path.isabs(tool):
        return os.access(tool, os.X_OK)
    return shutil.which(tool) is not None


@dataclass
class Config:
    """One charon's connection `conn` with one CHILD_SA `child` (tunnel mode, PSK).

    Proposals: strongSwan syntax, a comma-separated string or a list. Times:
    strongSwan durations ("1h", "8s") or seconds as int; None leaves
    strongSwan's default. start_action: "none" | "start" | "trap".
    """
    local_addr: str
    remote_addr: str
    local_ts: str
    remote_ts: str
    local_id: str
    remote_id: str
    psk: str
    ike_proposals: str = "aes128gcm16-prfsha256-x25519"
    esp_proposals: str = "aes128gcm16"
    conn: str = "ab"
    child: str = "net"
    ike_rekey_time: object = "4h"
    ike_over_time: object = None
    ike_reauth_time: object = None
    child_rekey_time: object = "1h"
    child_life_time: object = None
    child_rand_time: object = None
    dpd_delay: object = None
    dpd_action: str = None  # clear | trap | restart
    start_action: str = "none"
    remote_port: int = None  # None: 500 (strongSwan's default); it floats to 4500
    local_port: int = None
    mobike: bool = False
    encap: bool = True
    # Quick give-up for tests (strongSwan's defaults take ~165 s): 1 s, x1.4, 4 tries.
    retransmit_timeout: float = 1.0
    retransmit_base: float = 1.4
    retransmit_tries: int = 4
    ike_log_level: int = 2
    esp_log_level: int = 1  # 2 logs every ESP packet (and drops for unknown SPIs)
    cfg_log_level: int = 2  # 2: proposal and traffic selector choices (and a config dump)
    log_ms: bool = False  # log times as HH:MM:SS.mmm (filelog time_add_ms) instead of HH:MM:SS
    # charon.fragment_size: the IP datagram size of the IKE fragments (RFC
    # 7383) charon sends. None: strongSwan's default (1280).
    fragment_size: int = None
    # charon.rsa_pss: sign with RSASSA-PSS where charon signs with an RSA
    # key (RFC 7427 AUTH). False: strongSwan's default, PKCS#1 v1.5.
    rsa_pss: bool = False
    # Virtual IP pools handed out by this charon (a road-warrior gateway):
    # {name: {"addrs": "10.66.0.0/24", "dns": "10.66.0.53", ...}}, values a
    # string or a list (any swanctl.conf pools.<name>.<attr>: dns, nbns,
    # split_include, ...). The connection gets `pools = name[,name]`, the
    # file a `pools { }` section. None: neither (the output is unchanged).
    # remote_addr may be "%any" (accept IKE from anywhere, never initiate);
    # remote_ts "dynamic" is the peer's (virtual) address.
    pools: dict = None
    # A road-warrior client: the virtual IP(s) to ask for ("0.0.0.0": any
    # IPv4 address). The child's local_ts should then be "dynamic".
    vips: str = None
    # Certificates instead of the PSK (tests/netns/test_ike_strongswan_certs.py):
    # swanctl_dir is the Charon's own folder (swanctl --load-all reads the
    # credentials beside its swanctl.conf) holding x509/ (cert: our
    # certificate's file name there), x509ca/ (root and intermediates) and
    # rsa/, ecdsa/ or pkcs8/ (the key; pkcs8/ for Ed25519). None: PSK as above.
    swanctl_dir: str = None
    cert: str = None
    # EAP (RFC 7296 section 2.16), with swanctl_dir: each side's auth
    # ("pubkey", "eap-mschapv2", "eap-tls"; None: pubkey), its eap_id
    # ("%any" on a gateway's remote side makes charon ask EAP-Identity), and
    # the EAP users charon knows ({name: password}: a gateway's users or a
    # client's own). Loads the EAP plugins (eap-mschapv2 is in
    # libcharon-extauth-plugins).
    local_auth: str = None
    remote_auth: str = None
    local_eap_id: str = None
    remote_eap_id: str = None
    eap_secrets: dict = None


def _csv(v):
    return ",".join(v) if isinstance(v, (list, tuple)) else str(v)


def _dur(v):
    return f"{v}s" if isinstance(v, (int, float)) else str(v)


def _uses_eap(cfg):
    return any(a and a.startswith("eap") for a in (cfg.local_auth, cfg.remote_auth))


def strongswan_conf(cfg, vici_socket):
    """strongswan_conf() - charon's strongswan.conf text."""
    plugins = PLUGINS + (" eap-identity eap-mschapv2 eap-tls" if _uses_eap(cfg) else "")
    return f"""charon {{
  # explicit plugin list: kernel-libipsec BEFORE kernel-netlink so libipsec is the IPsec backend
  load_modular = no
  load = {plugins}
  install_routes = yes
  retransmit_timeout = {cfg.retransmit_timeout}
  retransmit_base = {cfg.retransmit_base}
  retransmit_tries = {cfg.retransmit_tries}
{f"  fragment_size = {cfg.fragment_size}{chr(10)}" if cfg.fragment_size else ""}\
{"  rsa_pss = yes" + chr(10) if cfg.rsa_pss else ""}  plugins {{
    vici {{
      socket = unix://{vici_socket}
    }}
  }}
  filelog {{
    stderr {{
      default = 1
      ike = {cfg.ike_log_level}
      esp = {cfg.esp_log_level}
      cfg = {cfg.cfg_log_level}
      time_format = %H:%M:%S
      time_add_ms = {'yes' if cfg.log_ms else 'no'}
      ike_name = yes
    }}
  }}
  # charon-systemd would log to the journal: off (no journald here)
  journal {{
    default = -1
  }}
}}
"""


def swanctl_conf(cfg):
    """swanctl_conf() - the connection, its child and the PSK."""
    conn = ["    version = 2",
            f"    local_addrs = {cfg.local_addr}",
            f"    remote_addrs = {cfg.remote_addr}",
            f"    proposals = {_csv(cfg.ike_proposals)}",
            f"    encap = {'yes' if cfg.encap else 'no'}",
            f"    mobike = {'yes' if cfg.mobike else 'no'}"]
    if cfg.pools:
        conn.append(f"    pools = {','.join(cfg.pools)}")
    if cfg.vips:
        conn.append(f"    vips = {cfg.vips}")
    opt = [("rekey_time", cfg.ike_rekey_time), ("over_time", cfg.ike_over_time),
           ("reauth_time", cfg.ike_reauth_time), ("dpd_delay", cfg.dpd_delay),
           ("remote_port", cfg.remote_port), ("local_port", cfg.local_port)]
    for key, v in opt:
        if v is not None:
            conn.append(f"    {key} = {v if 'port' in key else _dur(v)}")
    child = ["        mode = tunnel",
             f"        local_ts = {cfg.local_ts}",
             f"        remote_ts = {cfg.remote_ts}",
             f"        esp_proposals = {_csv(cfg.esp_proposals)}",
             f"        start_action = {cfg.start_action}"]
    for key, v in (("rekey_time", cfg.child_rekey_time), ("life_time", cfg.child_life_time),
                   ("rand_time", cfg.child_rand_time)):
        if v is not None:
            child.append(f"        {key} = {_dur(v)}")
    if cfg.dpd_action:
        child.append(f"        dpd_action = {cfg.dpd_action}")
    psk = cfg.psk.replace("\\", "\\\\").replace('"', '\\"')
    nl = "\n"
    if cfg.swanctl_dir:
        local_auth, remote_auth = cfg.local_auth or "pubkey", cfg.remote_auth or "pubkey"
        local = [f"      auth = {local_auth}", f"      id = {cfg.local_id}"]
        if cfg.cert and local_auth in ("pubkey", "eap-tls"):
            local.append(f"      certs = {cfg.cert}")
        if cfg.local_eap_id:
            local.append(f"      eap_id = {cfg.local_eap_id}")
        remote = [f"      auth = {remote_auth}", f"      id = {cfg.remote_id}"]
        if cfg.remote_eap_id:
            remote.append(f"      eap_id = {cfg.remote_eap_id}")
        secrets = ""
        if cfg.eap_secrets:
            secrets = "secrets {\n" + "".join(
                f'  eap-{i} {{\n    id = {user}\n    secret = "{pw}"\n  }}\n'
                for i, (user, pw) in enumerate(sorted(cfg.eap_secrets.items()))) + "}\n"
        return f"""connections {{
  {cfg.conn} {{
{nl.join(conn)}
    local {{
{nl.join(local)}
    }}
    remote {{
{nl.join(remote)}
    }}
    children {{
      {cfg.child} {{
{nl.join(child)}
      }}
    }}
  }}
}}
""" + secrets + _pools_conf(cfg.pools)
    return f"""connections {{
  {cfg.conn} {{
{nl.join(conn)}
    local {{
      auth = psk
      id = {cfg.local_id}
    }}
    remote {{
      auth = psk
      id = {cfg.remote_id}
    }}
    children {{
      {cfg.child} {{
{nl.join(child)}
      }}
    }}
  }}
}}
secrets {{
  ike-{cfg.conn} {{
    id-local = {cfg.local_id}
    id-remote = {cfg.remote_id}
    secret = "{psk}"
  }}
}}
""" + _pools_conf(cfg.pools)


def _pools_conf(pools):
    """_pools_conf() - the swanctl.conf `pools { }` section ("" without pools)."""
    if not pools:
        return ""
    out = ["pools {"]
    for name, attrs in pools.items():
        out.append(f"  {name} {{")
        out += [f"    {key} = {_csv(v)}" for key, v in attrs.items()]
        out.append("  }")
    return "\n".join(out + ["}"]) + "\n"


# ---------------------------------------------------------------------------
# swanctl --list-sas --pretty parsing.

def parse_pretty(text):
    """parse_pretty() - swanctl's --pretty dump as nested dicts.

    Sections `name {` ... `}` become dicts, `key = value` strings, and
    `key = [` ... `]` lists of strings. Several top-level messages (one
    `list-sa event` per IKE_SA, then `list-sas reply`) come back as a list of
    (message name, dict).
    """
    messages, stack = [], []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.endswith("{"):
            name = line[:-1].strip()
            d = {}
            if not stack:
                messages.append((name, d))
            else:
                top = stack[-1]
                if isinstance(top, list):
                    top.append(d)
                else:
                    top[name] = d
            stack.append(d)
        elif line == "}" or line == "]":
            if stack:
                stack.pop()
        elif line.endswith("= [") or line.endswith("=["):
            key = line.rsplit("=", 1)[0].strip()
            lst = []
            if stack and isinstance(stack[-1], dict):
                stack[-1][key] = lst
            stack.append(lst)
        elif stack and isinstance(stack[-1], list):
            stack[-1].append(line)
        elif "=" in line and stack:
            key, _, value = line.partition("=")
            stack[-1][key.strip()] = value.strip()
    return messages


@dataclass
class ChildSa:
    name: str
    state: str  # INSTALLED, REKEYING, ...
    spi_in: int
    spi_out: int
    protocol: str
    mode: str
    encap: bool
    encr_alg: str
    encr_keysize: int
    integ_alg: str  # "" for AEAD
    esn: bool
    local_ts: list
    remote_ts: list
    bytes_in: int
    bytes_out: int
    raw: dict
    dh_group: str = ""  # the PFS group of the exchange that made it ("CURVE_25519"); "" none


@dataclass
class IkeSa:
    name: str
    state: str  # CONNECTING, ESTABLISHED, ...
    initiator: bool
    spi_i: int
    spi_r: int
    local: str
    remote: str
    local_id: str
    remote_id: str
    encr_alg: str
    encr_keysize: int
    integ_alg: str
    prf_alg: str
    dh_group: str
    children: list
    raw: dict
    # Virtual IPs (list-sas local-vips / remote-vips; sas_from_pretty gives [] when none):
    local_vips: list = None  # this end got them (as a client)
    remote_vips: list = None  # handed to the peer (from a pool)


def _hex(v):
    try:
        return int(v, 16)
    except (TypeError, ValueError):
        return None


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def sas_from_pretty(text):
    """sas_from_pretty() - IkeSa list from `swanctl --list-sas --pretty` output."""
    out = []
    for msg, body in parse_pretty(text):
        if msg != "list-sa event":
            continue
        for name, ike in body.items():
            if not isinstance(ike, dict):
                continue
            children = []
            for cname, c in (ike.get("child-sas") or {}).items():
                if not isinstance(c, dict):
                    continue
                children.append(ChildSa(
                    name=c.get("name", cname), state=c.get("state", ""),
                    spi_in=_hex(c.get("spi-in")), spi_out=_hex(c.get("spi-out")),
                    protocol=c.get("protocol", ""), mode=c.get("mode", ""),
                    encap=c.get("encap") == "yes", encr_alg=c.get("encr-alg", ""),
                    encr_keysize=_int(c.get("encr-keysize")), integ_alg=c.get("integ-alg", ""),
                    esn=c.get("esn") == "1", local_ts=list(c.get("local-ts") or []),
                    remote_ts=list(c.get("remote-ts") or []),
                    bytes_in=_int(c.get("bytes-in")), bytes_out=_int(c.get("bytes-out")), raw=c,
                    dh_group=c.get("dh-group", "")))
            out.append(IkeSa(
                name=name, state=ike.get("state", ""), initiator=ike.get("initiator") == "yes",
                spi_i=_hex(ike.get("initiator-spi")), spi_r=_hex(ike.get("responder-spi")),
                local=f"{ike.get('local-host')}:{ike.get('local-port')}",
                remote=f"{ike.get('remote-host')}:{ike.get('remote-port')}",
                local_id=ike.get("local-id", ""), remote_id=ike.get("remote-id", ""),
                encr_alg=ike.get("encr-alg", ""), encr_keysize=_int(ike.get("encr-keysize")),
                integ_alg=ike.get("integ-alg", ""), prf_alg=ike.get("prf-alg", ""),
                dh_group=ike.get("dh-group", ""), children=children, raw=ike,
                local_vips=list(ike.get("local-vips") or []),
                remote_vips=list(ike.get("remote-vips") or [])))
    return out


def pools_from_pretty(text):
    """pools_from_pretty() - {pool name: {"base", "size", "online", "offline",
    "leases": [{"address", "identity", "status"}]}} from `swanctl --list-pools
    [--leases] --pretty` (counts as int; status "online" or "offline").
    Leases are numbered sections under `leases`: 0 { address identity status }."""
    out = {}
    for msg, body in parse_pretty(text):
        if msg != "get-pools reply":
            continue
        for name, pool in body.items():
            if not isinstance(pool, dict):
                continue
            leases = pool.get("leases")
            leases = leases.values() if isinstance(leases, dict) else []
            out[name] = dict(base=pool.get("base", ""), size=_int(pool.get("size")),
                             online=_int(pool.get("online")), offline=_int(pool.get("offline")),
                             leases=[dict(address=x.get("address", ""),
                                          identity=x.get("identity", ""),
                                          status=x.get("status", ""))
                                     for x in leases if isinstance(x, dict)])
    return out


# ---------------------------------------------------------------------------
# The daemon.

class Charon:
    """One charon in namespace ns with its files in workdir (created here)."""

    def __init__(self, ns, workdir, cfg, tag="sw"):
        self.ns, self.cfg, self.tag = ns, cfg, tag
        self.dir = workdir
        os.makedirs(os.path.join(workdir, "run"), exist_ok=True)
        os.chmod(workdir, 0o700)
        self.vici = os.path.join(workdir, "charon.vici")
        self.uri = f"unix://{self.vici}"
        self.conf_path = os.path.join(workdir, "strongswan.conf")
        self.swanctl_path = os.path.join(workdir, "swanctl.conf")
        self.log = os.path.join(workdir, "charon.log")
        self.proc = None
        self._logf = None
        self.write_config()

    def write_config(self):
        """write_config() - (re)write both files from self.cfg (reload with load())."""
        for path, text in ((self.conf_path, strongswan_conf(self.cfg, self.vici)),
                           (self.swanctl_path, swanctl_conf(self.cfg))):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o600)

    def start(self, timeout=10):
        """start() - run charon in the foreground and wait until it listens
        (VICI socket present and `swanctl --load-all` accepted the config)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.vici)
        run_dir = os.path.join(self.dir, "run")
        script = (f"mount --bind {shlex.quote(run_dir)} /run && exec env "
                  f"STRONGSWAN_CONF={shlex.quote(self.conf_path)} {CHARON}")
        self._logf = open(self.log, "ab")
        self.proc = self.ns.spawn("unshare", "-m", "--propagation", "private", "sh", "-c", script,
                                  stdout=self._logf, stderr=subprocess.STDOUT)
        netns.on_cleanup(self.stop)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.vici):
            if self.proc.poll() is not None:
                raise TestError(f"charon ({self.tag}) exited with {self.proc.returncode} before "
                                f"it listened on {self.vici}; log:\n{netns.tail(self.log)}")
            if time.monotonic() > deadline:
                raise TestError(f"charon ({self.tag}) did not create its VICI socket within "
                                f"{timeout}s; log:\n{netns.tail(self.log)}")
            time.sleep(0.01)
        last = None
        while True:
            last = self.swanctl("--load-all", "--file", self.swanctl_path, check=False)
            if last.returncode == 0:
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise TestError(f"charon ({self.tag}): swanctl --load-all failed (exit "
                        f"{last.returncode}): {(last.stdout + last.stderr).strip()[-500:]}\n"
                        f"log:\n{netns.tail(self.log)}")

    def swanctl(self, *args, timeout=15, check=True):
        """swanctl() - run swanctl against this daemon's VICI socket."""
        return self.ns.run(SWANCTL, *args, "--uri", self.uri, timeout=timeout, check=check)

    def load(self):
        """load() - rewrite the files and load connections and secrets again."""
        self.write_config()
        return self.swanctl("--load-all", "--file", self.swanctl_path)

    def initiate(self, child=None, timeout=10):
        """initiate() - `swanctl --initiate --child CHILD`; returns (ok, output).
        Establishes the IKE_SA too when there is none."""
        p = self.swanctl("--initiate", "--child", child or self.cfg.child, "--timeout",
                         str(timeout), timeout=timeout + 5, check=False)
        return p.returncode == 0, (p.stdout + p.stderr)

    def terminate_ike(self, timeout=5):
        p = self.swanctl("--terminate", "--ike", self.cfg.conn, "--timeout", str(timeout),
                         timeout=timeout + 5, check=False)
        return p.returncode == 0, (p.stdout + p.stderr)

    def list_sas(self):
        """list_sas() - the daemon's IKE_SAs (IkeSa, each with its ChildSa list)."""
        p = self.swanctl("--list-sas", "--pretty")
        return sas_from_pretty(p.stdout)

    def list_pools(self):
        """list_pools() - the daemon's pools with their leases (pools_from_pretty)."""
        p = self.swanctl("--list-pools", "--leases", "--pretty")
        return pools_from_pretty(p.stdout)

    def list_pools_text(self):
        """list_pools_text() - plain `swanctl --list-pools --leases`, for failure messages."""
        p = self.swanctl("--list-pools", "--leases", check=False)
        return (p.stdout + p.stderr).strip()

    def list_sas_text(self):
        """list_sas_text() - plain `swanctl --list-sas`, for failure messages."""
        p = self.swanctl("--list-sas", check=False)
        return (p.stdout + p.stderr).strip()

    def established(self):
        """established() - (IkeSa, ChildSa) once an IKE_SA is ESTABLISHED with an
        INSTALLED CHILD_SA of our child, else None."""
        for ike in self.list_sas():
            if ike.state != "ESTABLISHED":
                continue
            for c in ike.children:
                if c.state == "INSTALLED" and c.name == self.cfg.child:
                    return ike, c
        return None

    def wait_established(self, timeout=15):
        return netns.wait_until(self.established, timeout, interval=0.1,
                                what=f"an established IKE_SA and installed CHILD_SA in charon "
                                     f"({self.tag})")

    def log_text(self):
        """log_text() - everything charon logged so far."""
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_search(self, pattern, flags=re.IGNORECASE):
        """log_search() - the first log line matching the regex, else None."""
        rx = re.compile(pattern, flags)
        return next((line for line in self.log_text().splitlines() if rx.search(line)), None)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """kill() - SIGKILL this charon (its PID only: the spawned process
        becomes charon through exec), wait for it and close the log, as a
        crash would. start() may run it again (a stale PID file is removed by
        charon itself). Returns the PID; TestError when that PID is not charon."""
        if not self.alive():
            raise TestError(f"charon ({self.tag}) is not running")
        pid = self.proc.pid
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError as e:
            raise TestError(f"charon ({self.tag}): cannot read /proc/{pid}/comm: {e}")
        if comm != "charon":
            raise TestError(f"charon ({self.tag}): PID {pid} is {comm!r}, not charon")
        os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=5)
        if self._logf:
            self._logf.close()
            self._logf = None
        return pid

    def stop(self, timeout=5):
        """stop() - SIGTERM, wait, SIGKILL fallback. Returns the exit code (None: killed)."""
        if self.proc is None:
            return None
        rc = netns.stop_process(self.proc, timeout=timeout, sig=signal.SIGTERM)
        if self._logf:
            self._logf.close()
            self._logf = None
        return rc


# ---------------------------------------------------------------------------
# Topology helpers shared by the self-check and the esptun interop test.

UNDERLAY_A, UNDERLAY_B = "192.168.88.1", "192.168.88.2"
INNER_A, INNER_B = "10.88.0.1", "10.88.0.2"
PSK = "spike-preshared-key-0123456789"


def pair_config(side, **kw):
    """pair_config() - the Config of side "a" or "b" of the standard topology."""
    if side == "a":
        base = dict(local_addr=UNDERLAY_A, remote_addr=UNDERLAY_B, local_ts=f"{INNER_A}/32",
                    remote_ts=f"{INNER_B}/32", local_id="a.sw", remote_id="b.sw")
    else:
        base = dict(local_addr=UNDERLAY_B, remote_addr=UNDERLAY_A, local_ts=f"{INNER_B}/32",
                    remote_ts=f"{INNER_A}/32", local_id="b.sw", remote_id="a.sw")
    base["psk"] = PSK
    base.update(kw)
    return Config(**base)


AUTH_FAIL_RX = r"MAC mismatched|N\(AUTH_FAILED\)|AUTHENTICATION_FAILED|authentication of .* failed"


# ---------------------------------------------------------------------------
# Self-check: two charons, no esptun.

def _selfcheck_case(rep, tmp, idx, title, cfg_a, cfg_b, initiator="A", expect_up=True,
                    expect=None, fail_rx=None):
    """One pair of charons. initiator: "A" or "B" runs `swanctl --initiate`,
    None: nobody does (a start_action does it). expect: {"ike.FIELD" or
    "child.FIELD": value} checked on A's view."""
    rep.section(title)
    a = netns.Netns(netns.unique("swself", f"{idx}a"))
    b = netns.Netns(netns.unique("swself", f"{idx}b"))
    netns.veth(a, b, "ula", "ulb", [f"{UNDERLAY_A}/24"], [f"{UNDERLAY_B}/24"])
    a.ip("addr", "add", f"{INNER_A}/32", "dev", "lo")
    b.ip("addr", "add", f"{INNER_B}/32", "dev", "lo")
    ca = Charon(a, os.path.join(tmp, f"{idx}a"), cfg_a, tag="A")
    cb = Charon(b, os.path.join(tmp, f"{idx}b"), cfg_b, tag="B")
    t0 = time.monotonic()
    cb.start()
    ca.start()
    rep.info(f"both charons listening and loaded in {time.monotonic() - t0:.2f} s")
    try:
        if initiator:
            ok, out = (ca if initiator == "A" else cb).initiate()
            if expect_up:
                rep.check(ok, f"swanctl --initiate on {initiator} succeeds", out[-600:])
            else:
                rep.check(not ok, f"swanctl --initiate on {initiator} fails", out[-600:])
        if not expect_up:
            fail_rx = fail_rx or {"A": AUTH_FAIL_RX, "B": r"MAC mismatched"}
            for c in (cb, ca):
                line = c.log_search(fail_rx[c.tag])
                rep.check(line is not None, f"{c.tag} logs /{fail_rx[c.tag]}/: "
                          f"{line.strip() if line else None!r}", netns.tail(c.log, 15))
            for c in (ca, cb):
                rep.check(c.established() is None, f"{c.tag}: no installed CHILD_SA in list-sas",
                          c.list_sas_text())
            ping.expect_no_reply(rep, f"ping A -> {INNER_B} fails",
                                 ping.run(a, INNER_B, count=1, wait=1))
            return
        ea = ca.wait_established(10)
        eb = cb.wait_established(10)
        rep.info(f"established in {time.monotonic() - t0:.2f} s after start")
        (ike_a, ch_a), (ike_b, ch_b) = ea, eb
        rep.check(ike_a.initiator == (initiator != "B") and ike_a.initiator != ike_b.initiator
                  and ike_a.spi_i == ike_b.spi_i and ike_a.spi_r == ike_b.spi_r
                  and ike_a.spi_i and ike_a.spi_r,
                  f"IKE SPIs agree: i {ike_a.spi_i:016x} r {ike_a.spi_r:016x}; "
                  f"{'A' if ike_a.initiator else 'B'} is the initiator",
                  f"{ike_a.raw}\n{ike_b.raw}")
        rep.check(ch_a.spi_in == ch_b.spi_out and ch_a.spi_out == ch_b.spi_in and ch_a.spi_in
                  and ch_a.spi_out,
                  f"CHILD SPIs crosswise: A in {ch_a.spi_in:08x} = B out, A out "
                  f"{ch_a.spi_out:08x} = B in", f"{ch_a.raw}\n{ch_b.raw}")
        rep.check(ch_a.encap and ch_a.mode == "TUNNEL" and ch_a.protocol == "ESP",
                  "CHILD_SA: ESP, tunnel mode, UDP-encapsulated", str(ch_a.raw))
        rep.check(ch_a.local_ts == [f"{INNER_A}/32"] and ch_a.remote_ts == [f"{INNER_B}/32"],
                  f"A's traffic selectors {ch_a.local_ts} === {ch_a.remote_ts}", str(ch_a.raw))
        rep.check(ike_a.local.endswith(":4500") and ike_a.remote.endswith(":4500"),
                  f"IKE floated to 4500: {ike_a.local} <-> {ike_a.remote}", str(ike_a.raw))
        for key, want in (expect or {}).items():
            obj, field = key.split(".")  # "ike.encr_alg", "child.esn"
            rep.equal(getattr(ike_a if obj == "ike" else ch_a, field), want, f"A's {key}")
        for src, dst, tag in ((a, INNER_B, "A"), (b, INNER_A, "B")):
            ping.expect_replies(rep, f"ping {tag} -> {dst}", ping.run(src, dst), 3)
        ch = cb.established()[1]
        rep.check(ch.bytes_in > 0 and ch.bytes_out > 0,
                  f"B's CHILD_SA counted traffic ({ch.bytes_in} bytes in, {ch.bytes_out} out)",
                  str(ch.raw))
        table = b.ip("route", "show", "table", "220").stdout
        rep.check(f"{INNER_A} " in table and "ipsec0" in table,
                  f"B: route to {INNER_A} via ipsec0 in table 220", table)
    finally:
        for c in (ca, cb):
            rc = c.stop()
            rep.check(rc == 0, f"{c.tag}: charon stopped by SIGTERM (exit {rc})",
                      netns.tail(c.log, 10))


def selfcheck():
    """selfcheck() - two charons through this module; returns the exit code."""
    import report
    rep = report.Report("strongswan/selfcheck")
    netns.install_signal_handlers()
    try:
        netns.require_environment(("ip", "ping", "unshare", "mount"))
        require_tools()
        tmp = netns.make_tempdir("swself")
        rep.on_failure.append(lambda: [print(f"\n--- {p}:\n{netns.tail(p, 25)}") for p in
                                       sorted(_logs(tmp))])
        _selfcheck_case(
            rep, tmp, 1, "A initiates: aes128gcm16-prfsha256-x25519 / aes128gcm16",
            pair_config("a"), pair_config("b"),
            expect={"ike.encr_alg": "AES_GCM_16", "ike.encr_keysize": 128,
                    "ike.prf_alg": "PRF_HMAC_SHA2_256", "ike.dh_group": "CURVE_25519",
                    "child.encr_alg": "AES_GCM_16", "child.encr_keysize": 128,
                    "child.integ_alg": "", "child.esn": False})
        _selfcheck_case(
            rep, tmp, 2, "A initiates by start_action=start: aes256-sha256-modp2048 / "
            "aes128-sha1, DPD 30 s",
            pair_config("a", ike_proposals="aes256-sha256-modp2048",
                        esp_proposals="aes128-sha1", start_action="start", dpd_delay=30),
            pair_config("b", ike_proposals="aes256-sha256-modp2048",
                        esp_proposals="aes128-sha1"),
            initiator=None,
            expect={"ike.encr_alg": "AES_CBC", "ike.encr_keysize": 256,
                    "ike.integ_alg": "HMAC_SHA2_256_128", "ike.prf_alg": "PRF_HMAC_SHA2_256",
                    "ike.dh_group": "MODP_2048", "child.encr_alg": "AES_CBC",
                    "child.encr_keysize": 128, "child.integ_alg": "HMAC_SHA1_96",
                    "child.esn": False})
        _selfcheck_case(
            rep, tmp, 3, "B initiates: aes256gcm16-prfsha384-ecp256 / aes256-sha256",
            pair_config("a", ike_proposals="aes256gcm16-prfsha384-ecp256",
                        esp_proposals="aes256-sha256"),
            pair_config("b", ike_proposals="aes256gcm16-prfsha384-ecp256",
                        esp_proposals="aes256-sha256"),
            initiator="B",
            expect={"ike.encr_alg": "AES_GCM_16", "ike.encr_keysize": 256,
                    "ike.prf_alg": "PRF_HMAC_SHA2_384", "ike.dh_group": "ECP_256",
                    "child.encr_alg": "AES_CBC", "child.encr_keysize": 256,
                    "child.integ_alg": "HMAC_SHA2_256_128", "child.esn": False})
        _selfcheck_case(
            rep, tmp, 4, "wrong PSK on A",
            pair_config("a", psk="not-the-right-key-at-all-0000"), pair_config("b"),
            expect_up=False)
        _selfcheck_case(
            rep, tmp, 5, "ESN: kernel-libipsec cannot install it (why the esptun test has no "
            "ESN case)",
            pair_config("a", esp_proposals="aes128-sha1-esn"),
            pair_config("b", esp_proposals="aes128-sha1-esn"), expect_up=False,
            fail_rx={"A": r"NO_PROP", "B": r"ESN not supported"})
    except netns.TestError as e:
        rep.failed.append(str(e).splitlines()[0])
        print(f"  FAIL {e}", flush=True)
    except (KeyboardInterrupt, SystemExit) as e:
        rep.failed.append(f"interrupted ({type(e).__name__})")
        print("  FAIL interrupted", flush=True)
    finally:
        rc = rep.finish()
        netns.run_cleanups()
    return rc


def _logs(tmp):
    for root, _, files in os.walk(tmp):
        for f in files:
            if f.endswith(".log"):
                yield os.path.join(root, f)


if __name__ == "__main__":
    if sys.argv[1:] != ["--selfcheck"]:
        sys.exit(f"usage: {sys.argv[0]} --selfcheck   (root; runs two charons in namespaces)")
    sys.exit(selfcheck())
