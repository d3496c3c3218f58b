# Check reporting and the common main() of the wire tests: every check is
# printed as it runs, the last line is PASS or FAIL, exit 0 only on PASS.
"""Reporting and the test runner shared by the wire tests."""

import os
import sys
import time
import traceback

import netns


class Report:
    """Collects checks; a failed check is recorded and the test goes on."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = []
        self.start = time.monotonic()
        self.on_failure = []  # callables printing diagnostics (e.g. log tails)

    def section(self, title):
        print(f"\n== {title}", flush=True)

    def info(self, msg):
        print(f"  ..  {msg}", flush=True)

    def check(self, cond, msg, detail=""):
        """check() - record one expectation; returns cond."""
        if cond:
            self.passed += 1
            print(f"  ok  {msg}", flush=True)
        else:
            self.failed.append(msg)
            print(f"  FAIL {msg}" + (f"\n       {detail}" if detail else ""), flush=True)
        return bool(cond)

    def equal(self, got, want, msg):
        return self.check(got == want, f"{msg}: {want!r}" if got == want else msg,
                          f"got {got!r}, want {want!r}")

    def require(self, cond, msg, detail=""):
        """require() - like check(), but a failure ends the test."""
        if not self.check(cond, msg, detail):
            raise netns.TestError(msg + (f": {detail}" if detail else ""))

    def run_cases(self, steps, *args, only=None):
        """run_cases() - steps: [(title, fn)]; each as section "case N",
        called fn(report, *args, tag). A TestError ends that case alone (a
        failed check naming it); the next one still runs. only: the case
        numbers to run (None: all)."""
        for n, (title, fn) in enumerate(steps):
            if only is not None and n + 1 not in only:
                continue
            self.section(title)
            t0 = time.monotonic()
            tag = f"case {n + 1}"
            try:
                fn(self, *args, tag)
            except netns.TestError as e:
                first, _, rest = str(e).partition("\n")
                self.check(False, f"[{tag}] {first}", rest.strip()[:2000])
            self.info(f"{tag} took {time.monotonic() - t0:.1f} s")

    def finish(self):
        secs = time.monotonic() - self.start
        if self.failed:
            for fn in self.on_failure:
                try:
                    fn()
                except Exception as e:
                    print(f"  (diagnostics failed: {e})")
            print(f"\nFAIL: {self.name}: {len(self.failed)} of "
                  f"{len(self.failed) + self.passed} checks failed ({secs:.1f} s)")
            for m in self.failed[:20]:
                print(f"  - {m}")
            return 1
        print(f"\nPASS: {self.name}: {self.passed} checks ({secs:.1f} s)")
        return 0


def main(name, body, tools=("ip",)):
    """main() - run body(report, build_dir) with clean-up on every exit path."""
    report = Report(name)
    netns.install_signal_handlers()
    try:
        if len(sys.argv) != 2:
            raise netns.TestError(f"usage: {sys.argv[0]} BUILD_DIR "
                                  "(the folder holding esptun-gateway)")
        build = os.path.abspath(sys.argv[1])
        netns.require_environment(tools)
        for prog in ("esptun-gateway",):
            if not os.access(os.path.join(build, prog), os.X_OK):
                raise netns.TestError(f"{prog} not found in {build}: build it first")
        body(report, build)
    except netns.TestError as e:
        report.failed.append(str(e).splitlines()[0])
        print(f"  FAIL {e}", flush=True)
    except (KeyboardInterrupt, SystemExit) as e:
        report.failed.append(f"interrupted ({type(e).__name__})")
        print("  FAIL interrupted", flush=True)
    except Exception:
        report.failed.append("unexpected exception (test bug or tool failure)")
        traceback.print_exc()
    finally:
        rc = report.finish()
        netns.run_cleanups()
    sys.exit(rc)
