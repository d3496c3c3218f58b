#!/usr/bin/env bash
# build-deb.sh - build the Debian package with `dpkg-buildpackage -b -uc -us`
# (debian/rules: the three programs, no tests) from a copy of the source
# tree, and put what it makes into OUTDIR:
#   scripts/build-deb.sh [OUTDIR]     (default build/deb)
#   -> esptun_<version>_amd64.deb, its -dbgsym .deb, .changes, .buildinfo
# dpkg-buildpackage writes into the tree (debian/esptun/, obj-*/) and its
# results next to it, in the tree's parent folder; the copy in a temporary
# folder keeps both the repository and its parent clean. The copy holds the
# files git tracks plus untracked ones it does not ignore, so local edits
# are packaged and build folders are not.
# Environment: JOBS (default: the number of CPUs) compile jobs;
# ESPTUN_PREBUILT_DIR=DIR (an absolute path; scripts/test.sh) packages the
# programs already built in the CMake tree DIR (debian/rules says how).
set -euo pipefail
if [[ "${1:-}" == -* ]]; then
	echo "usage: build-deb.sh [OUTDIR]   (default build/deb)" >&2
	exit 2
fi
cd "$(dirname "$0")/.."
out=$(realpath -m -- "${1:-build/deb}")
jobs=${JOBS:-$(nproc)}
work=$(mktemp -d /tmp/esptun-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM # the EXIT trap then cleans up too

mkdir "$work/esptun"
# --ignore-failed-read: a tracked file deleted in the work tree is skipped.
git ls-files -z --cached --others --exclude-standard |
	tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$work/esptun"

start=$(date +%s)
(cd "$work/esptun" && dpkg-buildpackage -b -uc -us -j"$jobs")
echo "build-deb.sh: dpkg-buildpackage took $(($(date +%s) - start)) s"

mkdir -p "$out"
rm -f "$out"/esptun*.deb "$out"/esptun*.changes "$out"/esptun*.buildinfo
mv "$work"/esptun*.deb "$work"/esptun*.changes "$work"/esptun*.buildinfo "$out"/
ls -l "$out"
