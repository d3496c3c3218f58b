# esptun processes under test: start `esptun-gateway run` (or `esptun-client
# up`) inside a namespace, wait until its control socket answers, read the
# status JSON, stop it with SIGTERM and check that it exited cleanly.
"""Running esptun endpoints in namespaces."""

import json
import os
import re
import signal
import socket
import subprocess
import time

import netns
from netns import TestError

PROGRAMS = {"gateway": ("esptun-gateway", "run"), "client": ("esptun-client", "up")}


class Endpoint:
    """One running esptun endpoint (gateway or client) in a namespace."""

    def __init__(self, build, ns, config_path, log_path, role="gateway", args=(), env=None, wrap=()):
        """args: more arguments after `-c FILE` (e.g. "-v"); env: variables to
        set for the process (a dict), on top of the test's own environment;
        wrap: a command that runs the program (e.g. setpriv and its options)."""
        prog, self.verb = PROGRAMS[role]
        self.binary = os.path.join(build, prog)
        self.ns = ns
        self.config = config_path
        self.log = log_path
        self.proc = None
        self.args = tuple(args)
        self.env = dict(env or {})
        self.wrap = tuple(wrap)

    def start(self, ready_timeout=10):
        """start() - launch in the foreground (stderr to the log) and wait for status."""
        self.launch()
        self.wait_ready(ready_timeout)
        return self

    def launch(self):
        """launch() - start() without the wait: many endpoints started at
        once are launched first and then wait_ready() in turn."""
        self._logf = open(self.log, "ab")
        prefix = ("env", *(f"{k}={v}" for k, v in self.env.items())) if self.env else ()
        self.proc = self.ns.spawn(*prefix, *self.wrap, self.binary, self.verb, "-c", self.config, *self.args,
                                  stdout=self._logf, stderr=self._logf)
        return self

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TestError(f"{os.path.basename(self.binary)} exited with "
                                f"{self.proc.returncode} before it was ready; log:\n"
                                f"{netns.tail(self.log)}")
            try:
                return self.status()
            except TestError as e:
                last = str(e)
            time.sleep(0.1)
        raise TestError(f"{os.path.basename(self.binary)} did not answer status within "
                        f"{timeout}s ({last}); log:\n{netns.tail(self.log)}")

    def status_or_empty(self):
        """status_or_empty() - status(), or {} when it does not answer (for
        failure reports, where the status is a detail)."""
        try:
            return self.status()
        except TestError:
            return {}

    def status(self, timeout=5):
        """status() - the parsed status JSON; TestError when it does not answer
        within timeout seconds."""
        try:
            p = subprocess.run(self.ns.cmd(self.binary, "status", "-c", self.config),
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TestError(f"status timed out after {timeout}s")
        if p.returncode != 0:
            raise TestError(f"status exit {p.returncode}: {p.stderr.strip()[:300]}")
        try:
            return json.loads(p.stdout)
        except ValueError as e:
            raise TestError(f"status printed invalid JSON ({e}): {p.stdout[:300]!r}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=5, sig=signal.SIGTERM):
        """stop() - SIGTERM (or sig) and wait; returns the exit code (None: had to SIGKILL)."""
        if self.proc is None:
            return None
        rc = netns.stop_process(self.proc, timeout=timeout, sig=sig)
        self._logf.close()
        return rc


def query_socket(path, request="status", timeout=5):
    """query_socket() - the status JSON straight from an endpoint's control
    socket (one request line, the answer up to EOF, as `status` does), without
    running a process: for tests that poll many endpoints. TestError when it
    does not answer or the answer is not JSON."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(request.encode() + b"\n")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
    except OSError as e:
        raise TestError(f"control socket {path}: {e}")
    try:
        return json.loads(b"".join(chunks))
    except ValueError as e:
        raise TestError(f"control socket {path} answered invalid JSON ({e})")


def read_log(path):
    """read_log() - a log file's text ("" when it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def log_line(path, *patterns):
    """log_line() - the first line of the log at path that matches every
    regex (case-insensitive), stripped; None when there is none."""
    rxs = [re.compile(p, re.IGNORECASE) for p in patterns]
    for line in read_log(path).splitlines():
        if all(rx.search(line) for rx in rxs):
            return line.strip()
    return None


def wait_log_line(path, timeout, *patterns):
    """wait_log_line() - log_line(), waiting up to timeout seconds for it to appear."""
    try:
        return netns.wait_until(lambda: log_line(path, *patterns), timeout, interval=0.1,
                                what="log line")
    except TestError:
        return None


def run_check(build, config, prog="esptun-gateway", timeout=10):
    """run_check() - `PROG check -c FILE`; returns the CompletedProcess."""
    try:
        return subprocess.run([os.path.join(build, prog), "check", "-c", config],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TestError(f"{prog} check -c {config} hung for {timeout}s")


def counters_delta(before, after):
    """counters_delta() - after - before for counters, drops and ignored (flat dict)."""
    out = {}
    for group in ("counters", "drops", "ignored"):
        for k, v in after.get(group, {}).items():
            out[f"{group}.{k}"] = v - before.get(group, {}).get(k, 0)
    return out


def peer(status, name):
    """peer() - the status entry of the named peer, else TestError."""
    for p in status.get("peers", []):
        if p.get("name") == name:
            return p
    raise TestError(f"peer {name!r} missing from status: {json.dumps(status)[:400]}")


# Drop reasons that are congestion signals, not faults: the receive queue
# limit (datapath/codel.hpp) drops a bulk Not-ECT packet that waited too
# long in the socket, as a router's queue would, and a busy test machine can
# make it. Checks for "no drops" after bulk traffic leave them out.
CONGESTION_DROPS = ("queue_delay",)


def rx_shed(status):
    """rx_shed() - the ESP datagrams a gateway's receive queue limit shed
    unopened (status "queue" "drops"). Its drops "queue_delay" also counts
    what the send-side flow queue dropped of the gateway's own outbound
    traffic, which no receive count of the peer includes."""
    return status["queue"]["drops"]


def fault_drops(drops, allowed=()):
    """fault_drops() - the non-zero counters of a status "drops" object,
    without the congestion ones and those in allowed."""
    return {k: v for k, v in drops.items() if v and k not in CONGESTION_DROPS and k not in allowed}

