#!/bin/bash
# capture-strongswan.sh - record real IKEv2 messages from strongSwan for the
# codec's unit tests (tests/unit/ike/message_test.cpp). Run as root from
# anywhere: sudo tests/data/ike/capture-strongswan.sh
#
#   ikecap-a (initiator)           ikecap-b (responder)
#   charon, 192.168.89.1 --veth-- 192.168.89.2, charon
#                 ^ tcpdump on veth-a, UDP 500 and 4500
#
# Two runs, each with two charon daemons (strongSwan 5.9, PSK auth):
#  1. both sides offer aes128-sha256-x25519, aes256gcm16-prfsha384-ecp256 and
#     aes128-sha256-modp2048: IKE_SA_INIT request/response, IKE_AUTH
#     request/response (encrypted, on port 4500 after NAT detection).
#  2. the responder accepts only aes128-sha256-modp2048: the first response
#     is INVALID_KE_PAYLOAD and the initiator retries with a MODP-2048 KE.
# Each IKE message is written as raw bytes (no IP/UDP header, no non-ESP
# marker) to this folder, and charon's own one-line summary of each message
# ("generating IKE_SA_INIT request 0 [ SA KE No ... ]") to strongswan-log.txt,
# an independent statement of the payload order the tests check.
# Everything made here (namespaces, daemons, tcpdump, scratch folder) is
# removed when the script ends, fails or is interrupted.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
for tool in /usr/lib/ipsec/charon swanctl tcpdump python3; do
	command -v "$tool" >/dev/null || {
		echo "missing $tool (apt-get install strongswan-charon strongswan-swanctl tcpdump)" >&2
		exit 1
	}
done
[[ $(id -u) == 0 ]] || { echo "run as root (network namespaces)" >&2; exit 1; }

ns_a=ikecap-a
ns_b=ikecap-b
scratch=$(mktemp -d /tmp/ike-capture.XXXXXX)
pids=()

# cleanup() - stop what this script started (by PID), drop its namespaces.
cleanup() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	ip netns del "$ns_a" 2>/dev/null || true
	ip netns del "$ns_b" 2>/dev/null || true
}
trap 'cleanup; rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM

