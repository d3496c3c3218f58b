#!/usr/bin/env bash
# setup.sh - install the Debian packages esptun needs to build, test and run
# its VM tests. Idempotent: when everything is present it only checks
# (well under a second) and touches nothing. Needs root only when something
# is missing.
#   setup.sh          everything test.sh (CI) needs
#   setup.sh --demo   only what the build and `esptun-bench demo` need
#                     (demo.sh): no qemu, kernel image, peers or resolver
set -euo pipefail
profile=all
case "${1:-}" in
"") ;;
--demo) profile=demo ;;
*)
	echo "usage: setup.sh [--demo]" >&2
	exit 2
	;;
esac

# Build: compiler, CMake, and the libraries the tree links against.
# libseccomp-dev: the system call allow-list after the privilege drop
# (platform/privileges.cpp); libseccomp checks the architecture and builds
# the filter program, which raw BPF would leave to us. libsystemd-dev:
# sd_notify(3) for the units' Type=notify and watchdog (service/notify.cpp).
# libcli11-dev: every program's command line (apps/cli/options.hpp).
build_pkgs=(g++ cmake make pkg-config libssl-dev liburing-dev libseccomp-dev libsystemd-dev libasio-dev
	libtomlplusplus-dev libcli11-dev nlohmann-json3-dev doctest-dev)
# Tests: namespaces and addresses (iproute2), traffic (iperf3, ping), the
# scapy interop peer, clang + its runtimes for the fuzz build and
# clang-format, and pgrep/sysctl (procps). openresolv (the resolvconf that
# tests/netns/test_ike_dns.py applies client DNS servers through) is added
# below unless the machine has another resolver manager it conflicts with.
# The Debian package (scripts/build-deb.sh, tests/package/test_deb.py):
# dpkg-dev and debhelper build it, lintian checks it, groff-base and man-db
# render its man pages (systemd-analyze verify looks up the units'
# Documentation= pages with man), bash-completion runs its completion.
# python3-prometheus-client's parser reads `status --format prometheus` in
# tests/netns/test_cli.py. python3-cryptography makes the test-time PKI of
# tests/netns/test_ike_strongswan_certs.py (tests/lib/test_pki.py).
test_pkgs=(iproute2 iperf3 iputils-ping python3-scapy clang clang-format libclang-rt-14-dev procps git
	dpkg-dev debhelper lintian groff-base man-db bash-completion python3-prometheus-client
	python3-cryptography)
# `esptun-bench compare` peers: userspace WireGuard (wireguard-go, configured
# with wg), OpenVPN 2.6, and strongSwan's charon with kernel-libipsec (the
# standard plugins bring the gcm and openssl crypto libipsec's AES-GCM needs;
# extauth brings EAP-MSCHAPv2 for the EAP interop tests).
# The tool runs them only inside namespaces it creates.
peer_pkgs=(wireguard-go wireguard-tools openvpn strongswan-charon strongswan-swanctl libcharon-extra-plugins
	libcharon-extauth-plugins libstrongswan-extra-plugins libstrongswan-standard-plugins)
# VM tests: a stock Debian kernel (vhost_net.ko, esp4.ko) booted under qemu
# with a busybox initramfs.
vm_pkgs=(qemu-system-x86 linux-image-amd64 busybox-static cpio kmod)

# is_installed() - true when dpkg reports package $1 as fully installed
is_installed() {
	[[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

# openresolv conflicts with systemd-resolved and Debian's resolvconf:
# installing it would remove them, so it is never added next to them (the
# DNS test then fails and says why).
if ! is_installed systemd-resolved && ! is_installed resolvconf; then
	test_pkgs+=(openresolv)
fi

# The demo builds the tree (tests included: doctest) and runs two gateways
# in namespaces set up with `ip`; it pings and transfers by itself.
if [[ $profile == demo ]]; then
	wanted=("${build_pkgs[@]}" iproute2)
else
	wanted=("${build_pkgs[@]}" "${test_pkgs[@]}" "${peer_pkgs[@]}" "${vm_pkgs[@]}")
fi

missing=()
for pkg in "${wanted[@]}"; do
	is_installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
	echo "setup.sh: all packages present"
	exit 0
fi

echo "setup.sh: missing: ${missing[*]}"
if ((EUID != 0)); then
	echo "setup.sh: installing packages needs root" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null

# Verify: apt-get can succeed and still leave a package half-configured.
still=()
for pkg in "${missing[@]}"; do
	is_installed "$pkg" || still+=("$pkg")
done
if ((${#still[@]})); then
	echo "setup.sh: still not installed after apt-get: ${still[*]}" >&2
	exit 1
fi
echo "setup.sh: installed ${missing[*]}"
