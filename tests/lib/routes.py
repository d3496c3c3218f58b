# Route tables of a namespace, for the client routing tests
# (tests/netns/test_client_route_all.py, test_client_leaks.py).
"""Snapshots and lookups of a namespace's routes."""

import json
import re


def route_tables(ns):
    """route_tables() - ns's IPv4 and IPv6 routes in every table, as sorted lines
    without the fields that change by themselves (expires timers, cache entries)."""
    out = {}
    for fam in ("-4", "-6"):
        lines = []
        for line in ns.ip(fam, "route", "show", "table", "all").stdout.splitlines():
            if re.search(r"\bcache\b", line):
                continue
            line = re.sub(r"\s+expires\s+\S+", "", line).strip()
            if line:
                lines.append(" ".join(line.split()))
        out[fam] = sorted(lines)
    return out


def diff(before, after):
    """diff() - what route_tables() @after lacks or has beyond @before, one line each."""
    lines = []
    for fam in ("-4", "-6"):
        b, a = set(before[fam]), set(after[fam])
        lines += [f"ip {fam} missing: {x}" for x in sorted(b - a)]
        lines += [f"ip {fam} extra:   {x}" for x in sorted(a - b)]
    return "\n".join(lines)


def routes_json(ns, fam, *args):
    """routes_json() - `ip -j FAM route show ARGS` parsed."""
    return json.loads(ns.ip("-j", fam, "route", "show", *args).stdout or "[]")


def route_get_dev(ns, addr):
    """route_get_dev() - the device `ip route get ADDR` picks, or None."""
    got = json.loads(ns.ip("-j", "route", "get", addr, check=False).stdout or "[]")
    return got[0].get("dev") if got else None
