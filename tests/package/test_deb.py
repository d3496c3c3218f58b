#!/usr/bin/python3
# test_deb.py - the Debian package `cpack -G DEB` makes from the build:
# its control fields (name, the programs' own version, Depends derived by
# dpkg-shlibdeps), its files (programs, systemd unit naming /usr/bin, man
# pages, examples, docs), and what is inside works: the extracted programs
# print their version and `check` the shipped examples, and the man pages
# render without a groff warning and name every command the programs' usage
# lists. Builds into a temporary folder; installs nothing on this machine.
"""The Debian package: fields, files, and that its contents work."""

import gzip
import os
import re
import shutil
import stat
import subprocess
import sys

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import netns  # noqa: E402
import report  # noqa: E402

EXPECTED_FILES = [
    "usr/bin/esptun-gateway", "usr/bin/esptun-client", "usr/bin/esptun-bench",
    "usr/lib/systemd/system/esptun-gateway@.service",
    "usr/share/man/man8/esptun-gateway.8.gz", "usr/share/man/man8/esptun-client.8.gz",
    "usr/share/doc/esptun/README.md", "usr/share/doc/esptun/examples/gateway.toml",
    "usr/share/doc/esptun/examples/client.toml", "usr/share/doc/esptun/examples/ike-gateway.toml",
    "usr/share/doc/esptun/examples/ike-client.toml",
]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def build_deb(rep, build, tmp):
    """build_deb() - cpack into tmp; the .deb's path."""
    p = run(["cpack", "-G", "DEB", "--config", os.path.join(build, "CPackConfig.cmake"), "-B", tmp])
    rep.require(p.returncode == 0, "cpack -G DEB builds the package", p.stdout[-500:] + p.stderr[-500:])
    debs = [f for f in os.listdir(tmp) if f.endswith(".deb")]
    rep.require(len(debs) == 1, "one .deb", str(debs))
    return os.path.join(tmp, debs[0])


def check_fields(rep, build, deb):
    rep.section("control fields")
    fields = {}
    for line in run(["dpkg-deb", "-f", deb]).stdout.splitlines():
        k, sep, v = line.partition(": ")
        if sep and not line.startswith(" "):
            fields[k] = v
    version = run([os.path.join(build, "esptun-gateway"), "--version"]).stdout.split()[-1]
    rep.equal(fields.get("Package"), "esptun", "Package")
    rep.equal(fields.get("Version"), version, "Version is the programs' --version")
    deps = fields.get("Depends", "")
    for lib in ("libssl3", "liburing2", "libseccomp2", "libstdc++6"):
        rep.check(re.search(rf"\b{re.escape(lib)}\b", deps) is not None,
                  f"Depends names {lib} (from dpkg-shlibdeps)", deps)
    rep.equal(fields.get("Section"), "net", "Section")


def check_files(rep, deb, root):
    rep.section("files")
    listed = {line.split()[-1].lstrip("./") for line in run(["dpkg-deb", "-c", deb]).stdout.splitlines()}
    missing = [f for f in EXPECTED_FILES if f not in listed]
    rep.check(not missing, f"the package holds the {len(EXPECTED_FILES)} expected files",
              f"missing: {missing}")
    p = run(["dpkg-deb", "-x", deb, root])
    rep.require(p.returncode == 0, "dpkg-deb -x extracts it", p.stderr)
    unit = open(os.path.join(root, "usr/lib/systemd/system/esptun-gateway@.service")).read()
    execs = re.findall(r"^ExecStart(?:Pre)?=(\S+)", unit, re.M)
    rep.check(execs and all(e == "/usr/bin/esptun-gateway" for e in execs),
              "the unit runs /usr/bin/esptun-gateway (the package's prefix)", str(execs))
    for prog in ("esptun-gateway", "esptun-client"):
        mode = os.stat(os.path.join(root, "usr/bin", prog)).st_mode
        rep.check(mode & stat.S_IXOTH and not mode & stat.S_IWOTH, f"{prog} is 755-like",
                  oct(mode))


def check_programs(rep, root, tmp):
    rep.section("the packaged programs work")
    gw = os.path.join(root, "usr/bin/esptun-gateway")
    for prog in ("esptun-gateway", "esptun-client"):
        p = run([os.path.join(root, "usr/bin", prog), "--version"])
        rep.check(p.returncode == 0 and p.stdout.startswith(prog + " "), f"{prog} --version",
                  p.stdout + p.stderr)
    examples = os.path.join(root, "usr/share/doc/esptun/examples")
    for name, prog in (("gateway.toml", gw), ("ike-gateway.toml", gw),
                       ("client.toml", os.path.join(root, "usr/bin/esptun-client")),
                       ("ike-client.toml", os.path.join(root, "usr/bin/esptun-client"))):
        # A copy at mode 600 (configs holding keys must be private), next to
        # any key files it names.
        work = os.path.join(tmp, "ex-" + name)
        shutil.copytree(examples, work)
        for f in os.listdir(work):
            os.chmod(os.path.join(work, f), 0o600)
        p = run([prog, "check", "-c", os.path.join(work, name)])
        rep.check(p.returncode == 0 and "OK" in p.stdout, f"check accepts the shipped {name}",
                  p.stdout + p.stderr)


def usage_commands(prog):
    """The commands the program's usage lists: the word after its name."""
    out = run([prog, "--help"]).stdout
    name = os.path.basename(prog)
    return sorted(set(re.findall(rf"^(?:usage:)?\s+{re.escape(name)} (\S+)", out, re.M)))


def check_man(rep, root):
    rep.section("man pages")
    for prog in ("esptun-gateway", "esptun-client"):
        text = gzip.open(os.path.join(root, f"usr/share/man/man8/{prog}.8.gz"), "rt").read()
        p = subprocess.run(["groff", "-man", "-ww", "-z"], input=text, capture_output=True,
                           text=True, timeout=30)
        rep.check(p.returncode == 0 and not p.stderr.strip(), f"{prog}.8 renders without warnings",
                  p.stderr[:500])
        rendered = subprocess.run(["groff", "-man", "-Tutf8"], input=text, capture_output=True,
                                  text=True, timeout=30).stdout
        plain = re.sub(r".\x08", "", rendered)
        cmds = usage_commands(os.path.join(root, "usr/bin", prog))
        absent = [c for c in cmds if c not in plain]
        rep.check(cmds and not absent, f"{prog}.8 names every command of its usage ({', '.join(cmds)})",
                  f"absent: {absent}")
        version = run([os.path.join(root, "usr/bin", prog), "--version"]).stdout.split()[-1]
        rep.check(f'"esptun {version}"' in text, f"{prog}.8 carries version {version}")


def body(rep, build):
    for tool in ("cpack", "dpkg-deb", "dpkg-shlibdeps", "groff"):
        rep.require(shutil.which(tool) is not None, f"{tool} is installed (scripts/setup.sh)")
    tmp = netns.make_tempdir("deb")
    deb = build_deb(rep, build, tmp)
    root = os.path.join(tmp, "root")
    check_fields(rep, build, deb)
    check_files(rep, deb, root)
    check_programs(rep, root, tmp)
    check_man(rep, root)


if __name__ == "__main__":
    report.main("package/deb", body)