# write_conf() - strongswan.conf and swanctl.conf for one side.
# write_conf SIDE LOCAL REMOTE LOCAL_ID REMOTE_ID IKE_PROPOSALS
write_conf() {
	local d=$scratch/$1
	mkdir -p "$d/run"
	cat >"$d/strongswan.conf" <<EOC
charon {
  # libipsec (userspace ESP) must come before kernel-netlink
  load_modular = no
  load = random nonce openssl pem pkcs1 x509 pubkey aes sha1 sha2 hmac gcm curve25519 gmp kdf kernel-libipsec kernel-netlink socket-default vici
  plugins {
    vici {
      socket = unix://$d/charon.vici
    }
  }
  filelog {
    stderr {
      default = 1
      enc = 1
    }
  }
  journal {
    default = -1
  }
}
EOC
	cat >"$d/swanctl.conf" <<EOC
connections {
  cap {
    version = 2
    local_addrs = $2
    remote_addrs = $3
    proposals = $6
    mobike = no
    local {
      auth = psk
      id = $4
    }
    remote {
      auth = psk
      id = $5
    }
    children {
      net {
        mode = tunnel
        local_ts = 10.89.0.${2##*.}/32
        remote_ts = 10.89.0.${3##*.}/32
        esp_proposals = aes128gcm16
        start_action = none
      }
    }
  }
}
secrets {
  ike-cap {
    id-a = a.cap.example
    id-b = b.cap.example
    secret = "capture-only-psk-not-a-secret-0000"
  }
}
EOC
}

# one_run() - namespaces, both daemons, tcpdump, one initiation, teardown.
# one_run NAME INITIATOR_PROPOSALS RESPONDER_PROPOSALS
one_run() {
	local name=$1 s _
	write_conf a 192.168.89.1 192.168.89.2 a.cap.example b.cap.example "$2"
	write_conf b 192.168.89.2 192.168.89.1 b.cap.example a.cap.example "$3"
	ip netns add "$ns_a"
	ip netns add "$ns_b"
	ip -n "$ns_a" link add veth-a type veth peer name veth-b netns "$ns_b"
	ip -n "$ns_a" addr add 192.168.89.1/24 dev veth-a
	ip -n "$ns_b" addr add 192.168.89.2/24 dev veth-b
	for s in a b; do
		ip -n "ikecap-$s" link set lo up
		ip -n "ikecap-$s" link set "veth-$s" up
	done
	ip -n "$ns_a" addr add 10.89.0.1/32 dev lo
	ip -n "$ns_b" addr add 10.89.0.2/32 dev lo

	ip netns exec "$ns_a" tcpdump -i veth-a -U -s 0 -w "$scratch/$name.pcap" \
		'udp port 500 or udp port 4500' 2>"$scratch/$name-tcpdump.log" &
	pids+=($!)
	for s in a b; do
		rm -f "$scratch/$s/charon.vici"
		# charon writes its PID file to /run: give each daemon its own.
		ip netns exec "ikecap-$s" unshare -m --propagation private sh -c \
			"mount --bind $scratch/$s/run /run && exec env STRONGSWAN_CONF=$scratch/$s/strongswan.conf /usr/lib/ipsec/charon" \
			>"$scratch/$name-$s.log" 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 1 500); do
		[[ -S $scratch/a/charon.vici && -S $scratch/b/charon.vici ]] && break
		sleep 0.01
	done
	sleep 0.5 # tcpdump needs a moment before the first packet
	for s in a b; do
		ip netns exec "ikecap-$s" swanctl --load-all --uri "unix://$scratch/$s/charon.vici" \
			--file "$scratch/$s/swanctl.conf" >>"$scratch/$name-swanctl.log" 2>&1
	done
	ip netns exec "$ns_a" swanctl --initiate --child net --timeout 10 \
		--uri "unix://$scratch/a/charon.vici" >>"$scratch/$name-swanctl.log" 2>&1
	sleep 0.5
	cleanup
	grep -hE 'generating|parsed' "$scratch/$name-a.log" | sed -E 's/^.*\] //; s/^/'"$name"' a: /' \
		>>"$scratch/summary.txt" || true
}

one_run run1 aes128-sha256-x25519,aes256gcm16-prfsha384-ecp256,aes128-sha256-modp2048 \
	aes128-sha256-x25519,aes256gcm16-prfsha384-ecp256,aes128-sha256-modp2048
one_run run2 aes128-sha256-x25519,aes256gcm16-prfsha384-ecp256,aes128-sha256-modp2048 \
	aes128-sha256-modp2048

# Split the captures into one file per IKE message (pcap, Ethernet, IPv4, UDP).
mkdir -p "$scratch/out"
python3 - "$scratch" "$scratch/out" <<'PY'
import struct, sys, os
scratch, out = sys.argv[1], sys.argv[2]

def messages(path):
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    end = "<" if magic in (0xa1b2c3d4, 0xa1b23c4d) else ">"
    linktype = struct.unpack(end + "I", data[20:24])[0]
    assert linktype == 1, "expected Ethernet captures"
    pos = 24
    while pos + 16 <= len(data):
        incl = struct.unpack(end + "I", data[pos + 8:pos + 12])[0]
        frame = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        if struct.unpack(">H", frame[12:14])[0] != 0x0800:
            continue
        ip = frame[14:]
        ihl = (ip[0] & 15) * 4
        if ip[9] != 17:
            continue
        udp = ip[ihl:]
        sport, dport, ulen = struct.unpack(">HHH", udp[:6])
        body = udp[8:ulen]
        if 4500 in (sport, dport):
            if body[:4] != b"\0\0\0\0":
                continue  # ESP, not IKE
            body = body[4:]
        if len(body) >= 28:
            yield body

names = {34: "ike_sa_init", 35: "ike_auth", 36: "create_child_sa", 37: "informational"}
# (file name, exchange, response?) in wire order for each run
wanted = {
    "run1": [("ike_sa_init_request", 34, False), ("ike_sa_init_response", 34, True),
             ("ike_auth_request", 35, False), ("ike_auth_response", 35, True)],
    "run2": [("modp_ike_sa_init_request", 34, False), ("modp_invalid_ke_response", 34, True),
             ("modp_ike_sa_init_retry", 34, False), ("modp_ike_sa_init_response", 34, True)],
}
for run, files in wanted.items():
    # only IKE_SA_INIT and IKE_AUTH messages, in wire order
    msgs = [m for m in messages(os.path.join(scratch, run + ".pcap")) if m[18] in (34, 35)]
    if len(msgs) < len(files):
        sys.exit(f"{run}: captured {len(msgs)} IKE messages, expected {len(files)}")
    for (name, exchange, response), m in zip(files, msgs):
        if m[18] != exchange or bool(m[19] & 0x20) != response:
            sys.exit(f"{run}: {name} is exchange {m[18]} flags {m[19]:#x}")
        open(os.path.join(out, name + ".bin"), "wb").write(m)
        print(f"{name}.bin: {len(m)} bytes")
PY
# Only now, with every message captured, replace the stored ones.
cp "$scratch"/out/*.bin "$here"/
cp "$scratch/summary.txt" "$here/strongswan-log.txt"
cat "$here/strongswan-log.txt"
# The same messages seed the codec's fuzz target.
corpus=$here/../../fuzz/corpus/ike_parse
mkdir -p "$corpus"
for f in "$scratch"/out/*.bin; do cp "$f" "$corpus/strongswan_$(basename "$f")"; done
