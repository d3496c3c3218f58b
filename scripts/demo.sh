#!/usr/bin/env bash
# demo.sh - from a fresh machine to a running tunnel: install what the
# build and the demo need (setup.sh --demo: compiler, libraries, iproute2;
# test.sh installs the rest), build and run `esptun-bench demo`, which starts two
# gateways in two network namespaces and pings and moves data through them.
# Extra arguments go to the demo, e.g. scripts/demo.sh --cipher aes256-gcm.
# Needs root (namespaces, tun devices).
#
# ESPTUN_BUILD_DIR=DIR (optional): instead of configuring and building build/
# here, bring the two programs the demo runs (esptun-bench, esptun-gateway)
# up to date in DIR, a build directory configured already (a relative path
# starts at the top of the tree), and run the demo from there. For a tree
# built elsewhere; tests/package/test_readme_commands.py uses it to follow
# the README without compiling everything a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
if ((EUID != 0)); then
	echo "demo.sh: needs root (network namespaces and tun devices)" >&2
	exit 1
fi
scripts/setup.sh --demo
build=${ESPTUN_BUILD_DIR:-}
if [[ -z "$build" ]]; then
	# The same configuration as test.sh, so running one after the other does
	# not rebuild build/ from scratch.
	cmake -S . -B build -DESPTUN_WERROR=ON -DESPTUN_UNIT_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DESPTUN_SYSTEMD_UNITDIR=/lib/systemd/system
	cmake --build build -j"$(nproc)"
	build=build
elif [[ -f "$build/CMakeCache.txt" ]]; then
	cmake --build "$build" -j"$(nproc)" --target esptun-bench esptun-gateway
else
	echo "demo.sh: ESPTUN_BUILD_DIR=$build is not a configured build directory" >&2
	exit 1
fi
exec "$build/esptun-bench" demo "$@"
