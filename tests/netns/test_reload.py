#!/usr/bin/python3
# test_reload.py - live reload of a running gateway under load: peers are
# added, removed and changed while a checksummed transfer and a ping run
# through another peer, which must not lose a packet; a broken config and a
# change only a restart can apply are refused and change nothing.
#
#   netns A            netns B            netns C            netns D
#   esptun-gateway     esptun-gateway     esptun-gateway     esptun-client (IKE,
#   10.88.1.1/24       10.88.2.1/24       10.88.3.1/24       10.88.4.1/24, PSK)
#   ul 10.203.0.2      ul 10.203.0.3      ul 10.203.0.4      ul 10.203.0.5
#        |                  |                  |                  |
#   -----+------------------+----- br0 --------+------------------+-----
#   netns G: esptun-gateway 10.203.0.1, tun 10.88.0.1/24
#     before: a (static), c (static), d (IKE, ESP aes128gcm16 only)
#     after:  a untouched, b (static) added, c removed, d's ESP proposals
#             changed to aes256gcm16 only (re-established)
#
# Steps: everything up (B is not yet G's peer: its ping fails); a 120 MB
# transfer A -> G and a 10 ms ping A -> G start; mid-transfer SIGHUP applies
# the new config; `esptun-gateway reload` then gets a config with a syntax
# error and one with a changed [tunnel] workers: both refused (exit 1, the
# reason printed), the status exactly as before. Checks: transfer SHA-256
# equal, no ping lost, peer a's SAs the same SPIs with counters that only
# grew, every ESP packet A sent to G arrived (A's sa_out = G's sa_in for a),
# G's peers exactly a, b, d; B reaches G; C no longer does (G counts
# unknown_spi); D's CHILD_SA is aes256-gcm at both ends; the log names each
# change.
#
# usage: test_reload.py BUILD_DIR   (root)
"""Live reload of esptun-gateway under load."""

import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
import transfer as transfer_lib  # noqa: E402
from netns import TestError  # noqa: E402

XFER_BYTES = 120 * 1000 * 1000
XFER_TIMEOUT = 60
PING_COUNT, PING_INTERVAL = 400, 0.01
CIPHER = "aes128-gcm"
G_UL = "10.203.0.1"
SITES = {"a": ("10.203.0.2", "10.88.1"), "b": ("10.203.0.3", "10.88.2"),
         "c": ("10.203.0.4", "10.88.3"), "d": ("10.203.0.5", "10.88.4")}
G_IN = "10.88.0.1"
D_PSK = "reload-test-psk-0123456789abcdef"


class Ctx:
    pass


def ifname(ctx, label):
    return f"rl{ctx.sfx}{label}"


def static_pair(label):
    """Keys of the link G <-> label: (G's out = site's in, site's out = G's in)."""
    base = 0x10000 * (ord(label) - ord("a") + 1)
    return conf.sa_pair(CIPHER, base)


def gateway_text(ctx, peers, d_esp, workers=1):
    """G's config: static peers among a, b, c and the IKE peer d."""
    ep = conf.Endpoint(interface=ifname(ctx, "g"), addresses=[f"{G_IN}/24"],
                       control_socket=os.path.join(ctx.tmp, "g.sock"), listen=f"{G_UL}:4500",
                       state_dir=os.path.join(ctx.tmp, "state-g"), workers=workers)
    for label in peers:
        g_out, s_out = ctx.keys[label]
        ul, net = SITES[label]
        ep.peers.append(conf.Peer(label, CIPHER, g_out, s_out, [f"{net}.0/24"], f"{ul}:4500"))
    text = conf.render(ep).replace("[tunnel]\n", f'[tunnel]\nlocal_id = "gw.example"\n', 1)
    d = dict(name="d", allowed_ips=[f"{SITES['d'][1]}.0/24"], psk=D_PSK, remote_id="d@example.com",
             esp_proposals=d_esp)
    return text + conf.render_ike_config({}, [d]).split("\n", 1)[1]


def site_config(ctx, label):
    ul, net = SITES[label]
    g_out, s_out = ctx.keys[label]
    ep = conf.Endpoint(interface=ifname(ctx, label), addresses=[f"{net}.1/24"],
                       control_socket=os.path.join(ctx.tmp, f"{label}.sock"), listen=f"{ul}:4500",
                       state_dir=os.path.join(ctx.tmp, f"state-{label}"), workers=1)
    ep.peers.append(conf.Peer("g", CIPHER, s_out, g_out, [f"{G_IN[:-2]}.0/24"], f"{G_UL}:4500"))
    path = os.path.join(ctx.tmp, f"{label}.toml")
    ep.write(path)
    return path


