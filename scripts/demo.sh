#!/usr/bin/env bash
# demo.sh - from a fresh machine to a running tunnel: install what the
# build and the demo need (setup.sh --demo: compiler, libraries, iproute2;
# test.sh installs the rest), build and run `esptun-bench demo`, which starts two
# gateways in two network namespaces and pings and moves data through them.
# Extra arguments go to the demo, e.g. scripts/demo.sh --cipher aes256-gcm.
# Needs root (namespaces, tun devices).
set -euo pipefail
cd "$(dirname "$0")/.."
if ((EUID != 0)); then
	echo "demo.sh: needs root (network namespaces and tun devices)" >&2
	exit 1
fi
scripts/setup.sh --demo
# The same configuration as test.sh, so running one after the other does
# not rebuild build/ from scratch.
cmake -S . -B build -DESPTUN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
exec build/esptun-bench demo "$@"
