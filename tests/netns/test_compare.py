#!/usr/bin/python3
# test_compare.py - `esptun-bench compare --quick` with every subject: each
# peer must be installed and carry traffic, each row must say the version of
# what it measured, the JSON, CSV and SVG it writes must agree, and nothing
# it created may be left behind. The kernel's own WireGuard and XFRM ESP are
# measured where this kernel has them; a skip must agree with the test's own
# probe of the kernel.
#
#   netns esptun-cmp-PID-a                       netns esptun-cmp-PID-b
#  +---------------------------------+          +---------------------------------+
#  | veth cuPIDa 10.203.0.1 ---------- veth ---- cuPIDb 10.203.0.2             |
#  | esptun  10.99.1.1  (udp 4501)   |          | esptun  10.99.1.2               |
#  | wg-go   10.99.3.1  (udp 51820)  |          | wg-go   10.99.3.2               |
#  | ovpn    10.99.4.1 / 10.99.5.1   |          | ovpn    10.99.4.2 / 10.99.5.2   |
#  | charon  10.99.6.1  (udp 500/4500)|         | charon  10.99.6.2               |
#  | kernel wg 10.99.9.1 (udp 51830) |          | kernel wg 10.99.9.2             |
#  | kernel ESP 10.99.10.1 (proto 50)|          | kernel ESP 10.99.10.2           |
#  +---------------------------------+          +---------------------------------+
#
# The tool builds all of this itself; the test only runs it and inspects
# what it wrote and what it left. A peer that is not installed is a failure,
# not a skip. esptun-vhost may be skipped only when /dev/vhost-net cannot be
# opened on this machine.
"""esptun-bench compare --quick: every subject measured, outputs consistent, no leftovers."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import bench_run  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402
from netns import TestError  # noqa: E402

SUBJECTS = ["veth", "esptun-direct", "esptun-vhost", "wireguard-go", "openvpn-gcm", "openvpn-cbc",
            "strongswan", "kernel-wireguard", "kernel-esp"]
KERNEL_SUBJECTS = ("kernel-wireguard", "kernel-esp")
# What each subject's "version" must look like.
VERSION_RE = {"veth": r"linux \S+", "esptun-direct": r"\d+\.\d+\.\d+", "esptun-vhost": r"\d+\.\d+\.\d+",
              "wireguard-go": r"v\d+\.\d+\.\d+", "openvpn-gcm": r"2\.\d+\.\d+", "openvpn-cbc": r"2\.\d+\.\d+",
              "strongswan": r"\d+\.\d+\.\d+", "kernel-wireguard": r"linux \S+", "kernel-esp": r"linux \S+"}
TIMEOUT = 240
SVG_NS = "{http://www.w3.org/2000/svg}"


def vhost_usable():
    """vhost_usable() - can this machine open /dev/vhost-net (as the tool checks)?"""
    try:
        os.close(os.open("/dev/vhost-net", os.O_RDWR))
        return True
    except OSError:
        return False


def kernel_has(what):
    """kernel_has() - (True, "") when this kernel makes a wireguard link or takes an
    AES-GCM ESP state ("wireguard" / "esp"), tried in a throw-away namespace; else
    (False, what ip said)."""
    ns = f"esptun-probe-{os.getpid()}"
    netns.run(["ip", "netns", "add", ns])
    try:
        if what == "wireguard":
            cmd = ["link", "add", "probe0", "type", "wireguard"]
        else:
            cmd = ["xfrm", "state", "add", "src", "10.0.0.1", "dst", "10.0.0.2", "proto", "esp",
                   "spi", "0x101", "mode", "tunnel", "aead", "rfc4106(gcm(aes))", "0x" + "1" * 72, "128"]
        p = netns.run(["ip", "-n", ns, *cmd], check=False)
        return p.returncode == 0, p.stderr.strip()
    finally:
        netns.run(["ip", "netns", "del", ns], check=False)


def live_pids(names):
    """live_pids() - pids of non-zombie processes whose command name is in names."""
    pids = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2:].split()[0]
        if comm in names and state != "Z":
            pids.add(int(d))
    return pids


PEER_PROCS = ("charon", "openvpn", "wireguard-go", "iperf3")


def gateway_pids(run_id):
    """gateway_pids() - esptun-gateway processes started by run run_id (its
    configs live in /tmp/esptun-cmp-RUNID-*)."""
    out = netns.run(["pgrep", "-f", f"esptun-gateway run -c /tmp/esptun-cmp-{run_id}-"],
                    check=False).stdout
    return out.split()


def netns_inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def not_elsewhere(pids, run_id):
    """not_elsewhere() - the pids that may be this run's: all but those living
    in a named network namespace of somebody else (another test on the same
    machine starting its own charon or iperf3 meanwhile). A process the run
    left behind sits in the root namespace or in one of the run's, which is
    unnamed once the run deleted it."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        names = []
    others = {netns_inode(f"/run/netns/{n}") for n in names
              if not n.startswith(f"esptun-cmp-{run_id}-")} - {None}
    return {p for p in pids if netns_inode(f"/proc/{p}/ns/net") not in others}


