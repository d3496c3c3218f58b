# ping.py - iputils ping from inside a namespace, run one way for every wire
# test, and the checks on what came back.
#
# The command: -c COUNT requests 0.2 s apart, -W WAIT s for each reply, -q
# (only the statistics), and with a deadline -w DEADLINE (ping then sends
# until it has COUNT replies, or the deadline passes); -4 or -6 follows the
# destination's family. The reply count comes from the statistics line ("N
# packets transmitted, M received"); when ping printed none (no route, a bad
# address) it is -1.
"""Ping from a namespace and check the replies."""

import re
import subprocess
from dataclasses import dataclass

STATS_RX = re.compile(r"(\d+) packets transmitted, (\d+) received")


@dataclass
class Result:
    replies: int  # -1: ping printed no statistics
    returncode: int
    output: str  # stdout and stderr, stripped


def argv(dst, count=3, wait=2, deadline=None):
    """argv() - the ping command line for dst. deadline (s): -w, wait that
    long for all count replies (ping stops at the last one). Without it, once
    the last request is sent ping waits only twice the slowest round trip
    seen (at least the 0.2 s interval) for replies still missing, which a
    loaded machine can exceed; -W is the wait when no reply came at all."""
    return ["ping", "-6" if ":" in dst else "-4", "-c", str(count), "-i", "0.2",
            "-W", str(wait)] + (["-w", str(deadline)] if deadline else []) + ["-q", dst]


def result(returncode, output):
    """result() - a Result from ping's exit code and output."""
    m = STATS_RX.search(output)
    return Result(int(m.group(2)) if m else -1, returncode, output.strip())


def run(ns, dst, count=3, wait=2, deadline=None):
    """run() - ping dst from netns ns and wait for it; a Result."""
    p = ns.run(*argv(dst, count, wait, deadline),
               timeout=max(20, count * (wait + 1) + 5, (deadline or 0) + 5), check=False)
    return result(p.returncode, p.stdout + p.stderr)


def spawn(ns, dst, count=3, wait=2, deadline=None):
    """spawn() - start ping in ns without waiting (for pings at the same time);
    finish() it to get the Result."""
    return ns.spawn(*argv(dst, count, wait, deadline), stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True)


def finish(proc, timeout=15):
    """finish() - wait for a spawn()ed ping (killed after timeout s); a Result."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return result(proc.returncode, out)


def expect_replies(rep, what, res, count):
    """expect_replies() - check: ping exited 0 with every one of count
    requests answered (with a deadline ping sends until count replies came,
    so more than count requests may have gone out). what: "[tag] ping A ->
    10.99.0.2"."""
    return rep.check(res.returncode == 0 and res.replies >= count,
                     f"{what}: {count}/{count} replies", res.output[-300:])


def expect_no_reply(rep, what, res, unreachable_ok=True):
    """expect_no_reply() - check: no reply came back. unreachable_ok: a ping
    that could not even send (no route, so no statistics) counts as none too;
    False insists that the requests were sent and went unanswered."""
    ok = res.replies == 0 or (unreachable_ok and res.replies < 0)
    return rep.check(ok, what, res.output[-300:])
