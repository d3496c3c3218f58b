#!/usr/bin/python3
# test_readme_commands.py - the newcomer's path: the two commands README.md
# opens with, taken from README.md itself, run as root the way a fresh Debian
# machine runs them: from a fresh copy of the tree, in a clean environment
# whose PATH has no sudo (a root shell there has none). Each must exit 0 and
# neither may reach for sudo.
#
#   README.md's first ```sh block
#     scripts/demo.sh   run fully: setup.sh --demo, build, `esptun-bench demo`;
#                       must print "demo passed" and leave no namespace behind
#     scripts/test.sh   run with --setup-only: step 1 (setup.sh, the same
#                       script a full run starts with) and stop, since CI is
#                       itself a run of test.sh and cannot run it again inside
#
# The copy holds the files git tracks, as they are in the working tree (so
# uncommitted edits to a script are what gets tested), and nothing else: no
# build/, no untracked files. Compiling the tree from scratch in the copy
# would take ten minutes of CI; demo.sh is given ESPTUN_BUILD_DIR=BUILD_DIR
# instead (documented in demo.sh), so it brings the test's own build up to
# date and runs the demo from it. CI's build step already configures and
# builds a fresh clone with the same flags as demo.sh.
#
# PATH is a folder of symlinks to every program in the standard root PATH
# folders except sudo, so `command -v sudo` fails as on a fresh machine even
# where sudo is installed. A call to it shows as bash's or dash's "sudo: ...
# not found", which the test looks for as well as the exit status (a
# `sudo x || true` would not change the status).
"""README.md's first two commands, from a fresh copy, as root, without sudo."""

import os
import re
import shutil
import subprocess
import sys
import time

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import netns  # noqa: E402
import report  # noqa: E402

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ROOT_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
SUDO_CALLED = re.compile(r"sudo: (command )?not found|sudo: No such file", re.I)
DEMO_PASSED = "demo passed"
TIMEOUT_S = 600


def readme_commands(readme):
    """readme_commands() - the commands of README.md's first ```sh block, comments cut."""
    text = open(readme).read()
    m = re.search(r"^```sh\n(.*?)^```", text, re.M | re.S)
    if not m:
        return []
    cmds = []
    for line in m.group(1).splitlines():
        cmd = line.split("#", 1)[0].strip()
        if cmd:
            cmds.append(cmd)
    return cmds


def copy_tracked(rep, dest):
    """copy_tracked() - the files git tracks in SRC, as in the working tree, into dest."""
    p = subprocess.run(["git", "-C", SRC, "ls-files", "-z"], capture_output=True, timeout=60)
    rep.require(p.returncode == 0, "git lists the checkout's files", p.stderr.decode()[-300:])
    n = 0
    for rel in p.stdout.decode().split("\0"):
        src = os.path.join(SRC, rel)
        if not rel or not os.path.lexists(src):
            continue  # deleted in the working tree and not yet committed
        dst = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
        n += 1
    rep.check(n > 0 and not os.path.exists(os.path.join(dest, "build")),
              f"fresh copy: the {n} tracked files, no build folder")


def path_without_sudo(bindir):
    """path_without_sudo() - bindir filled with symlinks to the root PATH's programs but sudo."""
    os.makedirs(bindir)
    for d in ROOT_PATH:
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = os.path.join(d, name)
            link = os.path.join(bindir, name)
            if name == "sudo" or os.path.lexists(link):
                continue  # the first folder on PATH wins, as in a shell
            if os.path.isfile(target) and os.access(target, os.X_OK):
                os.symlink(target, link)
    return bindir


def run_command(rep, cmd, cwd, env, label):
    """run_command() - cmd in a root bash in cwd with env; (exit status, output, seconds)."""
    rep.info(f"{label}: bash -c {cmd!r} in the copy")
    start = time.monotonic()
    try:
        p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=TIMEOUT_S)
        rc, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        # Its output so far comes as bytes, whatever text= said.
        rc, out = None, e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else ""
    secs = time.monotonic() - start
    rep.info(f"{label}: exit {rc} after {secs:.1f} s")
    tail = "\n".join(out.splitlines()[-40:])
    rep.on_failure.append(lambda: print(f"--- last lines of {label}:\n{tail}"))
    return rc, out, secs


# The names `esptun-bench demo` gives its namespaces (apps/bench/demo/demo.cpp kPrefix).
DEMO_NETNS_PREFIX = "esptun-demo-"


def netns_names():
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return {line.split()[0] for line in p.stdout.splitlines() if line.strip()}


def body(rep, build):
    tmp = netns.make_tempdir("readme")
    tree = os.path.join(tmp, "esptun")

    rep.section("README.md's commands, from a fresh copy")
    copy_tracked(rep, tree)
    cmds = readme_commands(os.path.join(tree, "README.md"))
    rep.require(len(cmds) == 2, "README.md opens with two commands in a ```sh block", str(cmds))
    demo_cmd, test_cmd = cmds
    rep.require(demo_cmd.split()[0] == "scripts/demo.sh", f"the first runs the demo: {demo_cmd!r}")
    rep.require(test_cmd == "scripts/test.sh",
                f"the second is the whole suite: {test_cmd!r} (this test adds --setup-only)")

    bindir = path_without_sudo(os.path.join(tmp, "bin"))
    env = {"HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
           "LANG": "C.UTF-8", "TERM": "dumb", "PATH": bindir}
    p = subprocess.run(["bash", "-c", "command -v sudo"], env=env, capture_output=True, text=True)
    rep.require(p.returncode != 0, "no sudo on the test's PATH", p.stdout)
    rep.require(shutil.which("bash", path=bindir) and shutil.which("cmake", path=bindir),
                "bash and cmake are on it (the rest of the root PATH is)")

    rep.section(f"{demo_cmd} (with ESPTUN_BUILD_DIR={build})")
    before = netns_names()
    rc, out, secs = run_command(rep, demo_cmd, tree, dict(env, ESPTUN_BUILD_DIR=build), "demo")
    rep.check(rc == 0, f"{demo_cmd} exits 0", f"exit status {rc}")
    rep.check(DEMO_PASSED in out, f"the demo prints \"{DEMO_PASSED}\"")
    rep.check(not SUDO_CALLED.search(out), "the demo's scripts never call sudo",
              (SUDO_CALLED.search(out) or [""])[0])
    # Only the demo's own names count: other tests may run beside this one
    # (CI runs the package tests in the background) with namespaces of theirs.
    left = {n for n in netns_names() - before if n.startswith(DEMO_NETNS_PREFIX)}
    rep.check(not left, "the demo leaves no network namespace behind", str(sorted(left)))
    rep.info(f"demo took {secs:.1f} s")

    rep.section(f"{test_cmd} --setup-only")
    rc, out, secs = run_command(rep, test_cmd + " --setup-only", tree, env, "test.sh")
    rep.check(rc == 0, f"{test_cmd} --setup-only exits 0", f"exit status {rc}")
    rep.check("=== setup: ok" in out, "its setup step passes")
    rep.check(not SUDO_CALLED.search(out), "test.sh's setup never calls sudo",
              (SUDO_CALLED.search(out) or [""])[0])
    rep.check(not os.path.exists(os.path.join(tree, "build")),
              "the copy still has no build folder (nothing ran past setup)")


if __name__ == "__main__":
    report.main("package/readme_commands", body)