def check_nothing_left(rep, tag, run_id, before):
    """check_nothing_left() - no namespace, root link, wireguard socket, temp folder or
    process of run run_id remains."""
    after = root_state()
    rep.check(not any(n.startswith(f"esptun-cmp-{run_id}-") for n in after[0]),
              f"[{tag}] no esptun-cmp-{run_id} namespace left", f"{sorted(after[0])}")
    rep.check(not any(run_id in link for link in after[1] - before[1]),
              f"[{tag}] no interface of this run left in the root namespace",
              f"{sorted(after[1] - before[1])}")
    rep.check(not any(run_id in s for s in after[2]), f"[{tag}] no wireguard-go UAPI socket left",
              f"{sorted(after[2])}")
    rep.check(not any(d.startswith(f"esptun-cmp-{run_id}-") for d in after[3]),
              f"[{tag}] no temp folder left", f"{sorted(after[3])}")
    new = not_elsewhere(live_pids(PEER_PROCS) - before[4], run_id)
    rep.check(not new, f"[{tag}] no charon, openvpn, wireguard-go or iperf3 process left",
              f"pids {sorted(new)}")
    left = gateway_pids(run_id)
    rep.check(not left, f"[{tag}] no esptun-gateway of this run left", f"pids {left}")


def root_state():
    """root_state() - namespaces, root-namespace links and wireguard sockets, for the
    before/after comparison."""
    nss = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    links = set(netns.run(["ip", "-o", "link", "show"]).stdout.split("\n"))
    links = {line.split(":")[1].strip().split("@")[0] for line in links if ":" in line}
    socks = set(os.listdir("/var/run/wireguard")) if os.path.isdir("/var/run/wireguard") else set()
    tmps = {d for d in os.listdir("/tmp") if d.startswith("esptun-cmp-")}
    return nss, links, socks, tmps, live_pids(PEER_PROCS)


