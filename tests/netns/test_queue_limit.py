#!/usr/bin/python3
# test_queue_limit.py - the receive queue limit (datapath/codel.hpp) and the
# send-side flow queue (datapath/flow_queue.hpp) of issue 20, with a real TCP
# stream through two gateways.
#
#   netns A: esptun ula 10.214.0.1 ==veth== ulb 10.214.0.2 esptun :netns B
#            iperf3 -c 10.99.0.2 (TCP with ECN, A -> B), ping -i 0.01 A -> B
#
# Five runs of one saturating stream:
#   1. the defaults, as a user gets them: the status shows the receive limit
#      and the flow queue on, and the probe latency, B's sampled sojourn and
#      the throughput are printed;
#   2. the receive limit (A's flow queue off) with a 2 ms interval while B's
#      gateway is stopped three times for 50 ms (SIGSTOP): each pause leaves
#      a queue in B's socket that takes longer than the interval to drain,
#      so the limit must engage and mark the ECN-capable stream; the marks
#      must reach B's TCP (IpExtInCEPkts in netns B) and the stream go on;
#   3. the same pauses with both off: nothing engages, nothing is marked or
#      dropped, and B's TCP sees no CE;
#   4. the flow queue (B's limit off) while A's gateway runs 10 ms out of
#      every 40 (SIGSTOP/SIGCONT): it sends slower than TCP offers, so what
#      A reads ahead waits in its flow queue through each stop; the queue
#      must engage, mark the stream CE in the inner header before
#      encryption, and B's TCP must receive the marks;
#   5. the same duty cycle with both off: no CE anywhere.
# What decides is counted, not timed: a pause makes the queue whatever the
# machine's speed.
"""The receive queue limit and the send flow queue under a TCP stream: on by
default, engaged by a standing queue, absent when switched off."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import netns  # noqa: E402
import ping  # noqa: E402
import report  # noqa: E402
import static_pair  # noqa: E402
from netns import TestError  # noqa: E402

LOAD_S = 6
RAMP_S = 1.0  # before the probes and pauses start
PROBES = int((LOAD_S - RAMP_S - 1) * 100)  # ping -i 0.01
PAUSES = 3
PAUSE_S = 0.05
DUTY_STOP_S, DUTY_RUN_S, DUTY_S = 0.03, 0.01, 3.0  # A's duty cycle (case 4, 5)
RTT = re.compile(r"time=([0-9.]+) ms")


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else None


def in_ce_packets(ns):
    """IpExtInCEPkts of ns: IP packets its stack received CE-marked."""
    out = ns.run("cat", "/proc/net/netstat").stdout.splitlines()
    for names, values in zip(out[::2], out[1::2]):
        if names.startswith("IpExt:"):
            return dict(zip(names.split()[1:], map(int, values.split()[1:]))).get("InCEPkts", 0)
    raise TestError("no IpExt line in /proc/net/netstat")


def run_case(rep, build, tmp, tag, idx, a_extra, b_extra, pause):
    """pause: None, "b" (B stopped PAUSES times) or "a" (A's duty cycle).
    Returns the figures and A's and B's status."""
    def ecn_tcp(a, b):  # ECN-capable TCP both ways (Linux's default only accepts it)
        for ns in (a, b):
            ns.run("sysctl", "-qw", "net.ipv4.tcp_ecn=1")
    a, b, ea, eb = static_pair.start(rep, build, tmp, "ql", idx, "10.214.0", 0x7000, "q",
                                     a_opts={"extra": a_extra}, b_opts={"extra": b_extra},
                                     before_start=ecn_tcp)
    server = None
    try:
        res = ping.run(a, "10.99.0.2")
        rep.check(res.returncode == 0, f"[{tag}] ping A -> B through the tunnel", res.output[-200:])
        ce_before = in_ce_packets(b)
        server = b.spawn("iperf3", "-s", "-1", "-B", "10.99.0.2", "-p", "5250",
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        client = a.spawn("iperf3", "-c", "10.99.0.2", "-p", "5250", "-t", str(LOAD_S), "-J",
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        samples = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    samples.append(eb.status(timeout=2)["queue"]["sojourn_us"])
                except (TestError, OSError, KeyError, ValueError):
                    pass
                stop.wait(0.1)
        time.sleep(RAMP_S)
        th = threading.Thread(target=sample, daemon=True)
        if not pause:
            th.start()
        pinger = a.spawn("ping", "-4", "-i", "0.01", "-c", str(PROBES), "-W", "1", "10.99.0.2",
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(PAUSES if pause == "b" else 0):
            time.sleep(0.8)
            os.kill(eb.proc.pid, signal.SIGSTOP)
            time.sleep(PAUSE_S)
            os.kill(eb.proc.pid, signal.SIGCONT)
        if pause == "a":
            until = time.monotonic() + DUTY_S
            while time.monotonic() < until:
                os.kill(ea.proc.pid, signal.SIGSTOP)
                time.sleep(DUTY_STOP_S)
                os.kill(ea.proc.pid, signal.SIGCONT)
                time.sleep(DUTY_RUN_S)
        out, _ = pinger.communicate(timeout=LOAD_S + 30)
        stop.set()
        if th.is_alive():
            th.join(5)
        cout, _ = client.communicate(timeout=LOAD_S + 30)
        rtts = [float(m) for m in RTT.findall(out)]
        try:
            gbps = json.loads(cout)["end"]["sum_received"]["bits_per_second"] / 1e9
        except (ValueError, KeyError, TypeError):
            gbps = 0.0
        st, st_a = eb.status(), ea.status()
        q, tq = st["queue"], st_a["tx_queue"]
        fig = {"gbps": round(gbps, 2), "probes": len(rtts), "p50_ms": pct(rtts, 0.5),
               "p99_ms": pct(rtts, 0.99), "sojourn_us_p50": pct(samples, 0.5),
               "sojourn_us_p90": pct(samples, 0.9), "rx_engaged": q["engaged"],
               "rx_marks": q["marks"], "rx_drops": q["drops"], "tx_engaged": tq["engaged"],
               "tx_marks": tq["marks"], "tx_drops": tq["drops"],
               "tx_overflow": tq["overflow_drops"], "ce_at_b": in_ce_packets(b) - ce_before}
        rep.info(f"[{tag}] " + json.dumps(fig))
        rep.check(gbps > 0.1, f"[{tag}] the TCP stream ran: {gbps:.2f} Gbit/s", cout[-500:])
        return fig, st_a, st
    finally:
        for e in (ea, eb):
            if e.alive():
                os.kill(e.proc.pid, signal.SIGCONT)
        if server and server.poll() is None:
            server.kill()
            server.wait()
        static_pair.stop(rep, tag, ea, eb)


def body(rep, build):
    tmp = netns.make_tempdir("queue")
    off = {"queue_target_us": 0}
    rep.section("the defaults, one saturating TCP stream")
    fig, st_a, st = run_case(rep, build, tmp, "defaults", 0, {}, {}, pause=None)
    q = st["queue"]
    rep.check(q["limit"] and q["target_us"] == 1000 and q["interval_ms"] == 20,
              f"[defaults] the status shows the limit on: target {q['target_us']} us, "
              f"interval {q['interval_ms']} ms", json.dumps(q))
    rep.check(st_a["tx_queue"]["on"] and st["tx_queue"]["on"],
              "[defaults] both gateways send from a flow queue", json.dumps(st_a["tx_queue"]))
    rep.equal(q["drops"] + st["tx_queue"]["drops"], st["drops"]["queue_delay"],
              "[defaults] B's receive and send queue drops are the queue_delay drop reason")
    rep.equal(st_a["tx_queue"]["overflow_drops"], st_a["drops"]["queue_overflow"],
              "[defaults] A's flow queue overflow drops are the queue_overflow drop reason")
    rep.info(f"[defaults] ping beside the stream p50/p99 {fig['p50_ms']}/{fig['p99_ms']} ms; "
             f"B's sampled sojourn p50/p90 {fig['sojourn_us_p50']}/{fig['sojourn_us_p90']} us")

    rep.section(f"a standing queue: B stopped {PAUSES} times for {PAUSE_S * 1000:.0f} ms, limit on")
    fig, st_a, st = run_case(rep, build, tmp, "limit", 1, off, {"queue_interval_ms": 2}, pause="b")
    q = st["queue"]
    rep.check(q["engaged"] >= 1 and q["marks"] >= 1,
              f"[limit] it engaged ({q['engaged']} times) and marked the ECN-capable stream "
              f"({q['marks']} marked CE, {q['drops']} dropped)", json.dumps(q))
    rep.check(fig["ce_at_b"] >= 1,
              f"[limit] the marks reached the inner packets: B's stack received {fig['ce_at_b']} "
              "CE-marked packets (IpExtInCEPkts)", json.dumps(fig))

    rep.section("the same pauses, queue_target_us = 0 on both")
    fig, st_a, st = run_case(rep, build, tmp, "nolimit", 2, off, off, pause="b")
    q = st["queue"]
    rep.check(not q["limit"] and q["engaged"] == 0 and q["marks"] == 0 and q["drops"] == 0,
              "[nolimit] the status shows no limit; never engaged, nothing marked or dropped",
              json.dumps(q))
    rep.equal(fig["ce_at_b"], 0, "[nolimit] B's stack received no CE-marked packet")

    rep.section(f"a standing queue in A: A runs {DUTY_RUN_S * 1000:.0f} ms of every "
                f"{(DUTY_RUN_S + DUTY_STOP_S) * 1000:.0f}, flow queue on")
    fig, st_a, st = run_case(rep, build, tmp, "flowq", 3, {}, off, pause="a")
    tq = st_a["tx_queue"]
    rep.check(tq["on"] and tq["engaged"] >= 1 and tq["marks"] >= 1,
              f"[flowq] A's flow queue engaged ({tq['engaged']} times) and marked the ECN-capable "
              f"stream ({tq['marks']} marked CE, {tq['drops']} dropped, "
              f"{tq['overflow_drops']} shed when full)", json.dumps(tq))
    rep.equal(st["queue"]["marks"], 0, "[flowq] B's receive limit (off) marked nothing")
    rep.check(fig["ce_at_b"] >= 1,
              f"[flowq] the marks went inside the encryption: B's stack received {fig['ce_at_b']} "
              "CE-marked packets", json.dumps(fig))

    rep.section("the same duty cycle, queue_target_us = 0 on both")
    fig, st_a, st = run_case(rep, build, tmp, "noflowq", 4, off, off, pause="a")
    tq = st_a["tx_queue"]
    rep.check(not tq["on"] and tq["engaged"] == 0 and tq["marks"] == 0,
              "[noflowq] A's status shows no flow queue; nothing engaged or marked", json.dumps(tq))
    rep.equal(fig["ce_at_b"], 0, "[noflowq] B's stack received no CE-marked packet")


if __name__ == "__main__":
    report.main("netns/queue_limit", body, tools=("ip", "ping", "iperf3"))
