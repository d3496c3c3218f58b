#!/usr/bin/env bash
# test.sh - the whole suite, as CI runs it (.ci/run), from a fresh machine:
#   1. setup.sh            install missing packages
#   2. build/              gcc, -DESPTUN_WERROR=ON, the programs and test
#                          tools but not the unit tests (step 3 builds and
#                          runs those; unit-platform is built for the VM's
#                          udp-gso scenario), then ctest: interop, netns, bench;
#                          then the vm label once step 3 is built
#   3. build-fuzz/         clang build with ASan+UBSan and libFuzzer's
#                          coverage, warnings as errors too (at nice 19
#                          during step 2's wire tests): the unit tests run
#                          there (ctest -L unit, the sanitizer pass), then
#                          each fuzz-* target for ESPTUN_FUZZ_SECONDS
#                          (default 10) over a copy of
#                          tests/fuzz/corpus/<name>/
#   4. build/deb/          the Debian package (scripts/build-deb.sh, after 3,
#                          in the background at nice 19) of build/'s
#                          programs (ESPTUN_PREBUILT_DIR, debian/rules: its
#                          checks are about the package), then ctest -L
#                          package on it (lintian, install, purge), also in
#                          the background; its result is collected after 3
#   5. format              clang-format --dry-run --Werror (check-format.sh)
# `test.sh --setup-only` runs step 1 and stops (tests/package/
# test_readme_commands.py runs the README's commands that way, as CI itself
# is a run of this script).
# Every step runs even when an earlier one failed (except that a failed
# build skips its own tests); the summary at the end lists each step, and the
# exit status is non-zero when any step failed. Needs root: the netns and
# interop tests create namespaces and tun devices.
set -uo pipefail
cd "$(dirname "$0")/.."
setup_only=0
case "${1:-}" in
"") ;;
--setup-only) setup_only=1 ;;
*)
	echo "usage: test.sh [--setup-only]" >&2
	exit 2
	;;
esac
root=$PWD
jobs=$(nproc)
fuzz_seconds=${ESPTUN_FUZZ_SECONDS:-10}
logdir=$(mktemp -d /tmp/esptun-test.XXXXXX)
trap 'rm -rf "$logdir"' EXIT

results=()  # "status|step|seconds"
failed=0
ctest_closing=""

# record() - remember the outcome of a step for the summary
# $1: exit status, $2: step name, $3: start time (seconds since epoch)
record() {
	local status=ok
	if (($1 != 0)); then
		status=FAILED
		failed=1
	fi
	results+=("$status|$2|$(($(date +%s) - $3))")
	echo "=== $2: $status"
}

# step() - run a command as a named step: step NAME CMD ARGS...
step() {
	local name=$1 start rc
	shift
	echo
	echo "=== $name: $*"
	start=$(date +%s)
	"$@"
	rc=$?
	record "$rc" "$name" "$start"
	return "$rc"
}

# run_ctest() - ctest with its output visible, keeping its closing line
# $1: build dir; further arguments go to ctest
run_ctest() {
	local dir=$1 rc
	shift
	ctest --test-dir "$dir" --output-on-failure --no-tests=error "$@" 2>&1 | tee "$logdir/ctest.log"
	rc=${PIPESTATUS[0]}
	local closing
	closing=$(grep -E '^[0-9]+% tests passed' "$logdir/ctest.log" | tail -n 1)
	[[ -n "$closing" ]] && ctest_closing+="  $dir: $closing"$'\n'
	collect_failures "$dir" "$logdir/ctest.log"
	return "$rc"
}

# collect_failures() - keep the lines of ctest log $2 (from build dir $1)
# that say what failed: ctest's verdicts, doctest's failed checks with their
# values, the netns tests' FAIL lines, sanitizer reports. The summary repeats
# them, so the end of a long log says why and not only that a test failed.
collect_failures() {
	grep -E -A1 '\*\*\*(Failed|Timeout|Exception)|: ERROR: |^ *FAIL |(Address|Leak|Undefined)Sanitizer|runtime error:' "$2" |
		grep -v '^--$' | sed "s|^|  $1: |" >>"$logdir/failures.txt"
}

# targets_named() - the build targets of build dir $1 whose names start with $2
targets_named() {
	cmake --build "$1" --target help | grep -oE "\\b$2[A-Za-z0-9_-]+" | sort -u
}

