"""static_pair.py - start and stop two esptun gateways with static keys in two namespaces
joined by a veth (the site-to-site frame of test_workers.py and
test_queue_limit.py):

    netns A: esptun ula <UNDERLAY>.1 ==veth== ulb <UNDERLAY>.2 esptun :netns B
             tunnel 10.99.0.1                              tunnel 10.99.0.2
"""

import os

import esptun_conf as conf
import esptun_proc
import netns


def start(rep, build, tmp, ns_tag, idx, underlay, spi_base, iface, a_opts=None, b_opts=None,
          before_start=None, wrap=()):
    """start() - make the namespaces and the veth, write both configs (AES-256-GCM,
    fresh keys) and start both gateways; returns (a, b, ea, eb).
    ns_tag, idx: name the namespaces and files; underlay: "10.212.0" (a /24);
    iface: the tun name's first letter; a_opts, b_opts: further conf.Endpoint
    fields of each side; before_start(a, b): runs once the veth is up; wrap:
    a command both gateways run under (esptun_proc.Endpoint's wrap)."""
    a = netns.Netns(netns.unique(ns_tag, f"{idx}a"))
    b = netns.Netns(netns.unique(ns_tag, f"{idx}b"))
    netns.veth(a, b, "ula", "ulb", [f"{underlay}.1/24"], [f"{underlay}.2/24"])
    if before_start:
        before_start(a, b)
    a_out, b_out = conf.sa_pair("aes256-gcm", spi_base=spi_base + 0x10 * idx)
    sfx = f"{os.getpid() % 100000}{idx}"
    cfgs = []
    for me, peer, addr, peer_addr, ep, out, inb, opts in (
            ("a", "site-b", "10.99.0.1", "10.99.0.2", f"{underlay}.2:4500", a_out, b_out, a_opts),
            ("b", "site-a", "10.99.0.2", "10.99.0.1", f"{underlay}.1:4500", b_out, a_out, b_opts)):
        cfg = conf.Endpoint(interface=f"{iface}{me}{sfx}", addresses=[f"{addr}/24"],
                            control_socket=os.path.join(tmp, f"{me}{idx}.sock"),
                            peers=[conf.Peer(name=peer, cipher="aes256-gcm", out=out, inb=inb,
                                             allowed_ips=[f"{peer_addr}/32"], endpoint=ep)],
                            **(opts or {}))
        cfgs.append(cfg.write(os.path.join(tmp, f"{me}{idx}.toml")))
    ea = esptun_proc.Endpoint(build, a, cfgs[0], os.path.join(tmp, f"a{idx}.log"), wrap=wrap)
    eb = esptun_proc.Endpoint(build, b, cfgs[1], os.path.join(tmp, f"b{idx}.log"), wrap=wrap)
    rep.on_failure.append(lambda: print(f"\n--- a:\n{netns.tail(ea.log)}\n--- b:\n{netns.tail(eb.log)}"))
    ea.start()
    eb.start()
    return a, b, ea, eb


def stop(rep, tag, *endpoints):
    """stop() - SIGTERM each endpoint still running and check it exits 0."""
    for e in endpoints:
        if e.alive():
            rep.equal(e.stop(), 0, f"[{tag}] {os.path.basename(e.config)}: SIGTERM -> exit code")
