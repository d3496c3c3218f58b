#!/usr/bin/python3
# test_systemd_unit.py - the shipped unit packaging/esptun-gateway@.service
# can start an IKE gateway: `systemd-analyze verify` accepts it, and the built
# esptun-gateway, run under exactly the unit's capability sets (read from the
# unit file, applied with setpriv) and NoNewPrivileges, comes up with an IKE
# peer on UDP 500 and stops cleanly on SIGTERM. With CAP_NET_ADMIN alone (the
# unit before issue 16) the same start must fail on the IKE port's bind with
# EACCES, which proves the check can fail.
#
#   netns (et-sdu-PID-N)
#  +------------------------------------------------+
#  | setpriv --bounding-set=<unit's> --no-new-privs |
#  |   esptun-gateway run                           |
#  |     tun sduN 10.98.0.1/24                      |
#  |     UDP 0.0.0.0:4500 (ESP, IKE) and :500 (IKE) |
#  |     control socket and state_dir in a tempdir  |
#  +------------------------------------------------+
"""The systemd unit: verified, and its capabilities start an IKE gateway."""

import os
import re
import sys

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
from netns import TestError  # noqa: E402

UNIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "packaging",
                    "esptun-gateway@.service")
INSTALLED_BINARY = "/usr/local/bin/esptun-gateway"
OLD_BOUNDING_SET = ["CAP_NET_ADMIN"]  # the unit as shipped before issue 16
# Bit numbers from <linux/capability.h> for the ones a unit may name here.
CAP_BITS = {"CAP_NET_BIND_SERVICE": 10, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13,
            "CAP_SYS_ADMIN": 21, "CAP_IPC_LOCK": 14, "CAP_SETUID": 7, "CAP_SETGID": 6,
            "CAP_SETPCAP": 8, "CAP_CHOWN": 0, "CAP_SYS_NICE": 23}
# What the gateway keeps once set up (drop_privileges, on by default; the
# unit also allows CAP_SYS_NICE, kept only with worker_priority = "realtime").
KEPT_AFTER_SETUP = ["CAP_NET_ADMIN"]


def unit_caps(text, key):
    """unit_caps() - the capabilities a unit's KEY= lines name (systemd joins
    repeated lines; an empty assignment resets). A "~" list (everything but)
    cannot be mirrored with setpriv's explicit sets, so it is an error."""
    caps = []
    for line in text.splitlines():
        m = re.match(rf"\s*{key}\s*=(.*)$", line)
        if not m:
            continue
        value = m.group(1).strip()
        if value.startswith("~"):
            raise TestError(f"{key}={value}: an inverted set; this test mirrors explicit sets only")
        caps = [] if not value else caps + value.split()
    return caps


def unit_flag(text, key):
    m = re.search(rf"^\s*{key}\s*=\s*(\S+)", text, re.M)
    return bool(m) and m.group(1).lower() in ("yes", "true", "1", "on")


def setpriv_argv(bounding, ambient, no_new_privs):
    """setpriv_argv() - setpriv's arguments for a unit's capability settings.
    The gateway runs as root, so after exec its permitted and effective sets
    are the bounding set; ambient capabilities must be inheritable too."""
    def spec(caps):
        return ",".join(["-all"] + ["+" + c.lower().removeprefix("cap_") for c in caps])
    argv = ["setpriv", f"--bounding-set={spec(bounding)}", f"--inh-caps={spec(ambient)}",
            f"--ambient-caps={spec(ambient)}"]
    if no_new_privs:
        argv.append("--no-new-privs")
    return argv + ["--"]


def verify_unit(rep, build, text, tmp):
    """verify_unit() - `systemd-analyze verify` on an instance of the template
    whose ExecStart/ExecStartPre run the built binary (verify wants them to exist)."""
    rep.section("systemd-analyze verify")
    rep.require(INSTALLED_BINARY in text, f"the unit runs {INSTALLED_BINARY}")
    copy = os.path.join(tmp, "esptun-gateway@unit-test.service")
    with open(copy, "w") as f:
        f.write(text.replace(INSTALLED_BINARY, os.path.join(build, "esptun-gateway")))
    p = netns.run(["systemd-analyze", "verify", "--man=no", copy], timeout=60, check=False)
    out = (p.stdout + p.stderr).strip()
    mine = [line for line in out.splitlines() if "esptun-gateway@" in line]
    rep.check(p.returncode == 0 and not mine, "systemd-analyze verify accepts the unit",
              f"exit {p.returncode}: {out[:600]}")


