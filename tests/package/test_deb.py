#!/usr/bin/python3
# test_deb.py - the Debian package that `dpkg-buildpackage -b` makes from
# debian/ (scripts/build-deb.sh puts it in BUILD/deb/; scripts/test.sh
# builds it in the background before this test runs):
#   1. its control fields and file list;
#   2. lintian finds no error in it (warnings are listed);
#   3. installed with dpkg, its programs print their version and `check`
#      the shipped examples; its man pages render without a warning and
#      document every command and config key; its bash completion
#      completes; `systemd-analyze verify` accepts both installed units,
#      with their Documentation= man pages, and refuses a broken copy;
#   4. purged again: nothing named esptun is left in /etc, /usr, /lib or
#      systemd's state. The purge also runs when a check fails or the test
#      is interrupted, and the test refuses to start when esptun is already
#      installed, so the host ends as it began.
"""The Debian package: fields, files, lintian, installed and purged."""

import glob
import gzip
import os
import re
import shutil
import subprocess
import sys

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import netns  # noqa: E402
import report  # noqa: E402

SOURCE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROGRAMS = ("esptun-gateway", "esptun-client", "esptun-bench")
UNIT_DIR = "lib/systemd/system"  # debian/rules: where Debian 12's dh_installsystemd looks
UNITS = ("esptun-gateway@.service", "esptun-client@.service")
MAN_PAGES = {"esptun-gateway": 8, "esptun-client": 8, "esptun-bench": 1, "esptun.toml": 5}
EXAMPLES = {"gateway.toml": "esptun-gateway", "ike-gateway.toml": "esptun-gateway",
            "client.toml": "esptun-client", "ike-client.toml": "esptun-client"}
EXPECTED_FILES = (
    [f"usr/bin/{p}" for p in PROGRAMS]
    + [f"{UNIT_DIR}/{u}" for u in UNITS]
    + [f"usr/share/man/man{s}/{n}.{s}.gz" for n, s in MAN_PAGES.items()]
    + [f"usr/share/bash-completion/completions/{p}" for p in PROGRAMS]
    + [f"usr/share/doc/esptun/examples/{e}" for e in EXAMPLES]
    + ["usr/share/doc/esptun/copyright", "usr/share/doc/esptun/changelog.gz"]
)
# Where the package could leave something behind; compared by name before
# install and after purge.
WATCHED = ["/etc", "/lib/systemd", "/usr/lib/systemd", "/usr/bin", "/usr/share/man",
           "/usr/share/bash-completion", "/usr/share/doc", "/var/lib/systemd", "/var/lib/dpkg/info"]


