# bench_run.py - run an esptun-bench command from a test: its output shown as
# it would be by hand, a time limit that fails the test rather than hanging
# it, and the JSON report read back when it asked for one.
import json
import os
import subprocess

from netns import TestError


def bench_program(build):
    """bench_program() - esptun-bench in @build; TestError when it is not built"""
    bench = os.path.join(build, "esptun-bench")
    if not os.access(bench, os.X_OK):
        raise TestError(f"esptun-bench not found in {build}: build it first")
    return bench


def run(cmd, timeout, json_path=None):
    """run() - run @cmd (a list, esptun-bench first) and print what it printed.
    Returns (the CompletedProcess, the JSON document at @json_path or None)."""
    print("+ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TestError(f"{' '.join(cmd[:2])} did not finish within {timeout} s")
    print(p.stdout, flush=True)
    if p.stderr.strip():
        print("stderr:\n" + p.stderr, flush=True)
    doc = None
    if json_path and os.path.exists(json_path):
        with open(json_path) as f:
            doc = json.load(f)
    return p, doc
