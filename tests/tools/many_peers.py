#!/usr/bin/python3
# many_peers.py - write a gateway config with N statically keyed peers (one
# /32 of allowed_ips each, random AES-256-GCM keys) and time how long
# `esptun-gateway check` and `esptun-gateway run` (to its "up" line, in a
# namespace of its own) take: the start-up figures of docs/scale.md.
#
#   tests/tools/many_peers.py BUILD_DIR [N ...]     (as root; default N: 2500 5000 10000)
#
# The namespace, the config and its folder are removed at the end.
"""Start-up time of esptun-gateway with many static peers."""

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time


def write_config(folder, n):
    lines = ["[tunnel]", 'interface = "many0"', 'addresses = ["10.250.0.1/16"]',
             'listen = "127.0.0.1:45000"', "mtu = 1400",
             f'control_socket = "{folder}/gw.sock"', f'state_dir = "{folder}/state"', ""]
    for i in range(n):
        lines += ["[[peer]]", f'name = "p{i}"', f'endpoint = "127.0.0.{2 + i % 200}:{20000 + i}"',
                  f'allowed_ips = ["10.{200 + i // 65536}.{(i // 256) % 256}.{i % 256}/32"]',
                  'cipher = "aes256-gcm"',
                  "  [peer.out]", f"  spi = 0x{0x10000 + i:x}", f'  key = "0x{secrets.token_hex(36)}"',
                  "  [peer.in]", f"  spi = 0x{0x40000 + i:x}", f'  key = "0x{secrets.token_hex(36)}"', ""]
    path = os.path.join(folder, f"gw{n}.toml")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("\n".join(lines))
    return path


def time_run(gateway, config, folder):
    ns = f"esptun-many-{os.getpid()}"
    log = os.path.join(folder, "run.log")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        with open(log, "w") as out:
            start = time.monotonic()
            p = subprocess.Popen(["ip", "netns", "exec", ns, gateway, "run", "-c", config],
                                 stdout=out, stderr=out)
            up = None
            while time.monotonic() - start < 60 and p.poll() is None:
                with open(log) as f:
                    if " up: " in f.read():
                        up = time.monotonic() - start
                        break
                time.sleep(0.01)
            p.terminate()
            p.wait(30)
        if up is None:
            with open(log) as f:
                sys.exit("esptun-gateway did not come up:\n" + f.read()[-2000:])
        return up
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__ + "\nusage: many_peers.py BUILD_DIR [N ...]")
    gateway = os.path.join(sys.argv[1], "esptun-gateway")
    sizes = [int(x) for x in sys.argv[2:]] or [2500, 5000, 10000]
    folder = tempfile.mkdtemp(prefix="esptun-many-")
    os.chmod(folder, 0o755)  # the gateway, once it runs as nobody, keeps its state_dir here
    try:
        print(f"{'peers':>7} {'check s':>8} {'run to up s':>12}", flush=True)
        for n in sizes:
            config = write_config(folder, n)
            start = time.monotonic()
            subprocess.run([gateway, "check", "-c", config], check=True, capture_output=True)
            check = time.monotonic() - start
            print(f"{n:>7} {check:>8.2f} {time_run(gateway, config, folder):>12.2f}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
