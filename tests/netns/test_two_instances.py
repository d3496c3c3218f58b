#!/usr/bin/python3
# test_two_instances.py - a second gateway on a port another one already
# uses fails with a clear error instead of silently sharing it (issue 17).
#
#   netns A (tiA-PID)                                   netns B (tiB-PID)
#   gateway 1 (workers = 2, SO_REUSEPORT) tun 10.75.0.1    gateway, tun 10.75.0.2
#   gateway 2 (workers = 2): must not start
#   ula 10.205.0.1/24 ------------------ veth ------------ ulb 10.205.0.2/24
#
# Per case (first listen, second listen): the same wildcard, wildcard then
# specific, specific then wildcard, and the same specific address. The
# second gateway exits non-zero within seconds, its log names the port and
# says another endpoint uses it; the first still answers status, still
# forwards (ping A -> B through the tunnel) and received nothing that was
# meant for it on the second's behalf (no drops). A second gateway on
# another port of the same address starts fine.
"""Two gateways on one port: the second one refuses to start."""

import os
import re
import subprocess
import sys

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping  # noqa: E402
import report  # noqa: E402

A_UL, B_UL = "10.205.0.1", "10.205.0.2"
A_IN, B_IN = "10.75.0.1", "10.75.0.2"
CASES = [("0.0.0.0:4500", "0.0.0.0:4500"), ("0.0.0.0:4500", f"{A_UL}:4500"),
         (f"{A_UL}:4500", "0.0.0.0:4500"), (f"{A_UL}:4500", f"{A_UL}:4500"),
         ("[::]:4500", f"{A_UL}:4500")]


def config(tmp, name, listen, workers, peer_ep, tun_addr, allowed, out, inb, state="a"):
    """One gateway's config. The first gateways of all cases share their keys
    and so one state_dir: each start resumes the sequence numbers B has seen."""
    sfx = os.getpid() % 100000
    ep = conf.Endpoint(interface=f"ti{name}{sfx}", addresses=[f"{tun_addr}/24"],
                       state_dir=os.path.join(tmp, f"state-{state}"),
                       control_socket=os.path.join(tmp, f"{name}.sock"), listen=listen, workers=workers,
                       peers=[conf.Peer(name="other", cipher="aes128-gcm", out=out, inb=inb,
                                        allowed_ips=[f"{allowed}/32"], endpoint=peer_ep)])
    return ep.write(os.path.join(tmp, f"{name}.toml"))


def second_fails(rep, tag, build, ns, cfg, log, port):
    """Runs the second gateway in the foreground: it must exit non-zero with the clear error."""
    try:
        p = subprocess.run(ns.cmd(os.path.join(build, "esptun-gateway"), "run", "-c", cfg),
                           capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        rep.check(False, f"[{tag}] the second gateway exits instead of running")
        return
    with open(log, "w") as f:
        f.write(p.stderr)
    rep.check(p.returncode != 0, f"[{tag}] the second gateway exits non-zero ({p.returncode})")
    line = next((l for l in p.stderr.splitlines() if f"UDP port {port} is already used by another "
                 "endpoint" in l), None)
    rep.check(line is not None and re.search(r"error: listen \S+:" + str(port), line),
              f"[{tag}] it says which port and that another endpoint uses it: {line!r}",
              p.stderr[-800:])


def body(rep, build):
    tmp = netns.make_tempdir("twoinst")
    a = netns.Netns(netns.unique("ti", "a"))
    b = netns.Netns(netns.unique("ti", "b"))
    netns.veth(a, b, "ula", "ulb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    a_out, b_out = conf.sa_pair("aes128-gcm", spi_base=0x7100)
    cfg_b = config(tmp, "b", "0.0.0.0:4500", 1, f"{A_UL}:4500", B_IN, A_IN, b_out, a_out, "b")
    gb = esptun_proc.Endpoint(build, b, cfg_b, os.path.join(tmp, "b.log")).start()
    netns.on_cleanup(lambda: gb.alive() and gb.stop())
    for idx, (first, second) in enumerate(CASES):
        tag = f"{first} then {second}"
        rep.section(tag)
        cfg1 = config(tmp, f"a{idx}", first, 2, f"{B_UL}:4500", A_IN, B_IN, a_out, b_out)
        # The second's own keys and tun: only the port is the same.
        x_out, x_in = conf.sa_pair("aes128-gcm", spi_base=0x7200 + 0x10 * idx)
        cfg2 = config(tmp, f"x{idx}", second, 2, f"{B_UL}:4500", "10.74.0.1", "10.74.0.2",
                      x_out, x_in, f"x{idx}")
        g1 = esptun_proc.Endpoint(build, a, cfg1, os.path.join(tmp, f"a{idx}.log"))
        rep.on_failure.append(lambda g=g1: print(f"\n--- first:\n{netns.tail(g.log)}"))
        g1.start()
        try:
            st = g1.status()
            rep.check(st["workers"] == 2, f"[{tag}] the first runs 2 workers (SO_REUSEPORT group)")
            second_fails(rep, tag, build, a, cfg2, os.path.join(tmp, f"x{idx}.log"), 4500)
            rep.check(g1.alive(), f"[{tag}] the first gateway still runs")
            ping.expect_replies(rep, f"[{tag}] ping A -> B through the first gateway",
                                ping.run(a, B_IN, 3), 3)
            drops = {k: v for k, v in g1.status()["drops"].items() if v}
            rep.check(not drops, f"[{tag}] the first gateway: no drops", str(drops))
        finally:
            rep.equal(g1.stop(), 0, f"[{tag}] the first gateway: SIGTERM -> exit code 0")

    rep.section("another port on the same address")
    cfg1 = config(tmp, "p1", f"{A_UL}:4500", 2, f"{B_UL}:4500", A_IN, B_IN, a_out, b_out)
    x_out, x_in = conf.sa_pair("aes128-gcm", spi_base=0x7300)
    cfg2 = config(tmp, "p2", f"{A_UL}:4501", 2, f"{B_UL}:4500", "10.74.0.1", "10.74.0.2",
                  x_out, x_in, "p2")
    g1 = esptun_proc.Endpoint(build, a, cfg1, os.path.join(tmp, "p1.log")).start()
    g2 = esptun_proc.Endpoint(build, a, cfg2, os.path.join(tmp, "p2.log"))
    try:
        g2.start()
        rep.check(g2.alive(), "a second gateway on port 4501 starts beside the one on 4500")
        ping.expect_replies(rep, "ping A -> B through the first gateway", ping.run(a, B_IN, 3), 3)
    finally:
        for g in (g2, g1):
            if g.alive():
                rep.equal(g.stop(), 0, f"{os.path.basename(g.config)}: SIGTERM -> exit code 0")


if __name__ == "__main__":
    report.main("netns/two_instances", body, tools=("ip", "ping"))