def gateway_config(tmp, sfx, tag):
    tunnel = {
        "interface": f"sdu{sfx}{tag}",
        "addresses": ["10.98.0.1/24"],
        "listen": "0.0.0.0:4500",
        "ike_port": 500,
        "local_id": "gw.unit.test",
        "tun_io": "direct",
        "control_socket": os.path.join(tmp, f"{tag}.sock"),
        "state_dir": os.path.join(tmp, f"state-{tag}"),
    }
    peer = dict(name="road", allowed_ips=["10.98.0.2/32"], psk="unit-test-pre-shared-key-0123",
                remote_id="road@unit.test")
    return conf.write_private(os.path.join(tmp, f"{tag}.toml"),
                              conf.render_ike_config(tunnel, [peer]))


def udp_ports(ns):
    p = ns.run("ss", "-Hlun")
    return {int(m.group(1)) for m in re.finditer(r":(\d+)\s", p.stdout + " ")}


def start_under(ns, build, cfg, log, prefix):
    """start_under() - esptun-gateway run, behind the setpriv prefix, in ns."""
    ep = esptun_proc.Endpoint(build, ns, cfg, log)
    ep._logf = open(log, "ab")
    ep.proc = ns.spawn(*prefix, ep.binary, "run", "-c", cfg, stdout=ep._logf, stderr=ep._logf)
    return ep


def cap_mask(caps):
    return sum(1 << CAP_BITS[c] for c in caps)


def proc_caps(pid):
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v, 16) for k, v in (line.split(":\t") for line in f)
                if k in ("CapBnd", "CapEff", "CapAmb")}


def body(rep, build):
    with open(UNIT) as f:
        text = f.read()
    tmp = netns.make_tempdir("sdu")
    sfx = str(os.getpid() % 10000)
    verify_unit(rep, build, text, tmp)

    bounding = unit_caps(text, "CapabilityBoundingSet")
    ambient = unit_caps(text, "AmbientCapabilities")
    unknown = [c for c in bounding + ambient if c not in CAP_BITS]
    rep.require(not unknown, "the unit names only capabilities this test knows", str(unknown))
    rep.info(f"unit: CapabilityBoundingSet={' '.join(bounding)} "
             f"AmbientCapabilities={' '.join(ambient) or '(none)'}")
    nnp = unit_flag(text, "NoNewPrivileges")

    rep.section("the unit's capabilities start an IKE gateway on UDP 500")
    ns = netns.Netns(netns.unique("sdu"))
    cfg = gateway_config(tmp, sfx, "u")
    ep = start_under(ns, build, cfg, os.path.join(tmp, "u.log"),
                     setpriv_argv(bounding, ambient, nnp))
    rep.on_failure.append(lambda: print(netns.tail(ep.log)))
    try:
        ep.wait_ready(15)
        rep.check(True, "the status socket answers")
    except TestError as e:
        rep.check(False, "the status socket answers", str(e))
    if ep.alive():
        ports = udp_ports(ns)
        rep.check(500 in ports and 4500 in ports, "UDP 500 and 4500 are bound", f"bound: {ports}")
        caps = proc_caps(ep.proc.pid)
        rep.equal(caps["CapBnd"], cap_mask(KEPT_AFTER_SETUP),
                  "the gateway's CapBnd after set-up: CAP_NET_ADMIN, dropped from the unit's set")
        rep.check(caps["CapEff"] & ~cap_mask(KEPT_AFTER_SETUP) == 0,
                  "no effective capability beyond it", hex(caps["CapEff"]))
    rc = ep.stop(timeout=10)
    rep.equal(rc, 0, "SIGTERM stops it cleanly (exit code)")
    rep.check(f"sdu{sfx}u" not in ns.links(), "the tun is gone after the stop")

    rep.section("CAP_NET_ADMIN alone (the old unit) cannot bind UDP 500")
    cfg = gateway_config(tmp, sfx, "o")
    log = os.path.join(tmp, "o.log")
    old = start_under(ns, build, cfg, log, setpriv_argv(OLD_BOUNDING_SET, [], nnp))
    try:
        old.proc.wait(timeout=15)
    except Exception:
        pass
    rc = old.stop(timeout=5)
    with open(log) as f:
        out = f.read()
    rep.check(rc not in (0, None), "the gateway exits with an error", f"exit {rc}")
    rep.check("IKE port" in out and "Permission denied" in out,
              "it names the IKE port's bind and EACCES", out.strip()[-400:])


if __name__ == "__main__":
    report.main("systemd_unit", body, tools=("ip", "ss", "setpriv", "systemd-analyze"))
