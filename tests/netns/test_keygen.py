#!/usr/bin/python3
# test_keygen.py - the key generation commands print what the loader takes:
# `genkey --cipher C` keys of C's lengths in "0x" hex, fresh each time;
# `genpsk` a 32-byte PSK; `genpair --cipher C` two mirrored blocks that, each
# pasted verbatim into one end's [[peer]], bring a static tunnel up between
# two gateways (pings both ways); mistakes exit 2 with a message.
#
#   netns A (et-kg-PID-a)                       netns B (et-kg-PID-b)
#   esptun-gateway, tun 10.98.0.1/24            esptun-gateway, tun 10.98.0.2/24
#   config: [[peer]] + genpair's "end A" block  config: [[peer]] + "end B" block
#   ula 10.202.0.1/24 ---------- veth ---------- ulb 10.202.0.2/24
"""Key generation: genkey, genpsk, genpair."""

import os
import subprocess
import sys
import tomllib

# The shared helpers in tests/lib (tests/lib/README.md: why this one line).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import esptun_conf as conf  # noqa: E402
import esptun_proc  # noqa: E402
import netns  # noqa: E402
import ping  # noqa: E402
import report  # noqa: E402

A_UL, B_UL = "10.202.0.1", "10.202.0.2"
A_IN, B_IN = "10.98.0.1", "10.98.0.2"


def tool(build, *args):
    """tool() - run esptun-gateway with args; (exit code, stdout, stderr)."""
    p = subprocess.run([os.path.join(build, "esptun-gateway"), *args], capture_output=True,
                       text=True, timeout=10)
    return p.returncode, p.stdout, p.stderr


def hex_bytes(text):
    """hex_bytes() - the bytes of a "0x..." string; ValueError otherwise."""
    if not text.startswith("0x"):
        raise ValueError(f"{text!r} lacks the 0x the loader requires")
    return bytes.fromhex(text[2:])


def check_genkey(rep, build):
    rep.section("genkey: every suite's key lengths, fresh each time")
    for name, s in conf.SUITES.items():
        first, second = (tool(build, "genkey", "--cipher", name) for _ in range(2))
        if not rep.check(first[0] == 0 and second[0] == 0, f"genkey --cipher {name} exits 0",
                         first[2] + second[2]):
            continue
        keys = [tomllib.loads(out[1]) for out in (first, second)]
        if s["aead"]:
            lens = [len(hex_bytes(k["key"])) for k in keys]
            rep.equal(lens, [s["enc_len"] + 4] * 2, f"{name}: key = AES key || 4-byte salt")
            rep.check(keys[0]["key"] != keys[1]["key"], f"{name}: two runs, two keys")
        else:
            rep.equal([(len(hex_bytes(k["enc_key"])), len(hex_bytes(k["auth_key"]))) for k in keys],
                      [(s["enc_len"], s["auth_len"])] * 2, f"{name}: enc_key and auth_key lengths")
            rep.check(keys[0]["enc_key"] != keys[1]["enc_key"] and
                      keys[0]["auth_key"] != keys[1]["auth_key"], f"{name}: two runs, two keys")
    rc, out, err = tool(build, "genkey", "--cipher", "aes-999")
    rep.check(rc == 2 and "unknown cipher" in err and "aes128-gcm" in err,
              "an unknown suite: exit 2, the known ones listed", err)
    rc, out, err = tool(build, "genkey")
    rep.check(rc == 2 and "--cipher" in err, "no suite: exit 2, asks for --cipher", err)


def check_genpsk(rep, build):
    rep.section("genpsk: 32 random bytes")
    runs = [tool(build, "genpsk") for _ in range(2)]
    rep.require(all(r[0] == 0 for r in runs), "genpsk exits 0", runs[0][2])
    psks = [hex_bytes(tomllib.loads(r[1])["psk"]) for r in runs]
    rep.equal([len(p) for p in psks], [32, 32], "psk is 32 bytes")
    rep.check(psks[0] != psks[1], "two runs, two PSKs")


