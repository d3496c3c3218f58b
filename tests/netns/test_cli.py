#!/usr/bin/python3
# test_cli.py - the operator's commands.
# The command line (one CLI11 parser for every program): an unknown option or
# command, a missing value, a number out of range, -c with -i all exit 2 with
# a message naming the offender; --version and --help (one line per verb).
# Keys: `genkey --cipher C` prints keys of C's lengths in "0x" hex, fresh each
# time; `genpsk` a 32-byte PSK; `genpair --cipher C` two mirrored blocks that,
# each pasted verbatim into one end's [[peer]], bring a static tunnel up
# between two gateways (pings both ways); mistakes exit 2 with a message.
# Reading a running endpoint without its config: `show` and `status` find
# the control socket from -s SOCKET, -i INTERFACE (/run/esptun/<if>.sock) or
# by themselves; `show` prints the peer's endpoint, keying, last packet and
# transfer (colour only on a terminal, never with NO_COLOR); `status --format
# prometheus` is valid exposition text whose figures equal the JSON's.
# SIGHUP with the config unchanged reloads nothing, and the gateway keeps
# forwarding (tests/netns/test_reload.py changes the config).
# Drops by peer: forged ESP sent to A with the peer's SPI (old sequence
# numbers, a bad ICV, too short) counts replay, auth_failed and malformed for
# that peer in the status JSON (field by field), in `show` and in the
# Prometheus output; an unknown SPI counts for the endpoint only.
#
#   netns A (et-kg-PID-a)                       netns B (et-kg-PID-b)
#   esptun-gateway, tun 10.98.0.1/24            esptun-gateway, tun 10.98.0.2/24
#   config: [[peer]] + genpair's "end A" block  config: [[peer]] + "end B" block
#   socket: the test's temp folder              socket: /run/esptun/kgbN.sock (default)
#   ula 10.202.0.1/24 ---------- veth ---------- ulb 10.202.0.2/24
"""The operator's commands: genkey, genpsk, genpair, show, status."""

import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import tomllib

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping  # noqa: E402
import report  # noqa: E402

A_UL, B_UL = "10.202.0.1", "10.202.0.2"
A_IN, B_IN = "10.98.0.1", "10.98.0.2"


def tool(build, *args, env=None):
    """tool() - run esptun-gateway with args; (exit code, stdout, stderr)."""
    p = subprocess.run([os.path.join(build, "esptun-gateway"), *args], capture_output=True,
                       text=True, timeout=10, env=env)
    return p.returncode, p.stdout, p.stderr


