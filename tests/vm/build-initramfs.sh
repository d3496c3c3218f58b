#!/bin/bash
# build-initramfs.sh OUT_DIR BUILD_DIR - the busybox initramfs the VM tests
# boot (see README.md). Finds the installed Debian kernel, packs busybox,
# iproute2's ip, esptun's binaries from BUILD_DIR (with their shared
# libraries), the kernel modules for tun/vhost-net/veth/XFRM/ESP and their
# crypto, vmtool (built here, static) and the scenario scripts.
#
# Writes OUT_DIR/vm.env (KERNEL=, INITRAMFS=, KVER=) for run-vm.sh. The image is
# named after a hash of everything that goes into it, so a re-run with the same
# inputs only hashes files (well under a second) and rebuilds nothing.
#
# Environment: ESPTUN_VM_KERNEL=/boot/vmlinuz-VER picks a kernel explicitly.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
die() {
	echo "build-initramfs: $*" >&2
	exit 1
}
note() { echo "build-initramfs: $*" >&2; }

[ $# -eq 2 ] || die "usage: $0 OUT_DIR BUILD_DIR"
OUT=$1
BUILD=$(cd "$2" 2>/dev/null && pwd) || die "BUILD_DIR $2 does not exist"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# --- 1. host tools ------------------------------------------------------------
need() { # need COMMAND PACKAGE
	command -v "$1" >/dev/null 2>&1 || die "'$1' not found: install the $2 package (apt-get install $2)"
}
need qemu-system-x86_64 qemu-system-x86
need cpio cpio
need gzip gzip
need modinfo kmod
need gcc gcc
need ldd libc-bin
need sha256sum coreutils

BUSYBOX=""
for b in /bin/busybox /usr/bin/busybox /sbin/busybox; do
	[ -x "$b" ] && { BUSYBOX=$b; break; }
done
[ -n "$BUSYBOX" ] || die "busybox not found: install the busybox-static package (apt-get install busybox-static)"
IPROUTE=""
for b in /usr/sbin/ip /sbin/ip /usr/bin/ip /bin/ip; do
	[ -x "$b" ] && "$b" -V 2>/dev/null | grep -q iproute2 && { IPROUTE=$b; break; }
done
[ -n "$IPROUTE" ] || die "iproute2's ip not found: install the iproute2 package (apt-get install iproute2)"

# --- 2. kernel: the newest /boot/vmlinuz-VER that has /lib/modules/VER --------
KERNEL=${ESPTUN_VM_KERNEL:-}
if [ -z "$KERNEL" ]; then
	for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -rV); do
		if [ -d "/lib/modules/${k#/boot/vmlinuz-}/kernel" ]; then
			KERNEL=$k
			break
		fi
	done
