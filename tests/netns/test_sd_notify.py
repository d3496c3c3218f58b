#!/usr/bin/python3
# test_sd_notify.py - the built gateway and client speak systemd's
# notification protocol as the units' Type=notify and WatchdogSec= expect
# (service/notify.cpp). systemd is not PID 1 on the CI machine, so the test
# plays the service manager: an AF_UNIX datagram socket named by
# NOTIFY_SOCKET, with SO_PASSCRED so every message carries its sender's pid
# (systemd's NotifyAccess=main accepts the main process only).
#
#   netns (et-sdn-PID)
#  +------------------------------------------+
#  | env NOTIFY_SOCKET=<tmp>/notify           |      <tmp>/notify (this test)
#  |     WATCHDOG_USEC=1000000                | ---> READY=1, STATUS=...,
#  |   esptun-gateway run  (tun sdnN,         |      WATCHDOG=1 every 500 ms,
#  |     UDP 4500, drops to nobody)           |      STOPPING=1
#  +------------------------------------------+
#
# Checked: READY=1 arrives once set-up is done (the control socket answers
# by then), from the main pid; WATCHDOG=1 keeps coming every WATCHDOG_USEC/2
# after the privilege drop; none without WATCHDOG_USEC; STOPPING=1 on
# SIGTERM before a clean exit; the client does the same. And the check can
# fail: a gateway whose UDP port is taken exits without READY=1.
"""systemd notifications: READY=1, WATCHDOG=1, STOPPING=1, from the main pid."""

import os
import socket
import struct
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402

WATCHDOG_USEC = 1_000_000  # keep-alives every 500 ms
SO_PASSCRED = 16
SCM_CREDENTIALS = 2