def on_terminal(build, *args, env=None):
    """on_terminal() - run esptun-gateway with stdout on a pseudo-terminal;
    (exit code, what it wrote)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([os.path.join(build, "esptun-gateway"), *args], stdout=slave,
                         stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the program closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=10), out.decode(errors="replace")


def hex_bytes(text):
    """hex_bytes() - the bytes of a "0x..." string; ValueError otherwise."""
    if not text.startswith("0x"):
        raise ValueError(f"{text!r} lacks the 0x the loader requires")
    return bytes.fromhex(text[2:])


def check_genkey(rep, build):
    rep.section("genkey: every suite's key lengths, fresh each time")
    for name, s in conf.SUITES.items():
        first, second = (tool(build, "genkey", "--cipher", name) for _ in range(2))
        if not rep.check(first[0] == 0 and second[0] == 0, f"genkey --cipher {name} exits 0",
                         first[2] + second[2]):
            continue
        keys = [tomllib.loads(out[1]) for out in (first, second)]
        if s["aead"]:
            lens = [len(hex_bytes(k["key"])) for k in keys]
            rep.equal(lens, [s["enc_len"] + 4] * 2, f"{name}: key = AES key || 4-byte salt")
            rep.check(keys[0]["key"] != keys[1]["key"], f"{name}: two runs, two keys")
        else:
            rep.equal([(len(hex_bytes(k["enc_key"])), len(hex_bytes(k["auth_key"]))) for k in keys],
                      [(s["enc_len"], s["auth_len"])] * 2, f"{name}: enc_key and auth_key lengths")
            rep.check(keys[0]["enc_key"] != keys[1]["enc_key"] and
                      keys[0]["auth_key"] != keys[1]["auth_key"], f"{name}: two runs, two keys")
    rc, out, err = tool(build, "genkey", "--cipher", "aes-999")
    rep.check(rc == 2 and "--cipher" in err and "aes-999" in err and "aes128-gcm" in err,
              "an unknown suite: exit 2, the known ones listed", err)
    rc, out, err = tool(build, "genkey")
    rep.check(rc == 2 and "--cipher" in err, "no suite: exit 2, asks for --cipher", err)


def bench(build, *args):
    """bench() - run esptun-bench with args; (exit code, stdout, stderr)."""
    p = subprocess.run([os.path.join(build, "esptun-bench"), *args], capture_output=True,
                       text=True, timeout=10)
    return p.returncode, p.stdout, p.stderr


def check_command_line(rep, build):
    rep.section("the command line (apps/cli/options.hpp): mistakes exit 2 naming what is wrong")
    mistakes = [
        (tool, ("status", "--bogus"), ["esptun-gateway status:", "--bogus"], "an unknown option"),
        (tool, ("check", "-c"), ["esptun-gateway check:", "--config"], "-c without its value"),
        (tool, ("run",), ["--config is required"], "run without -c"),
        (tool, ("status", "-c", "x.toml", "-i", "eth0"), ["--config excludes --interface"],
         "-c with -i"),
        (tool, ("status", "-i", "../etc"), ["not a path"], "-i with a path"),
        (tool, ("status", "--format", "xml"), ["--format", "xml", "prometheus"],
         "--format outside its set"),
        (tool, ("cleanup", "-c", "x.toml"), ["unknown command 'cleanup'", "reload"],
         "cleanup on the gateway"),
        (tool, (), ["which command?", "run"], "no command"),
        (bench, ("crypto", "--rounds", "0"), ["esptun-bench crypto:", "--rounds", "1 to 1000"],
         "bench: a number out of range"),
        (bench, ("crypto", "--sizes", "64,x"), ["--sizes", "'x'"], "bench: a list item that is no number"),
        (bench, ("compare", "--duration"), ["--duration"], "bench: an option without its value"),
        (bench, ("ike-load", "--groups", "modp768"), ["esptun-bench ike-load:", "unknown group", "modp768"],
         "bench: a group ike-load does not know"),
        (bench, ("peers", "--counts", "0"), ["esptun-bench peers:", "--counts", "from 1 to 200"],
         "bench: a number of peers out of range"),
        (bench, ("peers", "--counts", "12", "--spokes", "8"), ["12 peers do not split evenly over 8"],
         "bench: peers that do not split evenly over the peer gateways"),
        (bench, ("vhost-counts", "row", "--phase", "p", "one"), ["BEFORE AFTER"],
         "bench: one file where two are wanted"),
        (bench, ("nope",), ["unknown command 'nope'", "udp-engines"], "bench: an unknown command"),
    ]
    for run, args, want, what in mistakes:
        rc, out, err = run(build, *args)
        rep.check(rc == 2 and out == "" and all(w in err for w in want), f"{what}: exit 2",
                  f"exit {rc}: {err}")
    rc, out, err = tool(build, "-c", "/nonexistent.toml", "check")
    rep.check(rc == 1 and "/nonexistent.toml" in err, "options before the verb still count", err)
    for run, name in ((tool, "esptun-gateway"), (bench, "esptun-bench")):
        rc, out, err = run(build, "--version")
        rep.check(rc == 0 and re.fullmatch(rf"{name} \d+\.\d+\.\d+\n", out), f"{name} --version", out + err)
    rc, out, err = tool(build, "--help")
    verbs = re.findall(r"^  ([a-z]+) +\S", out, re.M)
    rep.equal(verbs, ["run", "check", "status", "show", "reload", "genkey", "genpair", "genpsk"],
              "gateway --help: one line per verb")
    rc, out, err = tool(build, "status", "--help")
    rep.check(rc == 0 and all(o in out for o in ("--interface", "--socket", "--format", "prometheus")),
              "status --help lists its options", out)
    rc, out, err = bench(build, "--help")
    rep.equal(re.findall(r"^  ([a-z][a-z-]*) +\S", out, re.M),
              ["demo", "vhost-counts", "crypto", "compare", "udp-engines", "ike-load", "peers", "help"],
              "bench --help: one line per command")
    for cmd in (["demo"], ["crypto"], ["compare"], ["udp-engines"], ["ike-load"], ["peers"], ["vhost-counts"],
                ["vhost-counts", "snapshot"], ["vhost-counts", "row"], ["vhost-counts", "table"]):
        rc, out, err = bench(build, *cmd, "--help")
        rep.check(rc == 0 and f"esptun-bench {' '.join(cmd)}" in out, f"bench {' '.join(cmd)} --help",
                  out + err)


def check_genpsk(rep, build):
    rep.section("genpsk: 32 random bytes")
    runs = [tool(build, "genpsk") for _ in range(2)]
    rep.require(all(r[0] == 0 for r in runs), "genpsk exits 0", runs[0][2])
    psks = [hex_bytes(tomllib.loads(r[1])["psk"]) for r in runs]
    rep.equal([len(p) for p in psks], [32, 32], "psk is 32 bytes")
    rep.check(psks[0] != psks[1], "two runs, two PSKs")


def split_pair(text):
    """split_pair() - genpair's output as the two ends' blocks (text)."""
    a = text.index("# --- end A")
    b = text.index("# --- end B")
    return text[a:b], text[b:]


def interface_of(me):
    return f"kg{me}{os.getpid() % 100000}"


def B_SOCK():
    return f"/run/esptun/{interface_of('b')}.sock"


def gateway_config(tmp, me, ul_peer, tun_addr, allowed, block, socket):
    """gateway_config() - one end's config: [tunnel] and a [[peer]] whose
    cipher and SA tables are genpair's block, pasted as printed. socket
    None: the default control socket."""
    path = os.path.join(tmp, f"{me}.toml")
    sock = f'control_socket = "{socket}"\n' if socket else ""
    text = (f'[tunnel]\ninterface = "{interface_of(me)}"\n'
            f'addresses = ["{tun_addr}/24"]\nlisten = "0.0.0.0:4500"\ntun_io = "direct"\n'
            f'state_dir = "{tmp}/state-{me}"\n{sock}\n'
            f'[[peer]]\nname = "other"\nendpoint = "{ul_peer}:4500"\n'
            f'allowed_ips = ["{allowed}/32"]\n' + block)
    conf.write_private(path, text)
    return path


def check_genpair(rep, build):
    rep.section("genpair: both ends from one command, pasted verbatim")
    rc, out, err = tool(build, "genpair", "--cipher", "aes256-cbc-hmac-sha256")
    rep.require(rc == 0, "genpair exits 0", err)
    block_a, block_b = split_pair(out)
    ta, tb = tomllib.loads(block_a), tomllib.loads(block_b)
    # Compared, never printed: the report must not show keys.
    rep.check((ta["peer"]["out"], ta["peer"]["in"]) == (tb["peer"]["in"], tb["peer"]["out"]),
              "A's out is B's in and A's in is B's out (SPI and keys)")
    rep.check(ta["peer"]["out"]["spi"] != ta["peer"]["in"]["spi"] and
              ta["peer"]["out"]["enc_key"] != ta["peer"]["in"]["enc_key"],
              "each direction has its own SPI and key")
    rep.check(min(ta["peer"]["out"]["spi"], ta["peer"]["in"]["spi"]) >= 0x100,
              "SPIs outside the reserved range 1-255 (RFC 4303 section 2.1)")

    tmp = netns.make_tempdir("keygen")
    a = netns.Netns(netns.unique("kg", "a"))
    b = netns.Netns(netns.unique("kg", "b"))
    netns.veth(a, b, "ula", "ulb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    cfg_a = gateway_config(tmp, "a", B_UL, A_IN, B_IN, block_a, os.path.join(tmp, "a.sock"))
    cfg_b = gateway_config(tmp, "b", A_UL, B_IN, A_IN, block_b, None)
    for cfg in (cfg_a, cfg_b):
        p = esptun_proc.run_check(build, cfg)
        rep.require(p.returncode == 0, f"check accepts {os.path.basename(cfg)}",
                    p.stdout + p.stderr)
    # B's default socket outlives it (it runs as nobody and cannot unlink in
    # root's /run/esptun): the test removes it.
    netns.on_cleanup(lambda: os.path.exists(B_SOCK()) and os.unlink(B_SOCK()))
    gw_a = esptun_proc.Endpoint(build, a, cfg_a, os.path.join(tmp, "a.log")).start()
    gw_b = esptun_proc.Endpoint(build, b, cfg_b, os.path.join(tmp, "b.log")).start()
    netns.on_cleanup(gw_a.stop)
    netns.on_cleanup(gw_b.stop)
    ping.expect_replies(rep, f"ping A -> {B_IN} through the tunnel", ping.run(a, B_IN, 5), 5)
    ping.expect_replies(rep, f"ping B -> {A_IN} through the tunnel", ping.run(b, A_IN, 5), 5)
    for gw, name in ((gw_a, "A"), (gw_b, "B")):
        drops = gw.status()["drops"]
        rep.check(not any(drops.values()), f"{name}: no drops", str(drops))
    return tmp, gw_a, gw_b


def check_status_sockets(rep, build, tmp):
    rep.section("status finds the socket without the config: -s, -i, or by itself")
    b_if = interface_of("b")
    rc, out, err = tool(build, "status", "-s", os.path.join(tmp, "a.sock"))
    rep.check(rc == 0 and json.loads(out)["interface"] == interface_of("a"),
              "status -s SOCKET: A's JSON", err)
    rc, out, err = tool(build, "status", "-i", b_if)
    rep.check(rc == 0 and json.loads(out)["interface"] == b_if,
              f"status -i {b_if}: B's JSON from /run/esptun/{b_if}.sock", err)
    rc, out, err = tool(build, "show")
    rep.check(rc == 0 and f"interface: {b_if}" in out,
              "show with no option lists the endpoints in /run/esptun, B among them", err)
    rc, out, err = tool(build, "status", "-i", "nosuch0")
    rep.check(rc == 1 and "/run/esptun/nosuch0.sock" in err,
              "status -i of no running endpoint: exit 1 naming the socket", err)
    rc, out, err = tool(build, "status", "-i", "../etc")
    rep.check(rc == 2 and "not a path" in err, "-i with a path: exit 2", err)
    rc, out, err = tool(build, "status", "-i", b_if, "-s", "/x")
    rep.check(rc == 2 and "--interface excludes --socket" in err, "-i and -s together: exit 2", err)


def check_show(rep, build, tmp):
    rep.section("show: the peer as people read it")
    sock = os.path.join(tmp, "a.sock")
    status = json.loads(tool(build, "status", "-s", sock)[1])
    peer = esptun_proc.peer(status, "other")
    rc, out, err = tool(build, "show", "-s", sock)
    rep.require(rc == 0, "show -s SOCKET exits 0", err)
    rep.info(out)
    rep.check(f"interface: {interface_of('a')}" in out and "peer: other" in out,
              "show names the interface and the peer", out)
    rep.check(f"endpoint: {B_UL}:4500 (configured)" in out, "the peer's endpoint", out)
    rep.check(re.search(r"latest packet: \d+ seconds? ago", out) is not None,
              "the latest packet, seconds ago", out)
    rep.check(re.search(r"transfer: [0-9.]+ (B|KiB) received, [0-9.]+ (B|KiB) sent", out)
              is not None and peer["totals"]["rx_bytes"] > 0, "transfer both ways", out)
    rep.check(f"keying: static, {peer['cipher']}" in out, "keying and suite", out)
    rep.check("drops: none" in out, "no drops", out)
    q = status["queue"]
    rep.check(f"rx queue: limit {q['target_us']} us target, {q['interval_ms']} ms interval" in out
              and f"engaged {q['engaged']} time(s), {q['marks']} marked CE, {q['drops']} dropped" in out,
              "the receive queue limit and what it did", out)
    tq = status["tx_queue"]
    rep.check(tq["on"] and f"tx queue: flow queue; now {tq['sojourn_us']} us waiting" in out
              and f"{tq['marks']} marked CE, {tq['drops']} dropped late, "
                  f"{tq['overflow_drops']} dropped full" in out,
              "the send flow queue and what it did", out)
    rep.check("\x1b[" not in out, "no colour when stdout is not a terminal")
    rc, out = on_terminal(build, "show", "-s", sock, env={k: v for k, v in os.environ.items()
                                                          if k != "NO_COLOR"})
    rep.check(rc == 0 and "\x1b[1;32minterface:" in out, "colour on a terminal", out[:200])
    rc, out = on_terminal(build, "show", "-s", sock, env=dict(os.environ, NO_COLOR="1"))
    rep.check(rc == 0 and "\x1b[" not in out and "peer: other" in out,
              "no colour on a terminal with NO_COLOR set", out[:200])


# A sample's value: a number as the exposition format allows it (Go's float
# syntax), exponent sign included ("8.1e-05").
SAMPLE = re.compile(r'^([a-z_]+)\{((?:[a-z_]+="(?:[^"\\]|\\.)*",?)*)\} (-?[0-9.]+(?:e[-+]?[0-9]+)?)$')


def check_prometheus(rep, build, tmp):
    rep.section("status --format prometheus: exposition text, the JSON's figures")
    sock = os.path.join(tmp, "a.sock")
    rc, text, err = tool(build, "status", "-s", sock, "--format", "prometheus")
    status = json.loads(tool(build, "status", "-s", sock)[1])
    rep.require(rc == 0, "status --format prometheus exits 0", err)
    typed, samples, bad = set(), {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            if name in typed or kind not in ("counter", "gauge"):
                bad.append(line)
            typed.add(name)
        elif line.startswith("# HELP "):
            continue
        else:
            m = SAMPLE.match(line)
            if not m or m.group(1) not in typed:
                bad.append(line)
                continue
            labels = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2)))
            samples[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
    rep.check(not bad and samples, "every line is HELP, TYPE (once per metric) or a sample",
              "\n".join(bad[:5]))
    # And an independent reader: the Prometheus client library's own parser.
    from prometheus_client.parser import text_string_to_metric_families
    parsed = {}
    try:
        for fam in text_string_to_metric_families(text):
            for smp in fam.samples:
                parsed[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    except ValueError as e:
        rep.check(False, "prometheus_client's parser reads the output", str(e))
    rep.check(parsed and all(parsed.get(k) == v for k, v in samples.items()),
              f"prometheus_client's parser reads the same {len(samples)} samples",
              str([k for k, v in samples.items() if parsed.get(k) != v][:5]))
    a_if = interface_of("a")
    peer = esptun_proc.peer(status, "other")

    def sample(name, **labels):
        return samples.get((name, tuple(sorted(dict(interface=a_if, **labels).items()))))
    rep.equal(sample("esptun_up"), 1.0, "esptun_up is 1")
    rep.equal(sample("esptun_peer_rx_bytes_total", peer="other"), float(peer["totals"]["rx_bytes"]),
              "peer rx bytes equal the JSON's totals")
    rep.equal(sample("esptun_peer_tx_packets_total", peer="other"),
              float(peer["totals"]["tx_packets"]), "peer tx packets equal the JSON's totals")
    rep.equal(sample("esptun_drops_total", reason="replay"), float(status["drops"]["replay"]),
              "drops by reason")
    rep.equal(sample("esptun_packets_total", path="udp_rx"),
              float(status["counters"]["udp_rx_packets"]), "packets by path")
    rep.equal(sample("esptun_rx_queue_target_seconds"), status["queue"]["target_us"] / 1e6,
              "the receive queue limit's target, in seconds")
    rep.equal(sample("esptun_rx_queue_marks_total"), float(status["queue"]["marks"]),
              "the receive queue limit's CE marks")
    rep.equal(sample("esptun_tx_queue_marks_total"), float(status["tx_queue"]["marks"]),
              "the send flow queue's CE marks")
    rep.equal(sample("esptun_tx_queue_flows"), float(status["tx_queue"]["flows"]),
              "the send flow queue's flows")
    rc, _, err = tool(build, "show", "--format", "prometheus")
    rep.check(rc == 2 and "--format" in err and "not expected" in err, "show --format: exit 2", err)


def check_sighup(rep, build, tmp, gw):
    rep.section("SIGHUP, config unchanged: nothing to reload, the gateway keeps running")
    before = gw.status()["peers"][0]["totals"]
    gw.proc.send_signal(signal.SIGHUP)
    netns.wait_until(lambda: "SIGHUP" in open(gw.log).read(), 5, what="the SIGHUP log line")
    rep.check(gw.alive(), "the gateway still runs after SIGHUP")
    rep.check("reload (SIGHUP): nothing to change" in open(gw.log).read(),
              "the log says the reload found nothing to change", netns.tail(gw.log, 5))
    after = gw.status()["peers"][0]["totals"]
    rep.check(after["tx_packets"] >= before["tx_packets"], "its status still answers, counters kept")
    ping.expect_replies(rep, f"ping A -> {B_IN} after SIGHUP", ping.run(gw.ns, B_IN, 3), 3)


def esp_datagram(spi, seq, length):
    """A forged ESP datagram: SPI, sequence number, then zeros up to length bytes."""
    return spi.to_bytes(4, "big") + seq.to_bytes(4, "big") + bytes(length - 8)


def check_peer_drops(rep, build, tmp, gw_a, gw_b):
    rep.section("drops by peer: status JSON, show, Prometheus")
    sock = os.path.join(tmp, "a.sock")
    before = gw_a.status()
    peer = esptun_proc.peer(before, "other")
    spi, highest = peer["sa_in"]["spi"], peer["sa_in"]["highest_seq"]
    rep.require(highest >= 1, f"A has received up to sequence number {highest} from B")
    # aes256-cbc-hmac-sha256: 8 header + 16 IV + 32 (two blocks) + 16 ICV.
    good_len = 8 + 16 + 32 + 16
    sent = ([esp_datagram(spi, 1, good_len)] * 3 +  # seen already: replay
            [esp_datagram(spi, highest + 100, good_len)] * 2 +  # new number, forged ICV: auth_failed
            [esp_datagram(spi, highest + 200, 20)] +  # shorter than IV + ICV: malformed
            [esp_datagram(0x7fffff01, 1, good_len)])  # nobody's SPI: unknown_spi, no peer
    s = gw_b.ns.socket(socket.AF_INET, socket.SOCK_DGRAM, bind=(B_UL, 0))
    for d in sent:
        s.sendto(d, (A_UL, 4500))
    s.close()
    netns.wait_until(lambda: sum(gw_a.status()["drops"].values()) - sum(before["drops"].values()) >= 7,
                     5, what="A counting the 7 forged datagrams")
    after = gw_a.status()
    pd = esptun_proc.peer(after, "other").get("drops", {})
    want = {"malformed": 1, "auth_failed": 2, "replay": 3, "policy": 0, "dest_policy": 0,
            "padding": 0, "no_endpoint": 0, "no_sa": 0, "seq_exhausted": 0, "seq_not_saved": 0}
    rep.equal(sorted(pd), sorted(want), "the peer's drops list the reasons a peer can have")
    for reason, n in want.items():
        rep.equal(pd.get(reason, 0) - peer.get("drops", {}).get(reason, 0), n,
                  f"peer drops.{reason} went up by {n}")
    rep.equal(after["drops"]["unknown_spi"] - before["drops"]["unknown_spi"], 1,
              "the unknown SPI is counted for the endpoint")
    rep.check("unknown_spi" not in pd, "... and not for the peer")
    for reason in ("malformed", "auth_failed", "replay"):
        rep.check(after["drops"][reason] - before["drops"][reason] == want[reason],
                  f"the endpoint's drops.{reason} went up by the same {want[reason]}")

    rc, out, err = tool(build, "show", "-s", sock)
    rep.require(rc == 0, "show exits 0", err)
    block = out[out.index("peer: other"):]
    line = next((l.strip() for l in block.splitlines() if l.strip().startswith("drops:")), None)
    want_line = (f"drops: malformed {pd['malformed']}, auth_failed {pd['auth_failed']}, "
                 f"replay {pd['replay']}")
    rep.equal(line, want_line, "show: the peer's drops, non-zero reasons only")

    rc, text, err = tool(build, "status", "-s", sock, "--format", "prometheus")
    rep.require(rc == 0, "status --format prometheus exits 0", err)
    a_if = interface_of("a")
    for reason, n in pd.items():
        sample = (f'esptun_peer_drops_total{{interface="{a_if}",peer="other",reason="{reason}"}} '
                  f"{n}")
        rep.check(sample in text.splitlines(), f"prometheus: {sample}", text[-600:])
    rep.check(text.count("# TYPE esptun_peer_drops_total counter") == 1,
              "prometheus: esptun_peer_drops_total is one counter family")
    ping.expect_replies(rep, f"ping A -> {B_IN} after the forged datagrams", ping.run(gw_a.ns, B_IN, 3), 3)


def body(rep, build):
    check_command_line(rep, build)
    check_genkey(rep, build)
    check_genpsk(rep, build)
    tmp, gw_a, gw_b = check_genpair(rep, build)
    check_status_sockets(rep, build, tmp)
    check_show(rep, build, tmp)
    check_prometheus(rep, build, tmp)
    check_sighup(rep, build, tmp, gw_a)
    check_peer_drops(rep, build, tmp, gw_a, gw_b)


if __name__ == "__main__":
    report.main("cli", body)