fi
[ -n "$KERNEL" ] || die "no kernel: need /boot/vmlinuz-VER together with /lib/modules/VER/ (found kernels: $(ls /boot/vmlinuz-* 2>/dev/null | tr '\n' ' ')); install the linux-image-amd64 package (apt-get install linux-image-amd64)"
[ -e "$KERNEL" ] || die "kernel $KERNEL does not exist: install the linux-image-amd64 package (apt-get install linux-image-amd64)"
[ -r "$KERNEL" ] || die "$KERNEL is not readable (run as root, or chmod it)"
KVER=${KERNEL#/boot/vmlinuz-}
MODDIR=/lib/modules/$KVER
[ -d "$MODDIR/kernel" ] || die "$MODDIR/kernel missing for $KERNEL: install the matching linux-image package"

# --- 3. modules: wanted list -> dependencies (modinfo), deps first ------------
# A trailing '?' marks a module that may be missing without failing the build.
# The crypto RNG modules (drbg, jitterentropy_rng, sha512/sha3) are needed or
# `ip xfrm state add` fails with "unable to initialize cryptographic
# operations"; authencesn is what `flag esn` needs with CBC+HMAC.
WANT="tun tap vhost_iotlb vhost vhost_net veth dummy
	xfrm_algo xfrm_user esp4 esp6 tunnel4? tunnel6? xfrm4_tunnel? xfrm6_tunnel?
	cryptd crypto_simd aesni_intel aes_generic? cbc ctr gf128mul ghash_generic ghash_clmulni_intel? gcm
	authenc authencesn echainiv seqiv hmac sha1_generic sha1_ssse3? sha256_generic sha256_ssse3?
	sha512_generic sha512_ssse3? sha3_generic jitterentropy_rng drbg"
MOD_ORDER=() # paths below $MODDIR, dependencies first
MOD_FILES=() # absolute paths on the host
MOD_BUILTIN=()
declare -A SEEN=()
add_mod() { # add_mod NAME OPTIONAL
	local name=$1 optional=$2 f d
	[ -n "${SEEN[$name]:-}" ] && return 0
	SEEN[$name]=1
	if ! f=$(modinfo -k "$KVER" -F filename "$name" 2>/dev/null) || [ -z "$f" ]; then
		[ "$optional" = 1 ] && { note "optional module $name not in $KVER, skipped"; return 0; }
		die "module $name not found for kernel $KVER (modinfo -k $KVER $name)"
	fi
	f=$(echo "$f" | head -n1)
	# modinfo prints "(builtin)" (or, older kmod, "builtin") for built-in ones.
	case "$f" in
	"(builtin)" | builtin*) MOD_BUILTIN+=("$name"); return 0 ;;
	esac
	for d in $(modinfo -k "$KVER" -F depends "$name" | tr ',' ' '); do
		add_mod "$d" 0
	done
	MOD_FILES+=("$f")
	MOD_ORDER+=("${f#"$MODDIR"/}")
}
for m in $WANT; do
	case "$m" in
	*\?) add_mod "${m%\?}" 1 ;;
	*) add_mod "$m" 0 ;;
	esac
done

# --- 4. binaries and their shared libraries ------------------------------------
BINS=("$IPROUTE")
PROJECT_BINS=()
for b in esptun-gateway esptun-client esptun-bench tests/unit-platform; do
	if [ -x "$BUILD/$b" ]; then
		PROJECT_BINS+=("$BUILD/$b")
	else
		note "warning: $BUILD/$b not built; scenarios that need it will fail"
	fi
done
BINS+=(${PROJECT_BINS[@]+"${PROJECT_BINS[@]}"})
# strace, when the host has it: vhost-counts.sh cross-checks the self-counts.
STRACE=$(command -v strace || true)
[ -n "$STRACE" ] && BINS+=("$STRACE")
LIBS=()
if ldd "$BUSYBOX" >/dev/null 2>&1; then BINS+=("$BUSYBOX"); fi # a dynamic busybox
for b in "${BINS[@]}"; do
	# "libfoo.so => /path (addr)" and "/lib64/ld-linux-x86-64.so.2 (addr)"
	for l in $(ldd "$b" 2>/dev/null | grep -o '/[^ ]*' || true); do
		LIBS+=("$l")
	done
	if ldd "$b" 2>/dev/null | grep -q 'not found'; then
		die "$b needs libraries that are not installed: $(ldd "$b" | grep 'not found' | tr -s ' \t' ' ')"
	fi
done
mapfile -t LIBS < <(printf '%s\n' ${LIBS[@]+"${LIBS[@]}"} | sort -u)