def client_config(ctx):
    ul, net = SITES["d"]
    tunnel = {"interface": ifname(ctx, "d"), "addresses": [f"{net}.1/24"], "listen": f"{ul}:4500",
              "local_id": "d@example.com", "tun_io": "direct",
              "control_socket": os.path.join(ctx.tmp, "d.sock"),
              "state_dir": os.path.join(ctx.tmp, "state-d")}
    peer = dict(name="gw", endpoint=f"{G_UL}:4500", allowed_ips=[f"{G_IN[:-2]}.0/24"], psk=D_PSK,
                remote_id="gw.example", esp_proposals=["aes128gcm16", "aes256gcm16"])
    path = os.path.join(ctx.tmp, "d.toml")
    conf.write_private(path, conf.render_ike_config(tunnel, [peer]))
    return path


def build_topology(ctx):
    ctx.ns = {"g": netns.Netns(netns.unique("reload", "g"))}
    g = ctx.ns["g"]
    g.ip("link", "add", "br0", "type", "bridge")
    g.ip("addr", "add", f"{G_UL}/24", "dev", "br0")
    g.ip("link", "set", "br0", "up")
    for label, (ul, _) in SITES.items():
        ns = netns.Netns(netns.unique("reload", label))
        ctx.ns[label] = ns
        netns.veth(g, ns, f"g{label}", "ul", [], [f"{ul}/24"])
        g.ip("link", "set", f"g{label}", "master", "br0")


def ping(ns, dst, count, interval=0.2, timeout=None):
    """ping() - (sent, received) of `ping -c count` from ns."""
    p = ns.run("ping", "-n", "-q", "-c", str(count), "-i", str(interval), "-W", "1", dst,
               timeout=timeout or (count * interval + 10), check=False)
    for line in p.stdout.splitlines():
        if "packets transmitted" in line:
            parts = line.split(",")
            return int(parts[0].split()[0]), int(parts[1].split()[0])
    return count, 0


def peer_names(status):
    return sorted(p.get("name") for p in status.get("peers", []))


def g_reload(ctx):
    """`esptun-gateway reload -s SOCK`: (exit status, output)."""
    p = subprocess.run(ctx.ns["g"].cmd(os.path.join(ctx.build, "esptun-gateway"), "reload", "-s",
                                       os.path.join(ctx.tmp, "g.sock")),
                       capture_output=True, text=True, timeout=20)
    return p.returncode, (p.stdout + p.stderr).strip()


def child_cipher(status, peer):
    for sa in (status.get("ike") or {}).get("sas", []):
        if sa.get("peer") == peer and sa.get("state") == "established":
            for ch in sa.get("children", []):
                return ch.get("cipher")
    return None


