#!/usr/bin/python3
# test_privileges.py - a running IKE gateway and client have given up root
# (service/privileges.cpp, platform/privileges.cpp): /proc/PID/status shows
# user nobody, CAP_NET_ADMIN as the only capability (and CAP_SYS_NICE for the
# client's real-time workers; effective, permitted, bounding), no_new_privs and seccomp filter mode, and yet traffic flows,
# the client's CHILD_SA and IKE SA rekey, and both stop cleanly (routes and
# addresses removed with the CAP_NET_ADMIN they kept). Then the opt-out:
# with drop_privileges = false the same gateway keeps root, its
# capabilities and no filter. The root helpers (the gateway's config reader
# for reloads, the client's DNS helper) hold no copy of the PSK: the search
# of memory that finds it in the gateway and the client must not find it in
# them.
#
#      netns C (et-priv-PID-c)                  netns G (et-priv-PID-g)
#    +--------------------------------+       +--------------------------------+
#    | esptun-client                  |       | esptun-gateway                 |
#    |   tun pcN 10.78.0.10/32        |       |   tun pgN 10.78.0.1/24         |
#    |   (assigned), rekey_time 5 s   |       |   address_pool 10.78.0.0/24    |
#    | ulc 10.204.0.2/24 ------------ veth -- ulg 10.204.0.1/24               |
#    +--------------------------------+       +--------------------------------+
#
# The seccomp filter's refusal of a forbidden call is shown by the unit test
# (tests/unit/platform/privileges_test.cpp); here it is the absence of a
# refusal under real traffic and rekeying that counts: a call missing from
# the list would have stopped a process with SIGSYS.
#
# usage: test_privileges.py BUILD_DIR   (root)
"""A running gateway and client have dropped privileges, and still work."""

import os
import pwd
import subprocess
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping  # noqa: E402
import report  # noqa: E402
from netns import TestError  # noqa: E402

GW_UL, C_UL = "10.204.0.1", "10.204.0.2"
GW_IN, POOL, VIP = "10.78.0.1", "10.78.0.0/24", "10.78.0.10"
PSK = "privileges-test-pre-shared-key-0123"
NET_ADMIN = 1 << 12  # CAP_NET_ADMIN, capabilities(7)
SYS_NICE = 1 << 23  # CAP_SYS_NICE: kept for worker_priority = "realtime", a client's default
KEPT = {"gateway": NET_ADMIN, "client": NET_ADMIN | SYS_NICE}
KEPT_NAMES = {"gateway": "CAP_NET_ADMIN", "client": "CAP_NET_ADMIN and CAP_SYS_NICE"}
KEPT_LOG = {"gateway": "cap_net_admin;", "client": "cap_net_admin, cap_sys_nice;"}
REKEY_TIMEOUT = 20   # rekey_time 5 and ike_rekey_time 6 (+ jitter) -> both well within


