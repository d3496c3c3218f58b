#!/bin/bash
# run-vm.sh SCENARIO BUILD_DIR - boot Debian's kernel under qemu (TCG) with the
# test initramfs and run tests/vm/scenarios/SCENARIO.sh inside it.
#
# Exit 0 only when the scenario printed "SCENARIO_PASS SCENARIO" and nothing
# failed (no FAIL result, no module that would not load, no timeout). Missing
# qemu, kernel, busybox or a binary the scenario needs is a failure, never a
# skip. The serial log is kept as BUILD_DIR/vm-logs/SCENARIO-<time>.log
# (SCENARIO.log points at the newest).
#
# Environment (all optional):
#   ESPTUN_VM_TIMEOUT  seconds before qemu is killed (default 300)
#   ESPTUN_VM_APPEND   extra kernel command line, e.g. "esptun.xfer_kb=4096"
#   ESPTUN_VM_MEM      guest MiB (default 384)
#   ESPTUN_VM_ACCEL    tcg (default; KVM here cannot boot a stock kernel), or kvm
#                      where it can; the guest sees it as esptun.accel=
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
fail() {
	echo "run-vm: FAIL: $*" >&2
	exit 1
}
[ $# -eq 2 ] || fail "usage: $0 SCENARIO BUILD_DIR (scenarios: $(cd "$HERE/scenarios" && ls *.sh | sed 's/\.sh$//' | tr '\n' ' '))"
SCENARIO=$1
BUILD=$(cd "$2" 2>/dev/null && pwd) || fail "BUILD_DIR $2 does not exist"
SCRIPT=$HERE/scenarios/$SCENARIO.sh
[ -f "$SCRIPT" ] || fail "no scenario $SCENARIO (no $SCRIPT)"
command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86_64 not found: install the qemu-system-x86 package"
command -v timeout >/dev/null || fail "timeout(1) not found: install coreutils"

# The scenario's "# vm-requires: esptun-gateway ..." line names the binaries it
# needs from BUILD_DIR; without them the run could only fail inside the VM.
for b in $(sed -n 's/^# vm-requires:\([^(]*\).*/\1/p' "$SCRIPT"); do
	[ -x "$BUILD/$b" ] || fail "$SCENARIO needs $BUILD/$b: build it first (cmake --build $BUILD)"
done

# Build (or reuse) the initramfs. Serialised: parallel ctest runs share it.
OUT=$BUILD/vm-initramfs
mkdir -p "$OUT" "$BUILD/vm-logs"
if command -v flock >/dev/null; then
	flock "$OUT/.lock" "$HERE/build-initramfs.sh" "$OUT" "$BUILD" || fail "initramfs build failed (see above)"
else
	"$HERE/build-initramfs.sh" "$OUT" "$BUILD" || fail "initramfs build failed (see above)"
fi
# shellcheck source=/dev/null
. "$OUT/vm.env"
[ -r "$KERNEL" ] && [ -s "$INITRAMFS" ] || fail "kernel $KERNEL or initramfs $INITRAMFS missing"

TMO=${ESPTUN_VM_TIMEOUT:-300}
MEM=${ESPTUN_VM_MEM:-384}
ACCEL=${ESPTUN_VM_ACCEL:-tcg}
LOG=$BUILD/vm-logs/$SCENARIO-$(date +%Y%m%d-%H%M%S).log
ln -sfn "$(basename "$LOG")" "$BUILD/vm-logs/$SCENARIO.log"
CMDLINE="console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init esptun.scenario=$SCENARIO esptun.accel=$ACCEL ${ESPTUN_VM_APPEND:-}"
echo "run-vm: $SCENARIO on $KVER ($ACCEL, ${MEM} MiB, timeout ${TMO}s), log $LOG"

START=$(date +%s%N)
# timeout(1) is qemu's parent: on expiry it kills exactly this qemu (TERM, then
# KILL 5 s later). -no-reboot + panic=-1: a guest panic ends qemu at once.
timeout -k 5 "$TMO" qemu-system-x86_64 -accel "$ACCEL" -cpu max -m "$MEM" -smp 1 \
	-nodefaults -no-user-config -nographic -serial stdio -monitor none -no-reboot -net none \
	-kernel "$KERNEL" -initrd "$INITRAMFS" -append "$CMDLINE" </dev/null >"$LOG" 2>&1
RC=$?
WALL=$((($(date +%s%N) - START) / 1000000))
case $RC in
124 | 137) echo "run-vm: TIMEOUT after ${TMO}s: qemu killed" | tee -a "$LOG" ;;
esac

# The serial console ends lines with \r\n, and SeaBIOS leaves escape sequences.
clean_log() { tr -d '\r' <"$LOG" | sed -E 's/\x1b(\[[0-9;?]*[A-Za-z]|c)//g'; }
clean_log | grep -aE '^(RESULT |SCENARIO_PASS|SCENARIO_FAIL|INSMOD_FAIL|VM_INIT|VM_MODULES|VM_SCENARIO_EXIT|NOTE |TABLE )|Kernel panic|Oops|BUG:'
printf 'run-vm: qemu rc=%s, %d.%03d s wall\n' "$RC" $((WALL / 1000)) $((WALL % 1000))

verdict=PASS
# Not grep -q: it exits at the first match, and with pipefail the SIGPIPE that
# sed then gets on a log over 4 KiB would turn a PASS into a FAIL.
clean_log | grep -a "^SCENARIO_PASS $SCENARIO\$" >/dev/null || verdict=FAIL
clean_log | grep -aE '^(RESULT .* FAIL|SCENARIO_FAIL|INSMOD_FAIL)|Kernel panic' >/dev/null && verdict=FAIL
[ "$RC" = 0 ] || verdict=FAIL
echo "run-vm: $SCENARIO $verdict (log $LOG)"
[ $verdict = PASS ]
