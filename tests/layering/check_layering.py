#!/usr/bin/env python3
"""check_layering.py - hold the build's include rules and docs/architecture.md
to each other.

The layout table in docs/architecture.md says, for every library folder, which
other folders its files may include. The build enforces an include rule with
include views (the root CMakeLists.txt): a file sees "F/..." only when its
library links F's library. This script compiles (-fsyntax-only, with the
exact command CMake generated, from compile_commands.json) one probe per
ordered pair of folders (tests/layering/CMakeLists.txt) and checks that

  - every probe the table allows compiles,
  - every probe the table forbids fails, and fails because the header is not
    found (not for some other reason),
  - the table and the build list the same folders,

and that the system headers some folders own (Linux uapi and liburing in
platform/, Asio and libsystemd in service/, toml++ in conf/, CLI11 in apps/, nlohmann's
JSON in service/ and apps/) appear nowhere else, since they live in /usr/include where no
include view can hide them.
It also refuses `#include "../...`, which would walk around the views.

Usage: check_layering.py --build-dir B --source-dir S --manifest B/tests/layering/probes.txt
Exit status 0 when everything holds; the last line counts checks passed and failed.
"""
import argparse
import glob
import os
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys

# System headers that only some folders may include: (regex on the include, folders).
OWNED_SYSTEM_HEADERS = [
    (re.compile(r'#include\s*<linux/'), ('platform',)),
    (re.compile(r'#include\s*<liburing'), ('platform',)),
    (re.compile(r'#include\s*<(seccomp\.h|sys/capability\.h|cap-ng\.h)'), ('platform',)),
    (re.compile(r'#include\s*<asio'), ('service',)),
    (re.compile(r'#include\s*<systemd/'), ('service',)),
    (re.compile(r'#include\s*<toml\+\+/'), ('conf',)),
    # The status JSON is written in service/ and read back in apps/ (show, the benchmarks).
    (re.compile(r'#include\s*<nlohmann/'), ('service', 'apps')),
    (re.compile(r'#include\s*<CLI/'), ('apps',)),
]
SOURCE_DIRS = ['base', 'crypto', 'tunnel', 'ike', 'virtio', 'platform', 'conf', 'datapath', 'service', 'apps']


def read_table(path):
    """read_table() - {folder: set of folders it may include} from the layout table."""
    allowed = {}
    in_table = False
    for line in open(path, encoding='utf-8'):
        if line.startswith('| folder'):
            in_table = True
            continue
        if in_table and not line.startswith('|'):
            break
        if not in_table or line.startswith('|--'):
            continue
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        m = re.fullmatch(r'`([a-z/]+)/`', cells[0])
        if not m:
            continue
        allowed[m.group(1)] = set(re.findall(r'`([a-z/]+)/`', cells[-1]))
    return allowed


def read_manifest(path):
    """read_manifest() - [(module, folder, header, target, source)] of the probes."""
    return [tuple(line.split()) for line in open(path, encoding='utf-8') if line.strip()]


def probe_commands(build_dir):
    """probe_commands() - {probe source: compile command} from compile_commands.json."""
    import json
    with open(os.path.join(build_dir, 'compile_commands.json'), encoding='utf-8') as f:
        entries = json.load(f)
    return {e['file']: (e['directory'], e['command']) for e in entries if '/tests/layering/probes/' in e['file']}


def compile_probe(entry):
    """compile_probe() - run one probe's compile command with -fsyntax-only; (ok, output)."""
    directory, command = entry
    argv = shlex.split(command)
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == '-o':
            skip = True
        elif a != '-c':
            out.append(a)
    r = subprocess.run(out + ['-fsyntax-only'], cwd=directory, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout


def check_sources(source_dir, fail, ok):
    """check_sources() - owned system headers and "../" includes, by grep."""
    found = 0
    for top in SOURCE_DIRS:
        for path in glob.glob(os.path.join(source_dir, top, '**', '*.[ch]pp'), recursive=True):
            rel = os.path.relpath(path, source_dir)
            for n, line in enumerate(open(path, encoding='utf-8'), 1):
                if re.match(r'\s*#include\s*"\.\./', line):
                    found += 1
                    fail(f'{rel}:{n}: includes through "../", which walks around the include views')
                for pattern, owners in OWNED_SYSTEM_HEADERS:
                    if pattern.match(line) and not any(rel.startswith(o + '/') for o in owners):
                        found += 1
                        fail(f'{rel}:{n}: {line.strip()} belongs to {" and ".join(o + "/" for o in owners)} only')
    if not found:
        ok('owned system headers (<linux/*>, liburing, seccomp and capabilities, Asio, libsystemd, toml++, '
           'CLI11, nlohmann/json) and "../" includes')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build-dir', required=True)
    ap.add_argument('--source-dir', required=True)
    ap.add_argument('--manifest', required=True)
    args = ap.parse_args()

    passed, failed = [0], [0]

    def ok(what):
        passed[0] += 1
        print(f'ok: {what}')

    def fail(what):
        failed[0] += 1
        print(f'FAIL: {what}')

    table = read_table(os.path.join(args.source_dir, 'docs/architecture.md'))
    probes = read_manifest(args.manifest)
    modules = sorted({p[0] for p in probes})
    if set(table) != set(modules):
        fail(f'architecture.md lists {sorted(table)}, the build has {modules}')
    else:
        ok(f'architecture.md and the build list the same {len(modules)} folders')

    commands = probe_commands(args.build_dir)
    missing = [p[4] for p in probes if p[4] not in commands]
    if missing:
        fail(f'no compile command for {len(missing)} probes (configure with CMAKE_EXPORT_COMPILE_COMMANDS)')
        probes = [p for p in probes if p[4] in commands]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(lambda p: compile_probe(commands[p[4]]), probes))
    for (module, folder, header, _target, source), (built, out) in zip(probes, results):
        may = folder in table.get(module, set())
        first_lines = ' | '.join(out.splitlines()[:4])
        if may and built:
            ok(f'{module}/ may include {folder}/ and does compile')
        elif may:
            fail(f'{module}/ may include {folder}/ per architecture.md, but the probe does not compile: {first_lines}')
        elif built:
            fail(f'{module}/ may not include {folder}/ per architecture.md, but "{header}" compiles there')
        elif f'fatal error: {header}: No such file or directory' in out:
            ok(f'{module}/ may not include {folder}/ and "{header}" is not found')
        else:
            fail(f'{module}/ including {folder}/ failed for another reason than a missing header: {first_lines}')

    check_sources(args.source_dir, fail, ok)
    print(f'{passed[0]} passed, {failed[0]} failed')
    return 1 if failed[0] else 0


if __name__ == '__main__':
    sys.exit(main())
