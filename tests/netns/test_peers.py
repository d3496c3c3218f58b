#!/usr/bin/python3
# test_peers.py - `esptun-bench peers`: one hub gateway's data path shared by
# several peers, each with its own SAs and one TCP flow into the hub (issue
# 19, "many peers on the data path"), scaled down for CI: 1 peer, then 8
# peers carried by 4 peer gateways (two each, so a gateway with several
# peers to one hub is covered too), 3 s measured each.
#
#   netns esptun-peers-PID-s0..s3  --veth-->  bridge in esptun-peers-PID-h
#   esptun-gateway, TCP senders              esptun-gateway (hub), receivers
#
# What is checked does not ride on the machine's speed: every flow's bytes
# arrive intact (count and hash at both ends) and every peer moved data in
# the measured window (none starved), the figures are there and add up,
# and nothing is left behind. The throughput ratio and the fairness figures
# are printed; their goals are judged in docs/scale.md from a quiet run.
"""esptun-bench peers: every peer's flow through the hub arrives, none starves."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import bench_run  # noqa: E402
import netns  # noqa: E402
import report  # noqa: E402

TIMEOUT = 300


def leftovers():
    """leftovers() - the tool's namespaces, temp folders and processes still present"""
    nss = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    left = [n for n in nss if n.startswith("esptun-peers-")]
    left += [d for d in os.listdir("/tmp") if d.startswith("esptun-peers-")]
    out = netns.run(["pgrep", "-f", "/tmp/esptun-peers-"], check=False).stdout.split()
    return left + [f"pid {p}" for p in out]


def body(rep, build):
    bench = bench_run.bench_program(build)
    tmp = netns.make_tempdir("peers")
    out_json = os.path.join(tmp, "peers.json")
    p, doc = bench_run.run([bench, "peers", "--counts", "1,8", "--spokes", "4", "--seconds", "3",
                            "--warmup", "1", "--json", out_json], TIMEOUT, out_json)
    rep.equal(p.returncode, 0, "exit status")
    rep.require(doc and isinstance(doc.get("rows"), list), "the JSON has rows", str(doc)[:300])
    rows = {r["peers"]: r for r in doc["rows"]}
    rep.equal(sorted(rows), [1, 8], "one row per count")
    rep.equal([rows[n]["peer_gateways"] for n in (1, 8)], [1, 4], "1 peer gateway, then 4 carrying two peers each")
    rep.equal(doc.get("congestion"), "cubic", "the flows' congestion control is stated")
    for n, r in sorted(rows.items()):
        tag = f"[{n} peers]"
        flows = r.get("flows", [])
        rep.check("error" not in r, f"{tag} ran without error", r.get("error", ""))
        rep.equal(len(flows), n, f"{tag} one flow per peer")
        rep.check(flows and all(f["intact"] and f["bytes"] > 0 and "error" not in f for f in flows),
                  f"{tag} every flow arrived intact: count and hash equal at both ends "
                  f"({sum(f['bytes'] for f in flows)} bytes in all)", json.dumps(flows)[:600])
        rates = sorted(f["mbit"] for f in flows)
        rep.check(flows and rates[0] > 0,
                  f"{tag} every peer moved data while measured: slowest {rates[0] if rates else None}, "
                  f"fastest {rates[-1] if rates else None} Mbit/s")
        rep.check(abs(sum(rates) - r["aggregate_mbit"]) <= 0.01 * r["aggregate_mbit"] + 1,
                  f"{tag} the aggregate {r['aggregate_mbit']} Mbit/s is the flows' sum")
        rep.check(0 < r["jain"] <= 1.0001 and 0 < r["min_share"] <= 1.0001,
                  f"{tag} fairness: slowest {r['min_share']} of a fair share, Jain's index {r['jain']}")
        rep.check(r["hub_cpu_s"] > 0 and r["hub_cpu_s_per_gb"] > 0 and r["machine_busy_cpu_s"] > 0,
                  f"{tag} the hub's CPU {r['hub_cpu_s']} s ({r['hub_cpu_s_per_gb']} s per GB); the machine "
                  f"busy {r['machine_busy_cpu_s']} s")
        rep.check(r["hub_workers"] >= 1 and len(r["hub_worker_udp_rx_packets"]) == r["hub_workers"]
                  and sum(r["hub_worker_udp_rx_packets"]) > 0,
                  f"{tag} the hub's {r['hub_workers']} worker(s) received "
                  f"{r['hub_worker_udp_rx_packets']} packets")
    # One peer gets one worker (workers = 0 starts at most one per peer);
    # eight get one per CPU.
    rep.equal(rows[1]["hub_workers"], 1, "[1 peer] the hub runs one worker for its one peer")
    rep.check(rows[8]["hub_workers"] == min(8, os.cpu_count() or 1),
              f"[8 peers] the hub runs {rows[8]['hub_workers']} workers (one per CPU)")
    m = re.search(r"8 peers: aggregate (\d+)% of the single peer's; slowest peer (\d+)% of a fair share",
                  p.stdout)
    rep.check(m, "the table states the ratio to the single peer and the slowest peer's share")
    rep.check(not leftovers(), "nothing left behind", str(leftovers()))


if __name__ == "__main__":
    report.main("netns/peers", body, tools=("ip",))