def body(rep, build):
    ctx = Ctx()
    ctx.build = build
    ctx.sfx = str(os.getpid() % 10000)
    ctx.tmp = netns.make_tempdir("reload")
    ctx.keys = {label: static_pair(label) for label in "abc"}
    ctx.ns = {}

    def cleanup():
        for ns in ctx.ns.values():
            ns.delete()
    netns.on_cleanup(cleanup)
    build_topology(ctx)

    g_conf = os.path.join(ctx.tmp, "g.toml")
    conf.write_private(g_conf, gateway_text(ctx, "ac", ["aes128gcm16"]))
    eps = {"g": esptun_proc.Endpoint(build, ctx.ns["g"], g_conf, os.path.join(ctx.tmp, "g.log"))}
    for label in "abc":
        eps[label] = esptun_proc.Endpoint(build, ctx.ns[label], site_config(ctx, label),
                                          os.path.join(ctx.tmp, f"{label}.log"))
    eps["d"] = esptun_proc.Endpoint(build, ctx.ns["d"], client_config(ctx),
                                    os.path.join(ctx.tmp, "d.log"), "client")
    netns.on_cleanup(lambda: [e.stop() for e in eps.values() if e.alive()])
    for e in eps.values():
        e.start()
    g = eps["g"]
    netns.wait_until(lambda: child_cipher(g.status(), "d") is not None, 15,
                     what="the IKE peer d established")
    rep.equal(child_cipher(g.status(), "d"), "aes128-gcm", "before: d's CHILD_SA at G is aes128-gcm")
    rep.check(ping(ctx.ns["a"], G_IN, 3)[1] == 3, "before: A reaches G")
    rep.check(ping(ctx.ns["c"], G_IN, 3)[1] == 3, "before: C reaches G")
    rep.check(ping(ctx.ns["b"], G_IN, 2)[1] == 0, "before: B is no peer of G, its ping gets nothing")
    before = g.status()
    a_before = esptun_proc.peer(before, "a")

    # The load through peer a, and the reload in the middle of it.
    result = {}
    progress = []

    def run_transfer():
        try:
            result["xfer"] = transfer_lib.run(ctx.ns["a"], ctx.ns["g"], G_IN, 5201, XFER_BYTES,
                                              XFER_TIMEOUT, on_progress=progress.append)
        except TestError as e:
            result["error"] = str(e)

    def run_ping():
        result["ping"] = ping(ctx.ns["a"], G_IN, PING_COUNT, PING_INTERVAL)

    threads = [threading.Thread(target=run_transfer), threading.Thread(target=run_ping)]
    for t in threads:
        t.start()
    netns.wait_until(lambda: progress and progress[-1] >= XFER_BYTES // 10, 20,
                     what="the transfer under way")
    conf.write_private(g_conf, gateway_text(ctx, "ab", ["aes256gcm16"]))
    t0 = time.monotonic()
    g.proc.send_signal(signal.SIGHUP)
    netns.wait_until(lambda: "reload (SIGHUP)" in open(g.log).read(), 10, what="the reload logged")
    rep.check("reload (SIGHUP): added b" in open(g.log).read(), "SIGHUP applied the new config",
              netns.tail(g.log, 10))
    rep.info(f"SIGHUP reload took {time.monotonic() - t0:.2f} s to be logged; transfer at "
             f"{progress[-1] if progress else 0} bytes")
    rep.check(any(t.is_alive() for t in threads),
              "the reload happened while the transfer or the ping still ran")
    after_reload = g.status()

    # Refused: a broken config, then a change of [tunnel] workers.
    good = open(g_conf).read()
    conf.write_private(g_conf, good + "\n[[peer]\nname = \"broken\n")
    rc, out = g_reload(ctx)
    rep.check(rc == 1 and "invalid" in out and "nothing changed" in out,
              f"a config with a syntax error is refused: {out[:160]}")
    conf.write_private(g_conf, gateway_text(ctx, "ab", ["aes256gcm16"], workers=2))
    rc, out = g_reload(ctx)
    rep.check(rc == 1 and "[tunnel] workers" in out and "restart" in out,
              f"a change of [tunnel] workers is refused as needing a restart: {out[:160]}")
    conf.write_private(g_conf, good)
    rc, out = g_reload(ctx)
    rep.check(rc == 0 and "nothing to change" in out, f"the applied config again: {out[:160]}")
    refused = g.status()
    rep.equal(peer_names(refused), peer_names(after_reload), "the refused reloads left the peers alone")

    for t in threads:
        t.join(XFER_TIMEOUT + 10)
    if "error" in result:
        raise TestError(result["error"])
    sent, got, secs = result["xfer"]
    transfer_lib.check(rep, f"{XFER_BYTES // 1000000} MB TCP A -> G across the reloads", sent, got,
                       XFER_BYTES, secs)
    p_sent, p_got = result.get("ping", (PING_COUNT, 0))
    rep.check(p_sent == PING_COUNT and p_got == PING_COUNT,
              f"ping A -> G every {PING_INTERVAL * 1000:.0f} ms across the reloads: "
              f"{p_got}/{p_sent} answered")

    # Peer a untouched: the same SAs, counters that only grew, nothing lost.
    after = g.status()
    a_after = esptun_proc.peer(after, "a")
    for sa in ("sa_out", "sa_in"):
        rep.equal(a_after[sa]["spi"], a_before[sa]["spi"], f"peer a keeps its {sa} (same SPI)")
        rep.check(a_after[sa]["packets"] > a_before[sa]["packets"],
                  f"peer a's {sa} counted on: {a_before[sa]['packets']} -> {a_after[sa]['packets']}")
    a_side = esptun_proc.peer(eps["a"].status(), "g")
    # Less what G shed unopened as congestion (queue_delay, not a peer's
    # count; the others send only pings, which are never shed).
    shed = esptun_proc.rx_shed(after)
    rep.equal(a_after["sa_in"]["packets"] + shed, a_side["sa_out"]["packets"],
              f"every ESP packet A sent reached G (A's sa_out = G's sa_in for a + {shed} shed)")
    rep.equal(a_after["sa_in"]["replay_window"], a_before["sa_in"]["replay_window"],
              "peer a's replay window as configured")

    # The changes themselves.
    rep.equal(peer_names(after), ["a", "b", "d"], "G's peers after the reload: a, b, d")
    rep.check(ping(ctx.ns["b"], G_IN, 3)[1] == 3, "B, added, reaches G")
    unknown_before = after.get("drops", {}).get("unknown_spi", 0)
    rep.check(ping(ctx.ns["c"], G_IN, 2)[1] == 0, "C, removed, no longer reaches G")
    rep.check(g.status().get("drops", {}).get("unknown_spi", 0) > unknown_before,
              "G drops C's packets as unknown_spi")
    netns.wait_until(lambda: child_cipher(g.status(), "d") == "aes256-gcm", 15,
                     what="d re-established with aes256-gcm")
    rep.equal(child_cipher(g.status(), "d"), "aes256-gcm", "d re-established: aes256-gcm at G")
    rep.equal(child_cipher(eps["d"].status(), "gw"), "aes256-gcm", "... and at D")
    rep.check(ping(ctx.ns["d"], G_IN, 3)[1] == 3, "D reaches G over its new CHILD_SA")
    log = open(g.log).read()
    rep.check("added b" in log and "removed c" in log and "re-established d" in log,
              "G's log names each change", netns.tail(g.log, 20))
    for label, e in eps.items():
        rep.equal(e.stop(), 0, f"{label} exits cleanly")


if __name__ == "__main__":
    report.main("test_reload", body)
