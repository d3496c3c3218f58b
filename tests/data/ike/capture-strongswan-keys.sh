#!/bin/bash
# capture-strongswan-keys.sh - record strongSwan's own IKEv2 keys and messages
# for tests/unit/ike/crypto_strongswan_test.cpp: two charon daemons (strongSwan
# 5.9, PSK) set up one IKE SA per suite while charon logs its key material
# (ike/chd level 4: g^ir, nonces, SK_*, CHILD_SA keys; enc level 3: the
# plaintext of each SK payload) and tcpdump records the messages. The result,
# tests/data/ike/crypto_strongswan.txt, lets the unit test check that esptun
# derives strongSwan's keys, opens strongSwan's SK payloads to strongSwan's
# plaintext, and computes the AUTH value strongSwan sent.
# Run as root from anywhere: sudo tests/data/ike/capture-strongswan-keys.sh
#
#   ikekeys-a (initiator)             ikekeys-b (responder)
#   charon, 192.168.87.1 ---veth--- 192.168.87.2, charon
#                 ^ tcpdump on kk-a, UDP 500 and 4500
#
# Suites (IKE / ESP), one run each:
#   aes128-sha256-x25519 / aes128gcm16     CBC + HMAC-SHA-256, X25519
#   aes256gcm16-prfsha384-ecp256 / aes256gcm16
#   aes256-sha512-modp2048 / aes128gcm16   CBC + HMAC-SHA-512, MODP-2048
#   aes128gcm16-prfsha256-x25519 / aes256gcm16
# The keys are throw-away: they protect nothing but this capture.
# Everything made here (namespaces, daemons, tcpdump, scratch folder) is
# removed when the script ends, fails or is interrupted.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
for tool in /usr/lib/ipsec/charon swanctl tcpdump unshare /usr/bin/python3; do
	command -v "$tool" >/dev/null || {
		echo "missing $tool (apt-get install strongswan-charon strongswan-swanctl tcpdump)" >&2
		exit 1
	}
done
[[ $(id -u) == 0 ]] || { echo "run as root (network namespaces)" >&2; exit 1; }

ns_a=ikekeys-a
ns_b=ikekeys-b
psk="capture-only-psk-not-a-secret-0000"
scratch=$(mktemp -d /tmp/ike-keys.XXXXXX)
pids=()

# stop_all() - stop what this script started (by PID) and drop its namespaces.
stop_all() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	ip netns del "$ns_a" 2>/dev/null || true
	ip netns del "$ns_b" 2>/dev/null || true
}
trap 'stop_all; rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM

# write_conf() - strongswan.conf and swanctl.conf for one side.
# write_conf SIDE LOCAL REMOTE LOCAL_ID REMOTE_ID IKE_PROPOSAL ESP_PROPOSAL
write_conf() {
	local d=$scratch/$1
	mkdir -p "$d/run"
	cat >"$d/strongswan.conf" <<EOC
charon {
  load_modular = no
  load = random nonce openssl pem pkcs1 x509 pubkey aes sha1 sha2 hmac gcm curve25519 gmp kdf kernel-libipsec kernel-netlink socket-default vici
  # no fragmentation or MOBIKE: one plain SK payload per message
  fragmentation = no
  plugins {
    vici {
      socket = unix://$d/charon.vici
    }
  }
  filelog {
    stderr {
      default = 1
      ike = 4
      chd = 4
      enc = 3
    }
  }
  journal {
    default = -1
  }
}
EOC
	cat >"$d/swanctl.conf" <<EOC
connections {
  keys {
    version = 2
    local_addrs = $2
    remote_addrs = $3
    proposals = $6
    mobike = no
    fragmentation = no
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
        local_ts = 10.87.0.${2##*.}/32
        remote_ts = 10.87.0.${3##*.}/32
        esp_proposals = $7
        start_action = none
      }
    }
  }
}
secrets {
  ike-keys {
    id-a = a.keys.example
    id-b = b.keys.example
    secret = "$psk"
  }
}
EOC
}

# one_run() - namespaces, both daemons, tcpdump, one initiation, teardown.
# one_run NAME IKE_PROPOSAL ESP_PROPOSAL
one_run() {
	local name=$1 s _
	write_conf a 192.168.87.1 192.168.87.2 a.keys.example b.keys.example "$2" "$3"
	write_conf b 192.168.87.2 192.168.87.1 b.keys.example a.keys.example "$2" "$3"
	ip netns add "$ns_a"
	ip netns add "$ns_b"
	ip -n "$ns_a" link add kk-a type veth peer name kk-b netns "$ns_b"
	ip -n "$ns_a" addr add 192.168.87.1/24 dev kk-a
	ip -n "$ns_b" addr add 192.168.87.2/24 dev kk-b
	for s in a b; do
		ip -n "ikekeys-$s" link set lo up
		ip -n "ikekeys-$s" link set "kk-$s" up
	done
	ip -n "$ns_a" addr add 10.87.0.1/32 dev lo
	ip -n "$ns_b" addr add 10.87.0.2/32 dev lo

	ip netns exec "$ns_a" tcpdump -i kk-a -U -s 0 -w "$scratch/$name.pcap" \
		'udp port 500 or udp port 4500' 2>"$scratch/$name-tcpdump.log" &
	pids+=($!)
	for s in a b; do
		rm -f "$scratch/$s/charon.vici"
		# charon's PID file path is fixed (/run): each daemon gets its own /run.
		ip netns exec "ikekeys-$s" unshare -m --propagation private sh -c \
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
		ip netns exec "ikekeys-$s" swanctl --load-all --uri "unix://$scratch/$s/charon.vici" \
			--file "$scratch/$s/swanctl.conf" >>"$scratch/$name-swanctl.log" 2>&1
	done
	ip netns exec "$ns_a" swanctl --initiate --child net --timeout 10 \
		--uri "unix://$scratch/a/charon.vici" >>"$scratch/$name-swanctl.log" 2>&1
	sleep 0.5
	stop_all
}

runs=()
add_run() {
	one_run "$1" "$2" "$3"
	runs+=("$1|$2|$3")
}
add_run cbc_x25519 aes128-sha256-x25519 aes128gcm16
add_run gcm_ecp256 aes256gcm16-prfsha384-ecp256 aes256gcm16
add_run cbc_modp aes256-sha512-modp2048 aes128gcm16
add_run gcm_x25519 aes128gcm16-prfsha256-x25519 aes256gcm16

/usr/bin/python3 "$here/strongswan_keys_extract.py" "$scratch" "$psk" "${runs[@]}" \
	>"$scratch/crypto_strongswan.txt"
cp "$scratch/crypto_strongswan.txt" "$here/crypto_strongswan.txt"
echo "wrote $here/crypto_strongswan.txt"