# build_fuzzers() - configure build-fuzz (clang, ASan+UBSan) and build the
# libFuzzer targets and the unit tests: one sanitized build of the tree
# serves both (a separate gcc ASan build cost CI a full compile more).
build_fuzzers() {
	local targets
	CXX=clang++ cmake -S . -B build-fuzz -DESPTUN_FUZZ=ON -DESPTUN_WERROR=ON \
		-DCMAKE_CXX_COMPILER=clang++ || return 1
	targets="$(targets_named build-fuzz fuzz-) $(targets_named build-fuzz unit-)"
	[[ -n "${targets// /}" ]] || return 0
	# shellcheck disable=SC2086 # one target name per word
	cmake --build build-fuzz -j"$jobs" --target $targets
}

# fuzz_one() - run libFuzzer target $1 for fuzz_seconds over a copy of its
# corpus; its output goes to $logdir/$1.log, its exit status to $1.rc
fuzz_one() {
	local name=$1 corpus work rc=0
	corpus=tests/fuzz/corpus/${name#fuzz-}
	work=$(mktemp -d "$logdir/$name.XXXXXX")
	[[ -d "$corpus" ]] && cp -r "$corpus/." "$work/"
	echo "--- $name: ${fuzz_seconds}s over $(find "$work" -type f | wc -l) corpus files" >"$logdir/$name.head"
	"build-fuzz/$name" -max_total_time="$fuzz_seconds" -timeout=10 -print_final_stats=1 \
		-artifact_prefix="$logdir/$name-" "$work" >"$logdir/$name.log" 2>&1 || rc=1
	echo "$rc" >"$logdir/$name.rc"
}

# run_fuzzers() - run each built libFuzzer target for a bounded time, as many
# at once as there are CPUs (each target is one process on one CPU), and
# report them in name order
run_fuzzers() {
	local targets name rc=0 running=0
	targets=$(targets_named build-fuzz fuzz-)
	if [[ -z "$targets" ]]; then
		echo "no fuzz targets (tests/fuzz/fuzz_*.cpp)"
		return 0
	fi
	# In a subshell: its wait sees only the fuzzers, not the package build
	# this shell runs in the background.
	(
		for name in $targets; do
			if ((running >= jobs)); then
				wait -n
				running=$((running - 1))
			fi
			fuzz_one "$name" &
			running=$((running + 1))
		done
		wait
	)
	for name in $targets; do
		cat "$logdir/$name.head"
		if [[ "$(cat "$logdir/$name.rc" 2>/dev/null)" == 0 ]]; then
			grep -E '^(Done|stat::number_of_executed_units)' "$logdir/$name.log" || true
		else
			rc=1
			echo "$name FAILED; end of its log:"
			tail -n 60 "$logdir/$name.log"
			for a in "$logdir/$name-"*; do
				[[ -f "$a" ]] || continue
				mkdir -p build-fuzz/artifacts && cp "$a" build-fuzz/artifacts/
				echo "crash input saved to build-fuzz/artifacts/$(basename "$a")"
			done
		fi
	done
	return "$rc"
}

if ((EUID != 0)); then
	echo "test.sh: the netns and interop tests need root" >&2
fi

step "setup" scripts/setup.sh || exit 1
if ((setup_only)); then
	echo "test.sh: --setup-only: stopping after setup"
	exit 0
fi

# background_builds() - the sanitizer and fuzz build, leaving its log in
# $logdir/build-fuzz.log and its exit status in build-fuzz.rc
background_builds() {
	build_fuzzers >"$logdir/build-fuzz.log" 2>&1
	echo $? >"$logdir/build-fuzz.rc"
}

# package_chain() - step 4, at nice 19 like background_builds and after it,
# so the VM tests, which wait for those builds, never wait for this one:
# build the Debian package into build/deb, then `ctest -L package` (lintian,
# install, purge: tests/package/test_deb.py), which needs build/ too. Logs
# and exit statuses in $logdir/{build-deb,package}.{log,rc}.
package_chain() {
	while [[ ! -s "$logdir/build-fuzz.rc" ]] && kill -0 "$bg_pid" 2>/dev/null; do
		sleep 5
	done
	# From build/'s programs (debian/rules: ESPTUN_PREBUILT_DIR): CI checks
	# what the package holds, lintian's verdict and the install, and the
	# programs are the ones the tests ran; compiling them a third time took
	# CI several minutes.
	ESPTUN_PREBUILT_DIR="$root/build" JOBS=$jobs \
		scripts/build-deb.sh build/deb >"$logdir/build-deb.log" 2>&1
	echo $? >"$logdir/build-deb.rc"
	if [[ "$(cat "$logdir/build-deb.rc")" == 0 && -x build/esptun-gateway ]]; then
		ctest --test-dir build --output-on-failure --no-tests=error -L package \
			>"$logdir/package.log" 2>&1
		echo $? >"$logdir/package.rc"
	fi
}

# finish_package() - wait for package_chain and record its package build and
# package test as steps; $1: when the chain was started
finish_package() {
	local rc closing
	wait "$pkg_pid"
	[[ -s "$logdir/build-deb.rc" ]] || echo 1 >"$logdir/build-deb.rc"
	rc=$(cat "$logdir/build-deb.rc")
	if ((rc != 0)); then
		echo "--- build-deb failed; end of its log:"
		tail -n 80 "$logdir/build-deb.log"
	else
		grep -E '^build-deb.sh: dpkg-buildpackage took' "$logdir/build-deb.log"
	fi
	record "$rc" "build-deb (background, from build to here)" "$1"
	[[ -s "$logdir/package.rc" ]] || return 0
	echo
	echo "=== ctest build/ -L package (background): its output"
	cat "$logdir/package.log"
	closing=$(grep -E '^[0-9]+% tests passed' "$logdir/package.log" | tail -n 1)
	collect_failures "build (package)" "$logdir/package.log"
	[[ -n "$closing" ]] && ctest_closing+="  build (package): $closing"$'\n'
	record "$(cat "$logdir/package.rc")" "ctest build/ -L package (background)" "$1"
}

# finish_background() - wait for background_builds and record its two builds
# as steps (with the end of the log of a failed one); $1: when they started
finish_background() {
	local name rc
	wait "$bg_pid"
	for name in build-fuzz; do
		[[ -s "$logdir/$name.rc" ]] || echo 1 >"$logdir/$name.rc"
		rc=$(cat "$logdir/$name.rc")
		if ((rc != 0)); then
			echo "--- $name failed; end of its log:"
			tail -n 80 "$logdir/$name.log"
		fi
		record "$rc" "$name (background, from build to here)" "$1"
	done
}

# The build type is pinned because demo.sh leaves build/ configured as Release.
if step "build (Werror)" bash -c \
	"cmake -S . -B build -DESPTUN_WERROR=ON -DESPTUN_UNIT_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DESPTUN_SYSTEMD_UNITDIR=/lib/systemd/system && cmake --build build -j$jobs"; then
	# The sanitizer and fuzz builds (about 13 minutes of compiling on two
	# cores) run at nice 19 while the wire tests run: those mostly wait on
	# namespaces, timers and transfers and keep their CPU share, since a nice
	# 19 process gets about 1.5% of a core that a nice 0 one wants. The VM
	# tests count kicks and syscalls of a TCG guest and run only after the
	# builds, on a quiet machine.
	bg_start=$(date +%s)
	(
		renice -n 19 -p "$BASHPID" >/dev/null
		background_builds
	) &
	bg_pid=$!
	(
		renice -n 19 -p "$BASHPID" >/dev/null
		package_chain
	) &
	pkg_pid=$!
	step "ctest build/ (interop, netns, bench)" run_ctest build -LE 'vm|package'
	finish_background "$bg_start"
	step "ctest build/ -L vm (qemu, quiet machine)" run_ctest build -L vm
else
	bg_start=$(date +%s)
	background_builds &
	bg_pid=$!
	package_chain &
	pkg_pid=$!
	finish_background "$bg_start"
fi

if [[ "$(cat "$logdir/build-fuzz.rc")" == 0 ]]; then
	# detect_leaks stays on; a leak is a failure like any other finding.
	ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1} \
		UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		step "ctest build-fuzz/ -L unit (ASan+UBSan)" run_ctest build-fuzz -L unit
	step "fuzz (${fuzz_seconds}s per target)" run_fuzzers
fi

finish_package "$bg_start"

step "format (clang-format)" scripts/check-format.sh

echo
echo "================ test.sh summary ================"
for r in "${results[@]}"; do
	IFS='|' read -r status name secs <<<"$r"
	printf '  %-7s %-42s %5ss\n' "$status" "$name" "$secs"
done
if [[ -n "$ctest_closing" ]]; then
	echo "ctest:"
	printf '%s' "$ctest_closing"
fi
if ((failed)) && [[ -s "$logdir/failures.txt" ]]; then
	echo "what failed (the first 60 lines; the full output is above):"
	head -n 60 "$logdir/failures.txt"
fi
if ((failed)); then
	echo "test.sh: FAILED"
	exit 1
fi
echo "test.sh: all steps passed"
