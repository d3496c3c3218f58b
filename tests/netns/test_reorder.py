#!/usr/bin/python3
# test_reorder.py - a lossy, reordering underlay between two esptun gateways
# (issue 5: "under 1% loss plus reordering injected by a userspace relay on
# the underlay, the replay window drops no reordered-but-valid packet
# (counted) and the checksummed transfer completes").
#
#   netns A                      netns R (tests/lib/udp_relay.py)          netns B
#   tun 10.99.0.1 esptun  ula 10.210.0.1 -- rla 10.210.0.2 | rlb 10.211.0.2 -- ulb 10.211.0.1  esptun tun 10.99.0.2
#
# A's peer endpoint is the relay's A side, B's the relay's B side. The relay
# drops 1% of the datagrams each way and holds 5% back behind the next three
# (or 20 ms). Checks: pings, a 20 MB TCP transfer A -> B with equal SHA-256,
# every datagram the relay delivered authenticated and accepted (none lost to
# the replay window), the late ones counted as sa_in.reordered.
"""Transfer through a lossy, reordering UDP relay."""

import json
import os
import signal
import subprocess
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
import ping  # noqa: E402
import transfer as transfer_lib  # noqa: E402
import udp_relay  # noqa: E402
from netns import TestError  # noqa: E402

RELAY = os.path.abspath(udp_relay.__file__)
XFER_BYTES = 20 * 1000 * 1000
XFER_TIMEOUT = 120


def body(rep, build):
    netns.require_environment(("ip", "ping", "timeout"))
    tmp = netns.make_tempdir("reorder")
    a = netns.Netns(netns.unique("reo", "a"))
    r = netns.Netns(netns.unique("reo", "r"))
    b = netns.Netns(netns.unique("reo", "b"))
    netns.veth(a, r, "ula", "rla", ["10.210.0.1/24"], ["10.210.0.2/24"])
    netns.veth(r, b, "rlb", "ulb", ["10.211.0.2/24"], ["10.211.0.1/24"])

    relay = r.spawn("/usr/bin/python3", RELAY, "10.210.0.2:4500", "10.210.0.1:4500",
                    "10.211.0.2:4500", "10.211.0.1:4500", "--loss", "0.01", "--reorder", "0.05",
                    stdout=subprocess.PIPE, text=True)
    netns.on_cleanup(netns.stop_process, relay)
    line = netns.read_line(relay.stdout, 10)
    if not line or not json.loads(line).get("ready"):
        raise TestError(f"relay did not start: {line!r}")

    a_out, b_out = conf.sa_pair("aes128-gcm", spi_base=0x5000)
    sfx = f"{os.getpid() % 100000}"
    cfg_a = conf.Endpoint(interface=f"ra{sfx}", addresses=["10.99.0.1/24"],
                          control_socket=os.path.join(tmp, "a.sock"),
                          peers=[conf.Peer(name="site-b", cipher="aes128-gcm", out=a_out, inb=b_out,
                                           allowed_ips=["10.99.0.2/32"], endpoint="10.210.0.2:4500")])
    cfg_b = conf.Endpoint(interface=f"rb{sfx}", addresses=["10.99.0.2/24"],
                          control_socket=os.path.join(tmp, "b.sock"),
                          peers=[conf.Peer(name="site-a", cipher="aes128-gcm", out=b_out, inb=a_out,
                                           allowed_ips=["10.99.0.1/32"], endpoint="10.211.0.2:4500")])
    ea = esptun_proc.Endpoint(build, a, cfg_a.write(os.path.join(tmp, "a.toml")),
                              os.path.join(tmp, "a.log"))
    eb = esptun_proc.Endpoint(build, b, cfg_b.write(os.path.join(tmp, "b.toml")),
                              os.path.join(tmp, "b.log"))
    rep.on_failure.append(lambda: print(f"\n--- a:\n{netns.tail(ea.log)}\n--- b:\n{netns.tail(eb.log)}"))
    ea.start()
    eb.start()
    netns.on_cleanup(ea.stop)
    netns.on_cleanup(eb.stop)

    for ns, dst in ((a, "10.99.0.2"), (b, "10.99.0.1")):
        res = ping.run(ns, dst, count=5)
        rep.check(res.replies != 0 and res.returncode in (0, 1),
                  f"ping -> {dst} through the relay answers (5 sent, a lost one is the relay's)",
                  res.output[-300:])

    sent, got, secs = transfer_lib.run(a, b, "10.99.0.2", 5201, XFER_BYTES, XFER_TIMEOUT)
    rep.check(sent and got and sent.get("bytes") == XFER_BYTES and got.get("bytes") == XFER_BYTES
              and sent.get("sha256") == got.get("sha256"),
              f"{XFER_BYTES // 1000000} MB TCP A -> B through 1% loss and 5% reordering: SHA-256 "
              f"equal on both ends ({secs:.1f} s)", f"sender {sent}, receiver {got}")

    time.sleep(0.3)  # the last ACKs, and the relay's held datagrams (20 ms)
    st_a, st_b = ea.status(), eb.status()
    relay.send_signal(signal.SIGTERM)
    out, _ = relay.communicate(timeout=10)
    counts = json.loads(out.strip().splitlines()[-1])
    rep.info(f"relay: {json.dumps(counts)}")
    ab, ba = counts["ab"], counts["ba"]
    rep.check(ab["dropped"] > 0 and ab["reordered"] > 0 and ba["reordered"] > 0,
              f"the relay dropped {ab['dropped']} and held back {ab['reordered']} of A's datagrams "
              f"(B's: {ba['dropped']} and {ba['reordered']})", json.dumps(counts))
    pa, pb = esptun_proc.peer(st_a, "site-b"), esptun_proc.peer(st_b, "site-a")
    for name, st, peer, delivered, d in (("B", st_b, pb, ab["out"], "A -> B"),
                                         ("A", st_a, pa, ba["out"], "B -> A")):
        bad = esptun_proc.fault_drops(st["drops"])
        rep.check(not bad, f"{name}: no drops (no replay, no auth failure)", json.dumps(st["drops"]))
        rep.equal(peer["sa_in"]["packets"] + esptun_proc.rx_shed(st), delivered,
                  f"{name}: every datagram the relay delivered {d} was accepted (or shed by the "
                  "receive queue limit)")
    rep.check(pb["sa_in"]["reordered"] > 0 and pa["sa_in"]["reordered"] > 0,
              f"late packets were accepted and counted: B sa_in.reordered "
              f"{pb['sa_in']['reordered']}, A {pa['sa_in']['reordered']}",
              json.dumps([pa["sa_in"], pb["sa_in"]]))
    rep.equal(pa["sa_out"]["packets"], ab["in"], "A's sa_out.packets == what the relay received from A")


if __name__ == "__main__":
    report.main("netns/reorder", body, tools=("ip", "ping", "timeout"))