def run(cmd, timeout=300, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def esptun_paths():
    """esptun_paths() - every path under WATCHED whose name holds "esptun"."""
    found = set()
    for top in WATCHED:
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                if "esptun" in name:
                    found.add(os.path.join(root, name))
    return found


def find_deb(rep, build):
    debs = [d for d in glob.glob(os.path.join(build, "deb", "esptun_*_amd64.deb"))]
    rep.require(len(debs) == 1, "one esptun .deb in BUILD/deb (scripts/build-deb.sh makes it)",
                f"found {debs}")
    changes = glob.glob(os.path.join(build, "deb", "esptun_*_amd64.changes"))
    rep.require(len(changes) == 1, "and its .changes", f"found {changes}")
    return debs[0], changes[0]


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
    rep.equal(fields.get("Architecture"), "amd64", "Architecture")
    rep.equal(fields.get("Section"), "net", "Section")
    deps = fields.get("Depends", "")
    for lib in ("libssl3", "liburing2", "libseccomp2", "libsystemd0", "libstdc++6"):
        rep.check(re.search(rf"\b{re.escape(lib)}\b", deps) is not None,
                  f"Depends names {lib} (from dpkg-shlibdeps)", deps)
    rep.check(fields.get("Built-Using", "").startswith("openssl (= "),
              "Built-Using names the openssl whose objects are linked in",
              fields.get("Built-Using", "(none)"))
    return version


def check_files(rep, deb):
    rep.section("files")
    listed = {line.split()[-1].lstrip("./").split(" -> ")[0]
              for line in run(["dpkg-deb", "-c", deb]).stdout.splitlines()}
    missing = [f for f in EXPECTED_FILES if f not in listed]
    rep.check(not missing, f"the package holds the {len(EXPECTED_FILES)} expected files",
              f"missing: {missing}")
    stray = sorted(f for f in listed if f.startswith(("usr/local", "etc/", "var/")))
    rep.check(not stray, "nothing under /usr/local, /etc or /var", str(stray))


def check_lintian(rep, changes):
    rep.section("lintian")
    p = run(["lintian", "--fail-on", "error", "--display-info", changes], timeout=600)
    tags = [line for line in p.stdout.splitlines() if re.match(r"^[EWIPX]: ", line)]
    errors = [t for t in tags if t.startswith("E: ")]
    for t in tags:
        rep.info(t)
    rep.check(p.returncode == 0 and not errors, "lintian reports no error",
              "\n".join(errors) or (p.stdout + p.stderr)[-800:])


def install(rep, deb):
    rep.section("dpkg -i")
    netns.on_cleanup(purge_quietly)
    p = run(["dpkg", "-i", deb])
    rep.require(p.returncode == 0, "dpkg -i installs it", (p.stdout + p.stderr)[-800:])
    st = run(["dpkg-query", "-W", "-f", "${Status}", "esptun"]).stdout
    rep.equal(st, "install ok installed", "dpkg reports it installed")


def check_programs(rep, version, tmp):
    rep.section("the installed programs")
    for prog in PROGRAMS:
        p = run([f"/usr/bin/{prog}", "--version"])
        rep.equal(p.stdout.strip(), f"{prog} {version}", f"{prog} --version")
    for name, prog in EXAMPLES.items():
        # A copy at mode 600 (configs holding keys must be private).
        work = os.path.join(tmp, "ex-" + name)
        shutil.copytree("/usr/share/doc/esptun/examples", work)
        for f in os.listdir(work):
            os.chmod(os.path.join(work, f), 0o600)
        p = run([f"/usr/bin/{prog}", "check", "-c", os.path.join(work, name)])
        rep.check(p.returncode == 0 and "OK" in p.stdout, f"{prog} check accepts the shipped {name}",
                  p.stdout + p.stderr)


def usage_commands(prog):
    """The commands a program's usage lists: the word after its name."""
    out = run([prog, "--help"]).stdout
    name = os.path.basename(prog)
    cmds = set(re.findall(rf"^(?:usage:)?\s+{re.escape(name)} (\S+)", out, re.M))
    cmds |= set(re.findall(r"^  ([a-z][a-z-]+) ", out, re.M))  # esptun-bench's layout
    return sorted(cmds - {"COMMAND"})


def config_keys():
    """config_keys() - every key the loader accepts, from its key tables."""
    keys = set()
    for src in ("conf/config.cpp", "conf/config_static.cpp", "conf/config_redirect.cpp"):
        text = open(os.path.join(SOURCE, src)).read()
        for table in re.findall(r"k(?:Tunnel|Peer|Sa|Redirect)Keys\[\] = \{([^}]*)\}", text):
            keys |= set(re.findall(r'"([a-z_]+)"', table))
    return keys


def check_man(rep, version):
    rep.section("man pages")
    for name, section in MAN_PAGES.items():
        path = f"/usr/share/man/man{section}/{name}.{section}.gz"
        text = gzip.open(path, "rt").read()
        p = subprocess.run(["groff", "-man", "-ww", "-z"], input=text, capture_output=True,
                           text=True, timeout=30)
        rep.check(p.returncode == 0 and not p.stderr.strip(), f"{name}.{section} renders without warnings",
                  p.stderr[:500])
        rep.check(f'"esptun {version}"' in text, f"{name}.{section} carries version {version}")
        rendered = subprocess.run(["groff", "-man", "-Tutf8"], input=text, capture_output=True,
                                  text=True, timeout=30).stdout
        plain = re.sub(r".\x08", "", rendered)
        if name in PROGRAMS:
            cmds = usage_commands(f"/usr/bin/{name}")
            absent = [c for c in cmds if c not in plain]
            rep.check(cmds and not absent, f"{name}.{section} names every command of its usage "
                      f"({', '.join(cmds)})", f"absent: {absent}")
        else:
            keys = config_keys()
            absent = sorted(k for k in keys if not re.search(rf"\b{k}\b", plain))
            rep.check(len(keys) > 40 and not absent,
                      f"{name}.{section} documents every key the loader accepts ({len(keys)})",
                      f"absent: {absent}")
        found = run(["man", "-w", f"{section}", name]).stdout.strip()
        rep.equal(found, path, f"man finds {name}({section})")


def complete(line):
    """complete() - what bash-completion offers for @line (cursor at its end)."""
    words = line.split(" ")
    script = (
        "source /usr/share/bash-completion/bash_completion\n"
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
        f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}\n"
        f"_completion_loader {words[0]}\n"
        f"$(complete -p {words[0]} | sed -E 's/.* -F ([^ ]+) .*/\\1/') {words[0]} "
        f"{words[-1]!r} {words[-2]!r}\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n')
    p = run(["bash", "--norc", "--noprofile", "-c", script], timeout=30)
    return set(p.stdout.split()), p.stderr


def check_completion(rep):
    rep.section("bash completion")
    cases = [
        ("esptun-gateway ", {"run", "check", "status", "show", "genkey", "genpair", "genpsk"}, {"up"}),
        ("esptun-client ", {"up", "cleanup", "check", "status", "show"}, {"run"}),
        ("esptun-gateway genpair --cipher ", {"aes128-gcm", "aes256-cbc-hmac-sha256"}, set()),
        ("esptun-client status --format ", {"json", "prometheus"}, set()),
        ("esptun-gateway run -", {"-c", "--config", "-v"}, {"--format"}),
        ("esptun-bench ", {"demo", "crypto", "compare", "udp-engines", "ike-load", "peers", "vhost-counts"}, set()),
        ("esptun-bench ike-load --", {"--clients", "--responders", "--auth", "--storm", "--transfer", "--json"}, {"--peers"}),
        ("esptun-bench peers --", {"--counts", "--spokes", "--congestion", "--json"}, {"--clients"}),
        ("esptun-bench crypto --", {"--quick", "--sizes", "--json"}, {"--peers"}),
    ]
    for line, want, not_want in cases:
        got, err = complete(line)
        rep.check(want <= got and not (not_want & got), f"'{line}' completes {sorted(want)}",
                  f"got {sorted(got)}; {err[-300:]}")


def verify(unit_path):
    p = run(["systemd-analyze", "verify", unit_path], timeout=60)
    out = (p.stdout + p.stderr).strip()
    return p.returncode == 0 and "esptun" not in out, f"exit {p.returncode}: {out[:600]}"


def check_units(rep, tmp):
    rep.section("the installed units")
    for unit in UNITS:
        text = open(f"/{UNIT_DIR}/{unit}").read()
        prog = unit.split("@")[0]
        execs = re.findall(r"^ExecStart(?:Pre)?=(\S+)", text, re.M)
        rep.check(execs and all(e == f"/usr/bin/{prog}" for e in execs),
                  f"{unit} runs /usr/bin/{prog}", str(execs))
        for want in ("Type=notify", "WatchdogSec="):
            rep.check(re.search(rf"^{re.escape(want)}", text, re.M), f"{unit}: {want}")
        # The gateway reloads on SIGHUP; a client does not, so `systemctl
        # reload` must not be offered for it.
        reload = re.search(r"^ExecReload=/bin/kill -HUP \$MAINPID$", text, re.M)
        if prog == "esptun-gateway":
            rep.check(reload, f"{unit}: ExecReload= sends SIGHUP")
        else:
            rep.check(not re.search(r"^ExecReload=", text, re.M), f"{unit}: no ExecReload=")
        # An instance of the template, verified where it is installed; with
        # the default --man=yes, so its Documentation= pages must exist.
        ok, detail = verify(f"{unit.replace('@', '@pkgtest')}")
        rep.check(ok, f"systemd-analyze verify accepts {unit} (and finds its man pages)", detail)
    # The same verification must be able to fail: copies whose ExecStart
    # program, or whose Documentation= man page, does not exist. (A bad
    # value such as Type=notifyy is only warned about and ignored.)
    text = open(f"/{UNIT_DIR}/esptun-client@.service").read()
    for tag, old, new in (("prog", "ExecStart=/usr/bin/esptun-client",
                           "ExecStart=/usr/bin/esptun-nothere"),
                          ("man", "Documentation=man:esptun-client(8)",
                           "Documentation=man:esptun-nothere(8)")):
        broken = os.path.join(tmp, f"esptun-client@broken{tag}.service")
        with open(broken, "w") as f:
            f.write(text.replace(old, new))
        ok, detail = verify(broken)
        rep.check(not ok and "esptun-nothere" in detail,
                  f"systemd-analyze verify refuses a copy naming a missing {tag}", detail)


def purge_quietly():
    if run(["dpkg-query", "-W", "-f", "${Status}", "esptun"]).stdout.startswith("install"):
        run(["dpkg", "-P", "esptun"])


def purge(rep, before):
    rep.section("dpkg -P")
    p = run(["dpkg", "-P", "esptun"])
    rep.check(p.returncode == 0, "dpkg -P removes it", (p.stdout + p.stderr)[-500:])
    st = run(["dpkg-query", "-W", "-f", "${Status}", "esptun"])
    rep.check(st.returncode != 0 or not st.stdout.startswith("install"), "dpkg no longer lists it",
              st.stdout)
    left = sorted(esptun_paths() - before)
    rep.check(not left, "nothing named esptun is left in /etc, /usr, /lib or systemd's state",
              str(left[:20]))


def body(rep, build):
    for tool in ("dpkg-deb", "lintian", "groff", "man", "systemd-analyze", "bash"):
        rep.require(shutil.which(tool) is not None, f"{tool} is installed (scripts/setup.sh)")
    rep.require(os.path.exists("/usr/share/bash-completion/bash_completion"),
                "bash-completion is installed (scripts/setup.sh)")
    st = run(["dpkg-query", "-W", "-f", "${Status}", "esptun"]).stdout
    rep.require("installed" not in st,
                "esptun is not installed on this host (the test installs and purges its own)",
                f"dpkg says: {st}; remove it first")
    tmp = netns.make_tempdir("deb")
    deb, changes = find_deb(rep, build)
    rep.info(f"package: {deb}")
    version = check_fields(rep, build, deb)
    check_files(rep, deb)
    check_lintian(rep, changes)
    before = esptun_paths()
    install(rep, deb)
    check_programs(rep, version, tmp)
    check_man(rep, version)
    check_completion(rep)
    check_units(rep, tmp)
    purge(rep, before)


if __name__ == "__main__":
    report.main("package/deb", body)