def split_pair(text):
    """split_pair() - genpair's output as the two ends' blocks (text)."""
    a = text.index("# --- end A")
    b = text.index("# --- end B")
    return text[a:b], text[b:]


def gateway_config(tmp, me, ul_peer, tun_addr, allowed, block):
    """gateway_config() - one end's config: [tunnel] and a [[peer]] whose
    cipher and SA tables are genpair's block, pasted as printed."""
    path = os.path.join(tmp, f"{me}.toml")
    text = (f'[tunnel]\ninterface = "kg{me}{os.getpid() % 10000}"\n'
            f'addresses = ["{tun_addr}/24"]\nlisten = "0.0.0.0:4500"\ntun_io = "direct"\n'
            f'state_dir = "{tmp}/state-{me}"\ncontrol_socket = "{tmp}/{me}.sock"\n\n'
            f'[[peer]]\nname = "other"\nendpoint = "{ul_peer}:4500"\n'
            f'allowed_ips = ["{allowed}/32"]\n' + block)
    conf.write_private(path, text)
    return path


def check_genpair(rep, build):
    rep.section("genpair: both ends from one command, pasted verbatim")
    rc, out, err = tool(build, "genpair", "--cipher", "aes256-cbc-hmac-sha256")
    rep.require(rc == 0, "genpair exits 0", err)
    block_a, block_b = split_pair(out)
    ta, tb = tomllib.loads(block_a), tomllib.loads(block_b)
    # Compared, never printed: the report must not show keys.
    rep.check((ta["peer"]["out"], ta["peer"]["in"]) == (tb["peer"]["in"], tb["peer"]["out"]),
              "A's out is B's in and A's in is B's out (SPI and keys)")
    rep.check(ta["peer"]["out"]["spi"] != ta["peer"]["in"]["spi"] and
              ta["peer"]["out"]["enc_key"] != ta["peer"]["in"]["enc_key"],
              "each direction has its own SPI and key")
    rep.check(min(ta["peer"]["out"]["spi"], ta["peer"]["in"]["spi"]) >= 0x100,
              "SPIs outside the reserved range 1-255 (RFC 4303 section 2.1)")

    tmp = netns.make_tempdir("keygen")
    a = netns.Netns(netns.unique("kg", "a"))
    b = netns.Netns(netns.unique("kg", "b"))
    netns.veth(a, b, "ula", "ulb", [f"{A_UL}/24"], [f"{B_UL}/24"])
    cfg_a = gateway_config(tmp, "a", B_UL, A_IN, B_IN, block_a)
    cfg_b = gateway_config(tmp, "b", A_UL, B_IN, A_IN, block_b)
    for cfg in (cfg_a, cfg_b):
        p = esptun_proc.run_check(build, cfg)
        rep.require(p.returncode == 0, f"check accepts {os.path.basename(cfg)}",
                    p.stdout + p.stderr)
    gw_a = esptun_proc.Endpoint(build, a, cfg_a, os.path.join(tmp, "a.log")).start()
    gw_b = esptun_proc.Endpoint(build, b, cfg_b, os.path.join(tmp, "b.log")).start()
    netns.on_cleanup(gw_a.stop)
    netns.on_cleanup(gw_b.stop)
    ping.expect_replies(rep, f"ping A -> {B_IN} through the tunnel", ping.run(a, B_IN, 5), 5)
    ping.expect_replies(rep, f"ping B -> {A_IN} through the tunnel", ping.run(b, A_IN, 5), 5)
    for gw, name in ((gw_a, "A"), (gw_b, "B")):
        drops = gw.status()["drops"]
        rep.check(not any(drops.values()), f"{name}: no drops", str(drops))


def body(rep, build):
    check_genkey(rep, build)
    check_genpsk(rep, build)
    check_genpair(rep, build)


if __name__ == "__main__":
    report.main("keygen", body)