class NotifySocket:
    """The service manager's end: a datagram socket that logs (time, pid, fields)."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        os.chmod(path, 0o666)  # the endpoint sends as user nobody after its drop
        self.sock.setsockopt(socket.SOL_SOCKET, SO_PASSCRED, 1)
        netns.on_cleanup(self.sock.close)
        self.messages = []

    def drain(self, seconds):
        """drain() - collect messages for @seconds; returns the new ones."""
        new = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                break
            pid = None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == SCM_CREDENTIALS:
                    pid = struct.unpack("iII", payload[:12])[0]
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            new.append((time.monotonic(), pid, fields))
        self.messages += new
        return new

    def with_key(self, key, msgs=None):
        return [m for m in (self.messages if msgs is None else msgs) if key in m[2]]


def gateway_config(tmp, sfx, tag, port=4500):
    a_out, b_out = conf.sa_pair("aes128-gcm")
    ep = conf.Endpoint(interface=f"sdn{sfx}{tag}", addresses=["10.97.0.1/24"],
                       listen=f"0.0.0.0:{port}",
                       control_socket=os.path.join(tmp, f"{tag}.sock"), workers=1)
    ep.peers.append(conf.Peer("far", "aes128-gcm", a_out, b_out, ["10.97.0.2/32"]))
    return ep.write(os.path.join(tmp, f"{tag}.toml"))


def client_config(tmp, sfx):
    a_out, b_out = conf.sa_pair("aes128-gcm", spi_base=0x5000)
    ep = conf.Endpoint(interface=f"sdn{sfx}c", addresses=["10.96.0.2/24"], listen="0.0.0.0:4501",
                       control_socket=os.path.join(tmp, "c.sock"), workers=1)
    ep.peers.append(conf.Peer("gw", "aes128-gcm", a_out, b_out, ["10.96.0.0/24"],
                              endpoint="10.96.1.1:4500"))
    return ep.write(os.path.join(tmp, "c.toml"))


def start(ns, build, prog, verb, cfg, notify, log, watchdog=True):
    env = [f"NOTIFY_SOCKET={notify.path}"]
    if watchdog:
        env.append(f"WATCHDOG_USEC={WATCHDOG_USEC}")
    logf = open(log, "ab")
    netns.on_cleanup(logf.close)
    return ns.spawn("env", *env, os.path.join(build, prog), verb, "-c", cfg,
                    stdout=logf, stderr=logf)


def wait_ready(notify, proc, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if notify.with_key("READY", notify.drain(0.1)):
            return True
    return bool(notify.with_key("READY"))


def uid_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Uid:")).split()[1])


def check_endpoint(rep, ns, build, tmp, prog, verb, cfg, tag):
    """The full sequence for one program: ready, watchdog, stopping."""
    rep.section(f"{prog} {verb} under NOTIFY_SOCKET and WATCHDOG_USEC")
    notify = NotifySocket(os.path.join(tmp, f"notify-{tag}"))
    log = os.path.join(tmp, f"{tag}.log")
    p = start(ns, build, prog, verb, cfg, notify, log)
    rep.on_failure.append(lambda: print(netns.tail(log)))
    rep.require(wait_ready(notify, p), "READY=1 arrives", netns.tail(log))
    ready = notify.with_key("READY")
    rep.equal(len(ready), 1, "READY=1 is sent once")
    rep.equal(ready[0][1], p.pid, "READY=1 comes from the main process (NotifyAccess=main)")
    status = ready[0][2].get("STATUS", "")
    rep.check(" up, listening on " in status, "STATUS= says the endpoint is up", status)
    q = ns.run(os.path.join(build, prog), "status", "-c", cfg, check=False)
    rep.check(q.returncode == 0, "the control socket answers once READY=1 was sent",
              q.stderr[:300])

    notify.drain(2.2)
    dogs = notify.with_key("WATCHDOG")
    times = [m[0] for m in dogs]
    gaps = [b - a for a, b in zip(times, times[1:])]
    rep.check(len(dogs) >= 3, f"WATCHDOG=1 keeps coming ({len(dogs)} in about 2.2 s)")
    rep.check(gaps and max(gaps) < WATCHDOG_USEC / 1e6,
              f"keep-alives come every WATCHDOG_USEC/2 ({WATCHDOG_USEC // 2000} ms), well "
              "within the watchdog's limit", f"gaps {[round(g, 3) for g in gaps]}")
    rep.check(all(m[1] == p.pid for m in dogs), "every WATCHDOG=1 comes from the main process")
    rep.check(uid_of(p.pid) != 0, "they still arrive after the drop to an unprivileged user",
              f"uid {uid_of(p.pid)}")

    rc = netns.stop_process(p, timeout=10)
    notify.drain(0.3)
    stopping = notify.with_key("STOPPING")
    rep.check(len(stopping) == 1 and stopping[0][1] == p.pid, "SIGTERM: STOPPING=1 from the main pid")
    rep.equal(rc, 0, "then a clean exit")


def check_no_watchdog(rep, ns, build, tmp, cfg):
    rep.section("without WATCHDOG_USEC: ready, but no keep-alives")
    notify = NotifySocket(os.path.join(tmp, "notify-nowd"))
    log = os.path.join(tmp, "nowd.log")
    p = start(ns, build, "esptun-gateway", "run", cfg, notify, log, watchdog=False)
    rep.require(wait_ready(notify, p), "READY=1 arrives", netns.tail(log))
    notify.drain(0.8)
    rep.equal(len(notify.with_key("WATCHDOG")), 0, "no WATCHDOG=1 when systemd asked for none")
    rep.equal(netns.stop_process(p, timeout=10), 0, "SIGTERM: a clean exit")


def check_failed_start(rep, ns, build, tmp, sfx):
    rep.section("a set-up failure: no READY=1")
    cfg = gateway_config(tmp, sfx, "f", port=4600)
    with ns.entered():
        taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    netns.on_cleanup(taken.close)
    taken.bind(("0.0.0.0", 4600))
    notify = NotifySocket(os.path.join(tmp, "notify-f"))
    log = os.path.join(tmp, "f.log")
    p = start(ns, build, "esptun-gateway", "run", cfg, notify, log)
    try:
        rc = p.wait(timeout=15)
    except Exception:
        rc = netns.stop_process(p)
    notify.drain(0.2)
    rep.check(rc not in (0, None), "the gateway exits with an error (its UDP port is taken)",
              f"exit {rc}: {netns.tail(log)}")
    rep.equal(len(notify.with_key("READY")), 0, "and never sends READY=1")


def body(rep, build):
    tmp = netns.make_tempdir("sdn")
    sfx = str(os.getpid() % 10000)
    ns = netns.Netns(netns.unique("sdn"))
    # An underlay for the client's gateway address to be routed over.
    ns.ip("link", "add", "v0", "type", "veth", "peer", "name", "v1")
    ns.ip("addr", "add", "10.96.1.2/24", "dev", "v0")
    ns.ip("link", "set", "v0", "up")
    ns.ip("link", "set", "v1", "up")
    check_endpoint(rep, ns, build, tmp, "esptun-gateway", "run", gateway_config(tmp, sfx, "g"), "g")
    check_endpoint(rep, ns, build, tmp, "esptun-client", "up", client_config(tmp, sfx), "c")
    check_no_watchdog(rep, ns, build, tmp, gateway_config(tmp, sfx, "n"))
    check_failed_start(rep, ns, build, tmp, sfx)


if __name__ == "__main__":
    report.main("sd_notify", body, tools=("ip", "env"))
