# Network namespaces, veth links, child processes and clean-up for esptun's
# wire tests (tests/interop, tests/netns). Nothing here touches the root
# namespace: every address, route and device lives in a namespace the test
# created, and everything is removed again on exit, failure, SIGINT or SIGTERM.
"""Namespace plumbing shared by the wire tests."""

import contextlib
import ctypes
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class TestError(Exception):
    """A fatal test failure: the message says what went wrong and where."""


# ---------------------------------------------------------------------------
# Clean-up: a LIFO stack run once, from `finally`, atexit or a signal.

_cleanups = []


def on_cleanup(fn, *args):
    """on_cleanup() - run fn(*args) at clean-up time (last registered first)."""
    _cleanups.append((fn, args))


def run_cleanups():
    """run_cleanups() - run and forget every registered clean-up; never raises.
    A second SIGINT/SIGTERM while cleaning must not leave namespaces behind."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while _cleanups:
        fn, args = _cleanups.pop()
        try:
            fn(*args)
        except Exception as e:  # keep cleaning even when one step fails
            print(f"  warn  clean-up {getattr(fn, '__name__', fn)}: {e}", flush=True)


def _on_signal(signum, _frame):
    # Turn the signal into an exception so every `finally` runs.
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def install_signal_handlers():
    """install_signal_handlers() - SIGINT/SIGTERM/SIGHUP unwind through `finally`
    (SIGINT explicitly: a shell may start background jobs with it ignored)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)


# ---------------------------------------------------------------------------
# Preconditions: a test that cannot run fails, it never skips.

def require_environment(tools=("ip",)):
    """require_environment() - root, /dev/net/tun and the named tools, else TestError."""
    if os.geteuid() != 0:
        raise TestError("must run as root (network namespaces, tun devices)")
    if not os.path.exists("/dev/net/tun"):
        raise TestError("/dev/net/tun is missing")
    for tool in tools:
        if shutil.which(tool) is None:
            raise TestError(f"required tool '{tool}' not found in PATH "
                            "(run scripts/setup.sh)")


def make_tempdir(tag):
    """make_tempdir() - a private temp folder removed at clean-up."""
    path = tempfile.mkdtemp(prefix=f"et-{tag}-")
    os.chmod(path, 0o700)
    on_cleanup(shutil.rmtree, path, True)
    return path


# ---------------------------------------------------------------------------
# Commands.

def run(cmd, timeout=10, check=True, input=None):
    """run() - run a command with a timeout; output captured as text."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    except subprocess.TimeoutExpired:
        raise TestError(f"command timed out after {timeout}s: {' '.join(cmd)}")
    if check and p.returncode != 0:
        raise TestError(f"command failed (exit {p.returncode}): {' '.join(cmd)}\n"
                        f"{p.stdout}{p.stderr}")
    return p


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class Netns:
    """One network namespace, deleted (with its devices) at clean-up."""

    def __init__(self, name):
        self.name = name
        self.procs = []
        run(["ip", "netns", "add", name])
        on_cleanup(self.delete)
        self.ip("link", "set", "lo", "up")
        # Quiet IPv6 on devices created later (the tun): no router
        # solicitations, no DAD, so the tunnel only carries test traffic.
        self.sysctl({"net.ipv6.conf.default.router_solicitations": 0,
                     "net.ipv6.conf.all.accept_dad": 0,
                     "net.ipv6.conf.default.accept_dad": 0,
                     "net.ipv4.conf.all.promote_secondaries": 1,
                     "net.ipv4.conf.default.promote_secondaries": 1})

    def cmd(self, *args):
        """cmd() - argv that runs args inside this namespace."""
        return ["ip", "netns", "exec", self.name, *args]

    def run(self, *args, timeout=10, check=True, input=None):
        return run(self.cmd(*args), timeout=timeout, check=check, input=input)

    def ip(self, *args, check=True):
        return run(["ip", "-n", self.name, *args], check=check)

    def sysctl(self, values):
        for k, v in values.items():
            self.run("sysctl", "-q", "-w", f"{k}={v}")

    def spawn(self, *args, stdout=None, stderr=None, stdin=subprocess.DEVNULL, text=False):
        """spawn() - start args in this namespace; killed at clean-up if still running."""
        p = subprocess.Popen(self.cmd(*args), stdout=stdout, stderr=stderr, stdin=stdin,
                             text=text)
        self.procs.append(p)
        return p

    @contextlib.contextmanager
    def entered(self):
        """entered() - switch this thread into the namespace for the with-block.
        Sockets made inside stay in the namespace for their whole life."""
        orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield self
            finally:
                _setns(orig)
        finally:
            os.close(target)
            os.close(orig)

    def socket(self, family, type_, bind=None, timeout=None):
        """socket() - a socket that lives in this namespace, optionally bound."""
        with self.entered():
            s = socket.socket(family, type_)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if bind is not None:
                s.bind(bind)
            if timeout is not None:
                s.settimeout(timeout)
        except Exception:
            s.close()
            raise
        return s

    def links(self):
        """links() - names of the devices in the namespace."""
        out = self.ip("-o", "link", "show").stdout
        return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]

    def delete(self):
        for p in self.procs:
            stop_process(p, timeout=3)
        # Stragglers started by our children (still ours: the name is unique).
        pids = run(["ip", "netns", "pids", self.name], check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        run(["ip", "netns", "del", self.name], check=False)


def stop_process(p, timeout=5, sig=signal.SIGTERM):
    """stop_process() - signal p, wait up to timeout, then SIGKILL. Returns the exit code."""
    if p.poll() is not None:
        return p.returncode
    with contextlib.suppress(ProcessLookupError):
        p.send_signal(sig)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=5)
        return None  # did not stop by itself


def veth(a, b, name_a, name_b, addrs_a=(), addrs_b=()):
    """veth() - link namespaces a and b; the pair is created inside them, never in root."""
    a.ip("link", "add", name_a, "type", "veth", "peer", "name", name_b, "netns", b.name)
    for ns, dev, addrs in ((a, name_a, addrs_a), (b, name_b, addrs_b)):
        for addr in addrs:
            extra = ["nodad"] if ":" in addr else []
            ns.ip("addr", "add", addr, "dev", dev, *extra)
        ns.ip("link", "set", dev, "up")


def unique(tag, suffix=""):
    """unique() - a per-run name, e.g. et-scapy-1234-a."""
    return f"et-{tag}-{os.getpid()}{('-' + suffix) if suffix else ''}"


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """wait_until() - poll pred() until true; TestError after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TestError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def read_line(stream, timeout):
    """read_line() - one line from a pipe within timeout seconds, else None."""
    r, _, _ = select.select([stream], [], [], timeout)
    if not r:
        return None
    return stream.readline()


def tail(path, lines=30):
    """tail() - the last lines of a log file, for failure messages."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"(cannot read {path}: {e})"