def body(rep, build):
    bench = bench_run.bench_program(build)
    tmp = netns.make_tempdir("compare")
    before = root_state()

    rep.section("esptun-bench compare --quick --duration 1 (all peers)")
    p, _ = bench_run.run([bench, "compare", "--quick", "--duration", "1", "--out-dir", tmp], TIMEOUT)
    rep.check(p.returncode == 0, "esptun-bench compare --quick exits 0",
              f"exit {p.returncode}")
    m = re.search(r"esptun-cmp-(\d+)-a", p.stdout)
    rep.require(m, "the tool names its namespaces esptun-cmp-PID-{a,b}")
    run_id = m.group(1)

    rep.section("time left, as it goes")
    first = re.search(r"^measuring .*; about (?:(\d+) min )?(\d+) s\)$", p.stdout, re.M)
    took = re.search(r"^measured in (?:(\d+) min )?(\d+) s$", p.stdout, re.M)
    lefts = re.findall(r"\[about (?:\d+ min )?\d+ s left\]$", p.stdout, re.M)
    rep.check(first and took, "an estimate before the tests and the time they took",
              p.stdout[-600:])
    if first and took:
        est = int(first.group(1) or 0) * 60 + int(first.group(2))
        real = int(took.group(1) or 0) * 60 + int(took.group(2))
        rep.check(real / 3 <= est <= real * 3, f"the first estimate ({est} s) within 3x of the time "
                  f"the tests took ({real} s)")
    rep.check(len(lefts) == 6, "each test but the last ends with the time left", f"{len(lefts)} lines")

    rep.section("JSON")
    with open(os.path.join(tmp, "compare.json")) as f:
        doc = json.load(f)
    rep.require(isinstance(doc, dict) and isinstance(doc.get("subjects"), list),
                "compare.json parses: an object with a \"subjects\" list", str(doc)[:300])
    subjects = {s["name"]: s for s in doc["subjects"]}
    rep.equal(sorted(subjects), sorted(SUBJECTS), "compare.json lists every subject")
    kernel = {"kernel-wireguard": kernel_has("wireguard"), "kernel-esp": kernel_has("esp")}
    for name in SUBJECTS:
        s = subjects.get(name)
        if s is None:
            continue
        rep.check(re.fullmatch(VERSION_RE[name], s.get("version", "")),
                  f"{name}: version {s.get('version')!r}", f"want {VERSION_RE[name]}")
        if name not in KERNEL_SUBJECTS and name != "veth":
            rep.check(os.access(s.get("program", ""), os.X_OK),
                      f"{name}: program {s.get('program')!r} is the one that ran")
        if name == "esptun-vhost" and not vhost_usable():
            rep.check(s["status"] == "skipped" and "/dev/vhost-net" in s["reason"],
                      f"{name}: skipped because /dev/vhost-net cannot be opened here",
                      f"status {s['status']!r}, reason {s['reason']!r}")
            continue
        if name in KERNEL_SUBJECTS and not kernel[name][0]:
            # The tool quotes ip's error; for ESP it may be the one of its
            # second try (AES-CBC), which tells "no ESP" from "no GCM".
            said = kernel[name][1] if name == "kernel-wireguard" else "(ip xfrm state add: "
            rep.check(s["status"] == "skipped" and s["reason"].startswith("kernel ")
                      and said in s["reason"],
                      f"{name}: skipped because this kernel lacks it ({kernel[name][1]})",
                      f"status {s['status']!r}, reason {s['reason']!r}")
            continue
        if not rep.check(s["status"] == "ok", f"{name}: status ok (installed and started)",
                         f"status {s['status']!r}: {s['reason']}"):
            continue
        rep.check((s["tcp1_gbps"] or 0) > 0, f"{name}: TCP-1 {s['tcp1_gbps']} Gbit/s > 0")
        rep.check((s["tcp4_gbps"] or 0) > 0, f"{name}: TCP-4 {s['tcp4_gbps']} Gbit/s > 0")
        rep.check(s["ping_p50_ms"] is not None and s["ping_p50_ms"] > 0,
                  f"{name}: ping p50 {s['ping_p50_ms']} ms")
        rep.check(s["udp_rr_p50_ms"] is not None and s["udp_rr_p50_ms"] > 0,
                  f"{name}: UDP request/response p50 {s['udp_rr_p50_ms']} ms")
        rep.check(s["udp1400_gbps"] is not None, f"{name}: UDP-1400 {s['udp1400_gbps']} Gbit/s")
        for key, what in (("ping_under_tcp1", "one TCP stream"),
                          ("ping_under_tcp4_udp", "four TCP streams and a UDP flow")):
            u = s.get(key) or {}
            rep.check(u.get("received", 0) > 0 and (u.get("p50_ms") or 0) > 0
                      and (u.get("p99_ms") or 0) >= u.get("p50_ms", 0)
                      and (u.get("load_gbps") or 0) > 0,
                      f"{name}: ping beside {what}: {u.get('received')}/{u.get('sent')} replies, "
                      f"p50/p99 {u.get('p50_ms')}/{u.get('p99_ms')} ms, the load moved "
                      f"{u.get('load_gbps')} Gbit/s", str(u))
        if name == "veth" or name in KERNEL_SUBJECTS:
            rep.check(s["cpu_s_per_gb"] is None, f"{name}: no CPU/GB figure (no tunnel process)")
        else:
            rep.check((s["cpu_s_per_gb"] or 0) > 0, f"{name}: CPU {s['cpu_s_per_gb']} s/GB > 0")
        # The machine's CPU per GB covers the tunnel's own, for every subject
        # (both read in clock ticks: 10% for the rounding of a short test).
        rep.check((s["machine_cpu_s_per_gb"] or 0) > 0
                  and (s["machine_cpu_s_per_gb"] or 0) >= 0.9 * (s["cpu_s_per_gb"] or 0),
                  f"{name}: the machine's CPU {s['machine_cpu_s_per_gb']} s/GB > 0, not below "
                  f"the tunnel's ({s['cpu_s_per_gb']})")
        rep.check(not s["errors"], f"{name}: no test failed", "; ".join(s["errors"]))
    peers = {q["peer"] for q in doc["ratios"]["peers"]}
    rep.check({"wireguard-go", "openvpn-gcm", "openvpn-cbc", "strongswan"} <= peers,
              "ratios of esptun-direct to every other tunnel", f"got {sorted(peers)}")
    table = [line for line in p.stdout.splitlines() if line.startswith("wireguard-go ")]
    rep.check(table and subjects["wireguard-go"]["version"] in table[-1],
              "the table shows wireguard-go's version", "\n".join(table))

    rep.section("CSV")
    with open(os.path.join(tmp, "compare.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    rep.equal(len(rows), len(doc["subjects"]), "compare.csv has one row per JSON subject")
    rep.equal([r["subject"] for r in rows], [s["name"] for s in doc["subjects"]],
              "CSV rows in the JSON's order")
    rep.equal([r["version"] for r in rows], [s["version"] for s in doc["subjects"]],
              "CSV versions as in the JSON")
    # The CSV has 4 decimals, the JSON 6 significant digits: equal within rounding.
    differ = [f"{r['subject']}: CSV {r['ping_tcp1_p99_ms']!r}, JSON {s['ping_under_tcp1']['p99_ms']}"
              for r, s in zip(rows, doc["subjects"])
              if (r["ping_tcp1_p99_ms"] == "") != (s["ping_under_tcp1"]["p99_ms"] is None)
              or (r["ping_tcp1_p99_ms"] != "" and abs(float(r["ping_tcp1_p99_ms"])
                                                      - s["ping_under_tcp1"]["p99_ms"]) > 2e-4)]
    rep.check(not differ, "CSV ping-under-TCP-1 p99 as in the JSON", "; ".join(differ))
    differ = [f"{r['subject']}: CSV {r['machine_cpu_s_per_gb']!r}, JSON {s['machine_cpu_s_per_gb']}"
              for r, s in zip(rows, doc["subjects"])
              if (r["machine_cpu_s_per_gb"] == "") != (s["machine_cpu_s_per_gb"] is None)
              or (r["machine_cpu_s_per_gb"] != "" and abs(float(r["machine_cpu_s_per_gb"])
                                                          - s["machine_cpu_s_per_gb"]) > 2e-4)]
    rep.check(not differ, "CSV machine CPU per GB as in the JSON", "; ".join(differ))

    rep.section("SVG")
    tree = ET.parse(os.path.join(tmp, "compare.svg"))
    rep.check(tree.getroot().tag == SVG_NS + "svg", "compare.svg is well-formed XML with an <svg> root")
    groups = [g for g in tree.iter(SVG_NS + "g") if g.get("class") == "subject"]
    rep.equal([g.get("data-subject") for g in groups], [s["name"] for s in doc["subjects"]],
              "one bar group per subject")
    for g in groups:
        if subjects[g.get("data-subject")]["status"] == "ok":
            bars = {r.get("class") for r in g.iter(SVG_NS + "rect")}
            rep.check({"tcp1", "tcp4", "p50", "p99"} <= bars,
                      f"{g.get('data-subject')}: TCP-1/TCP-4 and ping p50/p99 bars", f"got {bars}")

    rep.section("nothing left behind")
    check_nothing_left(rep, "finished run", run_id, before)

    rep.section("variants measured only when named: esptun-direct-busypoll, -nowakepoll")
    before = root_state()
    variants = {"esptun-direct-busypoll": "busy_poll_us = 50",
                "esptun-direct-nowakepoll": "wake_poll_us = 0"}
    peers = ",".join(["esptun-direct", *variants])
    cmd = [bench, "compare", "--quick", "--duration", "1", "--peers", peers, "--out-dir",
           os.path.join(tmp, "variants")]
    p, _ = bench_run.run(cmd, TIMEOUT)
    rep.check(p.returncode == 0, f"compare --peers {peers} exits 0", f"exit {p.returncode}: {p.stderr}")
    with open(os.path.join(tmp, "variants", "compare.json")) as f:
        named = {s["name"]: s for s in json.load(f)["subjects"]}
    rep.equal(sorted(named), sorted(["esptun-direct", *variants]), "exactly the named subjects")
    for name, setting in variants.items():
        v = named.get(name, {})
        rep.check(v.get("status") == "ok" and (v.get("tcp1_gbps") or 0) > 0 and not v.get("errors"),
                  f"{name}: started and carried TCP", f"{v}")
        rep.check(setting in json.dumps(v), f"its row says {setting}", f"{v}")
    # The terminal table keeps its columns for the long names.
    rows = [line for line in p.stdout.splitlines()
            if line.startswith("esptun-direct") and " aes256-gcm" in line]
    cols = {line.index(" aes256-gcm") for line in rows}
    rep.check(len(rows) == 3 and len(cols) == 1, "the table's rows line up", "\n".join(rows))
    m = re.search(r"esptun-cmp-(\d+)-a", p.stdout)
    rep.require(m, "the variant run started")
    check_nothing_left(rep, "variant run", m.group(1), before)

    rep.section("--wireguard-go: a program that is not there is a usage error")
    p = subprocess.run([bench, "compare", "--wireguard-go", "no-such-wireguard-go"],
                       capture_output=True, text=True, timeout=60)
    rep.check(p.returncode == 2 and "no-such-wireguard-go: not found" in p.stderr,
              "exit 2, naming the program", f"exit {p.returncode}: {p.stderr}")

    rep.section("SIGTERM in the middle of the measurements, two wireguard-go builds up")
    # The same build twice under two paths: one row each, told apart by
    # number once their versions are alike, each on its own subnet and port.
    wg = shutil.which("wireguard-go")
    before = root_state()
    proc = subprocess.Popen([bench, "compare", "--quick", "--peers", "esptun,wireguard-go,strongswan",
                             "--wireguard-go", "wireguard-go", "--wireguard-go", os.path.realpath(wg),
                             "--out-dir", os.path.join(tmp, "term")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        while True:
            line = netns.read_line(proc.stdout, 60)
            if not line:
                break
            lines.append(line)
            if line.startswith("measuring"):
                proc.terminate()
                break
        rest, _ = proc.communicate(timeout=60)
        lines.append(rest)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise TestError("esptun-bench compare did not stop within 60 s of SIGTERM")
    text = "".join(lines)
    print(text, flush=True)
    m = re.search(r"esptun-cmp-(\d+)-a", text)
    rep.require(m, "the interrupted run started")
    version = subprocess.run([wg, "--version"], capture_output=True, text=True).stdout.split()[1]
    for name in (f"wireguard-go-{version.lstrip('v')}", "wireguard-go-2"):
        rep.check(re.search(rf"^  {re.escape(name)} +up after .*; {re.escape(version)}\)$", text, re.M),
                  f"{name} up, its version on its line")
    rep.equal(proc.returncode, 130, "SIGTERM: exit status")
    check_nothing_left(rep, "SIGTERM", m.group(1), before)


if __name__ == "__main__":
    report.main("compare", body, tools=("ip", "iperf3", "ping", "pgrep"))