def proc_status(pid):
    """The fields of /proc/PID/status as a dict of strings."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def check_dropped(rep, who, pid):
    st = proc_status(pid)
    nobody = pwd.getpwnam("nobody")
    rep.equal(st["Uid"].split(), [str(nobody.pw_uid)] * 4, f"{who}: Uid (real, effective, saved, fs)")
    rep.equal(st["Gid"].split(), [str(nobody.pw_gid)] * 4, f"{who}: Gid")
    rep.equal(st.get("Groups", ""), "", f"{who}: supplementary groups")
    for cap in ("CapEff", "CapPrm", "CapBnd"):
        rep.equal(int(st[cap], 16), KEPT[who], f"{who}: {cap} is {KEPT_NAMES[who]} alone")
    for cap in ("CapInh", "CapAmb"):
        rep.equal(int(st[cap], 16), 0, f"{who}: {cap} empty")
    rep.equal(st["NoNewPrivs"], "1", f"{who}: NoNewPrivs")
    rep.equal(st["Seccomp"], "2", f"{who}: Seccomp (2 = filter)")
    # A dumpable process's /proc/PID files belong to its (now nobody's) uid,
    # a non-dumpable one's to root (proc(5)): no core dump holds a key. The
    # uid change sets dumpable from fs.suid_dumpable, so on a host where that
    # is 0 this holds even without esptun's own call after the drop; the
    # call itself is tested in tests/unit/platform/process_test.cpp.
    rep.equal(os.stat(f"/proc/{pid}/status").st_uid, 0,
              f"{who}: not dumpable after the drop (/proc/PID owned by root)")
    tasks = os.listdir(f"/proc/{pid}/task")
    same = all(proc_status(f"{pid}/task/{t}")["Seccomp"] == "2" and
               int(proc_status(f"{pid}/task/{t}")["CapEff"], 16) == KEPT[who] for t in tasks)
    rep.check(same, f"{who}: all {len(tasks)} threads filtered and with {KEPT_NAMES[who]} only")


def log_line(ep, needle):
    return next((ln for ln in netns.tail(ep.log, 300).splitlines() if needle in ln), None)


def ike_sa(st):
    ike = st.get("ike") if isinstance(st.get("ike"), dict) else {}
    return next((s for s in ike.get("sas") or [] if isinstance(s, dict)
                 and s.get("state") == "established"), None)


def build(ctx, drop=True):
    tag = "priv" if drop else "privk"
    g = netns.Netns(netns.unique(tag, "g"))
    c = netns.Netns(netns.unique(tag, "c"))
    ctx.ns += [g, c]
    netns.veth(g, c, "ulg", "ulc", [f"{GW_UL}/24"], [f"{C_UL}/24"])
    sfx = f"{os.getpid() % 10000}{len(ctx.ns)}"
    gw_tunnel = {
        "interface": f"pg{sfx}", "addresses": [f"{GW_IN}/24"], "listen": f"{GW_UL}:4500",
        "ike_port": 500, "local_id": "gw.example", "address_pool": [POOL], "tun_io": "direct",
        "control_socket": os.path.join(ctx.tmp, f"g{sfx}.sock"),
        "state_dir": os.path.join(ctx.tmp, f"state-g{sfx}"),
        "drop_privileges": None if drop else False,  # None: the default
    }
    gw_peer = dict(name="alice", allowed_ips=[f"{VIP}/32"], psk=PSK, remote_id="alice@example.com")
    cl_tunnel = {
        "interface": f"pc{sfx}", "listen": f"{C_UL}:4500", "local_id": "alice@example.com",
        "tun_io": "direct", "control_socket": os.path.join(ctx.tmp, f"c{sfx}.sock"),
        "state_dir": os.path.join(ctx.tmp, f"state-c{sfx}"),
        "drop_privileges": None if drop else False,
    }
    cl_peer = dict(name="gw", endpoint=f"{GW_UL}:4500", allowed_ips=[POOL], psk=PSK,
                   remote_id="gw.example", rekey_time=5, ike_rekey_time=6)
    gcfg = conf.write_private(os.path.join(ctx.tmp, f"g{sfx}.toml"),
                              conf.render_ike_config(gw_tunnel, [gw_peer]))
    ccfg = conf.write_private(os.path.join(ctx.tmp, f"c{sfx}.toml"),
                              conf.render_ike_config(cl_tunnel, [cl_peer]))
    gw = esptun_proc.Endpoint(ctx.build, g, gcfg, os.path.join(ctx.tmp, f"gateway{sfx}.log"))
    cl = esptun_proc.Endpoint(ctx.build, c, ccfg, os.path.join(ctx.tmp, f"client{sfx}.log"),
                              "client")
    ctx.eps += [gw, cl]
    return g, c, gw, cl


def memory_holds(pid, needle):
    """memory_holds() - whether the private writable memory of process pid
    (heap, anonymous and data mappings: /proc/PID/maps and /proc/PID/mem,
    which root may read though the process is not dumpable) holds needle."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if len(fields) < 2 or not fields[1].startswith("rw"):
                continue
            if len(fields) >= 6 and fields[5] in ("[vvar]", "[vsyscall]"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                found = needle in mem.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue  # a mapping that went away or cannot be read
            if found:
                return True
    return False


def helper_of(pid, name):
    """The pid of a root helper of process pid (its child named name: the
    gateway's config reader, the client's DNS helper), or None."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pid:
            continue
        try:
            st = proc_status(int(entry))
        except OSError:
            continue
        if st.get("PPid") == str(pid) and st.get("Name") == name:
            return int(entry)
    return None


def check_helpers_hold_no_key(rep, gw, cl):
    """The root helpers (the gateway's config reader, the client's DNS
    helper) live as long as their process and must not hold a copy of the
    keys it loaded: they start before the config is read."""
    psk = PSK.encode()
    for who, ep, name, helper in (("gateway", gw, "esptun-gateway", "config reader"),
                                  ("client", cl, "esptun-client", "DNS helper")):
        pid = helper_of(ep.proc.pid, name)
        if not rep.check(pid is not None, f"{who}: its {helper} runs (a child process)"):
            continue
        rep.check(memory_holds(ep.proc.pid, psk),
                  f"{who}: its own memory holds the PSK (so the search can find it)")
        rep.check(not memory_holds(pid, psk),
                  f"{who}'s {helper} (pid {pid}): its memory holds no copy of the PSK")
        if who != "gateway":
            continue
        # A reload: the reader reads the config (the PSK with it) as root,
        # and must not keep it once the answer has gone.
        p = subprocess.run(ep.ns.cmd(ep.binary, "reload", "-c", ep.config), capture_output=True,
                           text=True, timeout=20)
        rep.check(p.returncode == 0, f"gateway: reload (exit {p.returncode})",
                  (p.stdout + p.stderr).strip())
        rep.check(not memory_holds(pid, psk),
                  f"gateway's {helper}: after the reload its memory holds no copy of the PSK")


def wait_rekeyed(cl):
    def ready():
        if not cl.alive():
            raise TestError(f"esptun-client exited with {cl.proc.returncode}; log:\n"
                            f"{netns.tail(cl.log, 15)}")
        sa = ike_sa(cl.status())
        return sa if sa and sa.get("child_rekeys", 0) >= 1 and sa.get("ike_rekeys", 0) >= 1 else None
    return netns.wait_until(ready, REKEY_TIMEOUT, interval=0.2,
                            what="a CHILD_SA and an IKE SA rekey in the client's status")


def dropped_case(rep, ctx):
    rep.section("privileges dropped (the default)")
    g, c, gw, cl = build(ctx)
    gw.start()
    cl.start()
    netns.wait_until(lambda: ike_sa(cl.status()), 10, interval=0.1, what="the client's IKE SA")
    for who, ep in (("gateway", gw), ("client", cl)):
        check_dropped(rep, who, ep.proc.pid)
        line = log_line(ep, "privileges: dropped to user nobody")
        rep.check(line is not None and KEPT_LOG[who] in line and "seccomp" in line,
                  f"{who} log: {line!r}", netns.tail(ep.log, 15))
    ping.expect_replies(rep, "ping C -> gateway through the tunnel", ping.run(c, GW_IN), 3)
    check_helpers_hold_no_key(rep, gw, cl)
    sa = wait_rekeyed(cl)
    rep.info(f"client: child_rekeys {sa.get('child_rekeys')}, ike_rekeys {sa.get('ike_rekeys')}")
    ping.expect_replies(rep, "ping C -> gateway after the rekeys", ping.run(c, GW_IN), 3)
    for who, ep in (("gateway", gw), ("client", cl)):
        rep.check(ep.alive(), f"{who} still running (no system call refused)", netns.tail(ep.log, 15))
    for who, ep, ns, tun in (("client", cl, c, "pc"), ("gateway", gw, g, "pg")):
        rc = ep.stop()
        rep.equal(rc, 0, f"{who}: SIGTERM -> exit code")
        links = ns.run("ip", "-o", "link", "show").stdout
        routes = ns.run("ip", "route", "show").stdout
        rep.check(f": {tun}" not in links and "10.78.0." not in routes,
                  f"{who}: tun, its addresses and routes removed", links + routes)
        rep.check(log_line(ep, "cannot save the last sequence numbers") is None,
                  f"{who}: saved its sequence state as user nobody", netns.tail(ep.log, 10))


def kept_case(rep, ctx):
    rep.section("drop_privileges = false: everything kept")
    g, c, gw, cl = build(ctx, drop=False)
    gw.start()
    st = proc_status(gw.proc.pid)
    rep.equal(st["Uid"].split()[0], "0", "gateway: Uid")
    rep.check(int(st["CapEff"], 16) & ~NET_ADMIN != 0, f"gateway: CapEff {st['CapEff']} "
              "has more than CAP_NET_ADMIN")
    rep.equal(st["Seccomp"], "0", "gateway: Seccomp (0 = none)")
    line = log_line(gw, "privileges: kept (drop_privileges = false)")
    rep.check(line is not None, f"gateway log: {line!r}", netns.tail(gw.log, 15))
    rep.equal(gw.stop(), 0, "gateway: SIGTERM -> exit code")


def body(rep, build_dir):
    netns.require_environment(("ip", "ping"))
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        raise TestError("user nobody does not exist (the default [tunnel] user)")

    class Ctx:
        pass
    ctx = Ctx()
    ctx.build, ctx.tmp, ctx.ns, ctx.eps = build_dir, netns.make_tempdir("priv"), [], []
    t0 = time.monotonic()

    def dump_logs():
        for ep in ctx.eps:
            print(f"\n--- {ep.log}:\n{netns.tail(ep.log, 30)}")
    rep.on_failure.append(dump_logs)
    try:
        dropped_case(rep, ctx)
        kept_case(rep, ctx)
    finally:
        for ep in ctx.eps:
            if ep.alive():
                ep.stop()
        for ns in reversed(ctx.ns):
            ns.delete()
    rep.info(f"{time.monotonic() - t0:.1f} s in all")


if __name__ == "__main__":
    report.main("netns/privileges", body, tools=("ip", "ping"))