VM_FILES=("$HERE/build-initramfs.sh" "$HERE/init" "$HERE/vmtool.c" "$HERE/lib.sh")
for s in "$HERE"/scenarios/*.sh; do VM_FILES+=("$s"); done

# --- 5. cache key: the content of every input ----------------------------------
HASH=$( {
	echo "kernel $KERNEL $KVER"
	printf 'module %s\n' "${MOD_ORDER[@]}"
	sha256sum "$BUSYBOX" "${BINS[@]}" "${LIBS[@]}" "${MOD_FILES[@]}" "${VM_FILES[@]}" "$KERNEL"
} | sha256sum | cut -c1-16)
IMG=$OUT/initramfs-$HASH.cpio.gz
write_env() {
	cat >"$OUT/vm.env" <<-EOF
		KERNEL=$KERNEL
		KVER=$KVER
		INITRAMFS=$IMG
	EOF
}
if [ -s "$IMG" ]; then
	write_env
	note "up to date: $IMG"
	exit 0
fi

# --- 6. build -------------------------------------------------------------------
START=$(date +%s%N)
R=$OUT/rootfs.tmp
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,dev,proc,sys,run,tmp,etc,var,scenarios} "$R/$MODDIR"

gcc -O2 -Wall -Wextra -static -o "$R/bin/vmtool" "$HERE/vmtool.c" ||
	die "gcc -static failed for vmtool.c (static libc: install libc6-dev)"

cp "$BUSYBOX" "$R/bin/busybox"
for a in $("$BUSYBOX" --list); do
	case "$a" in
	ip | busybox | modprobe | init | linuxrc) ;; # iproute2's ip instead; no modprobe helper
	*) ln -s busybox "$R/bin/$a" ;;
	esac
done
cp "$IPROUTE" "$R/bin/ip"
[ -n "$STRACE" ] && cp "$STRACE" "$R/bin/strace"
mkdir -p "$R/etc/iproute2"
# The user esptun drops to once set up ([tunnel] user, default nobody:
# README.md, "Privileges"); the VM's own files, not the host's.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$R/etc/group"
# Debug info is ~94% of a debug build's binary and triples the boot time spent
# loading the initramfs; --strip-debug keeps the symbols (backtraces still
# name functions).
for b in ${PROJECT_BINS[@]+"${PROJECT_BINS[@]}"}; do
	strip --strip-debug -o "$R/bin/$(basename "$b")" "$b" 2>/dev/null || cp "$b" "$R/bin/"
done
for l in ${LIBS[@]+"${LIBS[@]}"}; do
	mkdir -p "$R$(dirname "$l")"
	cp -L "$l" "$R$l"
done

# The kernel's built-in initramfs normally provides /dev/console; create it too
# when we can, so init has a console before devtmpfs is mounted.
mknod -m 600 "$R/dev/console" c 5 1 2>/dev/null || true
mknod -m 666 "$R/dev/null" c 1 3 2>/dev/null || true

: >"$R/modules.order.vm"
for rel in "${MOD_ORDER[@]}"; do
	src=$MODDIR/$rel
	ko=${rel%.xz}
	ko=${ko%.zst}
	ko=${ko%.gz}
	dst=$R/$MODDIR/$ko # busybox insmod takes plain .ko only: decompress
	mkdir -p "$(dirname "$dst")"
	case "$rel" in
	*.ko) cp "$src" "$dst" ;;
	*.ko.xz) xz -dc "$src" >"$dst" ;;
	*.ko.zst) zstd -qdc "$src" >"$dst" ;;
	*.ko.gz) gzip -dc "$src" >"$dst" ;;
	*) die "unknown module file type: $src" ;;
	esac
	echo "$ko" >>"$R/modules.order.vm"
done
printf '%s\n' ${MOD_BUILTIN[@]+"${MOD_BUILTIN[@]}"} >"$R/modules.builtin.vm"

cp "$HERE/init" "$R/init"
cp "$HERE/lib.sh" "$R/scenarios/lib.sh"
cp "$HERE"/scenarios/*.sh "$R/scenarios/"
chmod +x "$R/init" "$R"/scenarios/*.sh

rm -f "$OUT"/initramfs-*.cpio.gz
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | gzip -1 >"$IMG.tmp"
mv "$IMG.tmp" "$IMG"
rm -rf "$R"
write_env
note "built $IMG ($(du -h "$IMG" | cut -f1), ${#MOD_ORDER[@]} modules, kernel $KVER) in $((($(date +%s%N) - START) / 1000000)) ms"
