# lib.sh - shell helpers shared by the VM scenarios (sourced, busybox sh).
# Runs INSIDE the VM. Result lines the host reads (run-vm.sh):
#   RESULT <case> PASS|FAIL <details>     one per case
#   SCENARIO_PASS <name> | SCENARIO_FAIL <name> <why>   exactly one at the end
#
# busybox sh runs its own applets before PATH: call /bin/ip explicitly
# (the initramfs has no busybox ip link at all, but be explicit anyway).
IP=/bin/ip
VMTOOL=/bin/vmtool
set -f # algorithm names like rfc4106(gcm(aes)) travel in unquoted variables

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# cmdline_opt NAME DEFAULT - value of esptun.NAME= on the kernel command line
cmdline_opt() {
	v=$2
	for arg in $(cat /proc/cmdline); do
		case "$arg" in esptun.$1=*) v=${arg#esptun.$1=} ;; esac
	done
	echo "$v"
}

# randhex BYTES - that many random bytes as lowercase hex, no prefix
randhex() { head -c "$1" /dev/urandom | od -An -v -tx1 | tr -d ' \n'; }

# The six ciphers, named as esptun's config names them.
CIPHERS="aes128-gcm aes256-gcm aes128-cbc-hmac-sha1 aes256-cbc-hmac-sha1 aes128-cbc-hmac-sha256 aes256-cbc-hmac-sha256"

# cipher_params NAME - sets C_AEAD (1/0), C_ENC_LEN, C_AUTH_LEN, C_HASH, C_TRUNC
# (ICV bits). GCM: RFC 4106, key material is AES key || 4-byte salt, 16-byte
# ICV. CBC: RFC 3602 + HMAC-SHA1-96 (RFC 2404) / HMAC-SHA256-128 (RFC 4868).
cipher_params() {
	C_AEAD=0 C_AUTH_LEN=0 C_HASH="" C_TRUNC=128
	case "$1" in
	aes128-gcm) C_AEAD=1 C_ENC_LEN=20 ;;
	aes256-gcm) C_AEAD=1 C_ENC_LEN=36 ;;
	aes128-cbc-hmac-sha1) C_ENC_LEN=16 C_AUTH_LEN=20 C_HASH=sha1 C_TRUNC=96 ;;
	aes256-cbc-hmac-sha1) C_ENC_LEN=32 C_AUTH_LEN=20 C_HASH=sha1 C_TRUNC=96 ;;
	aes128-cbc-hmac-sha256) C_ENC_LEN=16 C_AUTH_LEN=32 C_HASH=sha256 ;;
	aes256-cbc-hmac-sha256) C_ENC_LEN=32 C_AUTH_LEN=32 C_HASH=sha256 ;;
	*) echo "cipher_params: unknown cipher $1" >&2; return 1 ;;
	esac
}

# new_sa VAR CIPHER SPI - fresh keys for one SA direction: sets VAR_SPI,
# VAR_ENC (GCM: key||salt) and VAR_AUTH (empty for GCM).
new_sa() {
	cipher_params "$2" || return 1
	eval "$1_SPI=$3"
	eval "$1_ENC=$(randhex $C_ENC_LEN)"
	if [ $C_AEAD = 1 ]; then eval "$1_AUTH="; else eval "$1_AUTH=$(randhex $C_AUTH_LEN)"; fi
}

# kernel_algo VAR CIPHER - the algorithm part of `ip xfrm state add` for SA VAR
kernel_algo() {
	cipher_params "$2" || return 1
	eval "enc=\$$1_ENC auth=\$$1_AUTH"
	if [ $C_AEAD = 1 ]; then
		echo "aead rfc4106(gcm(aes)) 0x$enc 128"
	else
		echo "enc cbc(aes) 0x$enc auth-trunc hmac($C_HASH) 0x$auth $C_TRUNC"
	fi
}

# The kernel side is configured through one `ip -batch` per namespace and
# case: each ip start costs 0.1-0.2 s under TCG.
#
# kernel_sa SRC DST VAR CIPHER ESN(on|off) [EXTRA...] - the batch line for one
# tunnel-mode ESP-in-UDP state (RFC 3948, ports 4500/4500). ESN needs the
# replay-state attribute, which iproute2 only sends with a replay-window.
kernel_sa() {
	src=$1 dst=$2 var=$3 cipher=$4 esn=$5
	shift 5
	eval "spi=\$${var}_SPI"
	if [ "$esn" = on ]; then flags="flag esn replay-window 128"; else flags="replay-window 32"; fi
	echo "xfrm state add src $src dst $dst proto esp spi $spi reqid $((spi)) mode tunnel" \
		"$(kernel_algo $var $cipher) encap espinudp 4500 4500 0.0.0.0 $flags $*"
}

# kernel_policy INNER_LOCAL INNER_REMOTE OUTER_LOCAL OUTER_REMOTE SPI_OUT SPI_IN
# - batch lines for the out and in policies between two inner /32s
kernel_policy() {
	echo "xfrm policy add src $1/32 dst $2/32 dir out tmpl src $3 dst $4 proto esp reqid $(($5)) mode tunnel"
	echo "xfrm policy add src $2/32 dst $1/32 dir in tmpl src $4 dst $3 proto esp reqid $(($6)) mode tunnel"
}

# kernel_flush - batch lines that remove every policy and state
kernel_flush() {
	echo "xfrm policy flush"
	echo "xfrm state flush"
}

# kernel_apply NS - run batch lines from stdin in NS; on failure show them
kernel_apply() {
	cat >/tmp/xfrm.batch
	$IP -n $1 -batch /tmp/xfrm.batch && return 0
	echo "ip -batch failed in ns $1; the batch was:" && sed 's/0x[0-9a-f]*/0x<key>/g' /tmp/xfrm.batch
	return 1
}

# underlay NS_A NS_B - two namespaces, veth va/vb, 10.201.0.1/24 and .2/24
underlay() {
	$IP netns add $1 && $IP netns add $2 &&
		$IP link add va netns $1 type veth peer name vb netns $2 &&
		$IP -n $1 addr add 10.201.0.1/24 dev va &&
		$IP -n $2 addr add 10.201.0.2/24 dev vb &&
		$IP -n $1 link set lo up && $IP -n $2 link set lo up &&
		$IP -n $1 link set va up && $IP -n $2 link set vb up
}

# xfrm_errors NS - the kernel's XFRM error counters (/proc/net/xfrm_stat),
# one "Name value" per line; all are errors, so any increase is a failure.
xfrm_errors() { $IP netns exec $1 cat /proc/net/xfrm_stat; }

# xfrm_errors_delta BEFORE AFTER - "Name+N" for each counter that grew
xfrm_errors_delta() {
	echo "$1" >/tmp/xs.before
	echo "$2" | awk 'NR==FNR { b[$1] = $2; next } $2 > b[$1] { printf "%s+%d ", $1, $2 - b[$1] }' /tmp/xs.before -
}

# ping_count NS DST COUNT - number of echo replies (busybox ping); the output
# is kept in /tmp/ping.NS.out
ping_count() {
	$IP netns exec $1 timeout 20 ping -c $3 -i 0.2 -W 3 $2 >/tmp/ping.$1.out 2>&1
	sed -n 's/.* \([0-9]*\) packets received.*/\1/p' /tmp/ping.$1.out
}

# transfer NS_TX NS_RX DST PORT FILE - TCP copy of FILE from NS_TX to NS_RX
# through DST:PORT; prints "ok" when the receiver's sha256 matches, else why.
# Two transfers may run at once (distinct ports: files are named by port).
# Each side gives up after XFER_TIMEOUT seconds (under a loaded TCG host
# 256 KiB takes ~3 s).
XFER_TIMEOUT=30
transfer() {
	f=/tmp/xfer.$4
	want=$(sha256sum <"$5" | cut -d' ' -f1)
	$IP netns exec $2 $VMTOOL recv $4 $XFER_TIMEOUT >$f.rx 2>$f.rx.err &
	rx=$!
	if ! $IP netns exec $1 $VMTOOL send $3 $4 $XFER_TIMEOUT <"$5" 2>$f.tx.err; then
		kill $rx 2>/dev/null
		wait $rx
		echo "send-failed($(tr '\n' ' ' <$f.tx.err))"
		return
	fi
	wait $rx || { echo "recv-failed($(tr '\n' ' ' <$f.rx.err))"; return; }
	got=$(sha256sum <$f.rx | cut -d' ' -f1)
	if [ "$got" = "$want" ]; then echo ok; else echo "checksum-mismatch(rx $(wc -c <$f.rx) bytes)"; fi
	rm -f $f.rx
}

# json_object JSON KEY - the flat {...} body after "KEY": (no nested objects)
json_object() { echo "$1" | tr -d ' \n' | sed -n "s/.*\"$2\":{\([^}]*\)}.*/\1/p"; }
# json_num BODY KEY - a number field from a json_object body
json_num() { echo "$1" | tr ',' '\n' | sed -n "s/^\"$2\":\([0-9]*\)$/\1/p"; }
# json_nonzero BODY - "name=value" for the non-zero number fields
json_nonzero() { echo "$1" | tr ',' '\n' | sed -n 's/^"\([a-z_]*\)":\([1-9][0-9]*\)$/\1=\2/p' | tr '\n' ' '; }

# --- Two esptun gateways, ns a and ns b (vhost.sh, vhost-counts.sh) -----------
# Topology: the underlay above; esp0 10.99.0.1/24 in a, 10.99.0.2/24 in b;
# aes128-gcm SAs AB (a->b) and BA (b->a) made with new_sa; control sockets
# /run/esptun/NS.sock; configs /tmp/NS.toml; logs /tmp/gw.NS.log.
GW=/bin/esptun-gateway

# json_str BODY KEY - a string field (no commas or quotes in it) from a json_object body
json_str() { echo "$1" | tr ',' '\n' | sed -n "s/^\"$2\":\"\([^\"]*\)\"$/\1/p"; }

# write_conf NS LOCAL_INNER PEER_INNER PEER_UNDERLAY OUT_VAR IN_VAR TUN_IO DWM
# ($WORKERS, when set: the workers key)
write_conf() {
	{
		echo "[tunnel]"
		echo 'interface = "esp0"'
		echo "addresses = [\"$2/24\"]"
		echo 'listen = "0.0.0.0:4500"'
		echo "tun_io = \"$7\""
		[ -n "$8" ] && echo "direct_write_max = $8"
		[ -n "${WORKERS:-}" ] && echo "workers = $WORKERS"
		echo "control_socket = \"/run/esptun/$1.sock\""
		echo "[[peer]]"
		echo 'name = "peer"'
		echo "endpoint = \"$4:4500\""
		echo "allowed_ips = [\"$3/32\"]"
		echo 'cipher = "aes128-gcm"'
		for t in out:$5 in:$6; do
			eval "spi=\$${t#*:}_SPI enc=\$${t#*:}_ENC"
			echo "  [peer.${t%:*}]"
			printf '  spi = 0x%x\n' $spi
			echo "  key = \"0x$enc\""
		done
	} >/tmp/$1.toml
	chmod 600 /tmp/$1.toml
}

# gw_start NS - start the gateway of NS, wait for esp0 and its control socket
gw_start() {
	rm -f /run/esptun/$1.sock
	$IP netns exec $1 $GW run -c /tmp/$1.toml >/tmp/gw.$1.log 2>&1 &
	eval "GW_PID_$1=$!"
	eval "pid=\$GW_PID_$1"
	i=0
	while [ $i -lt 300 ]; do # up to 30 s: a C++ program starts slowly under TCG
		if [ -S /run/esptun/$1.sock ] && $IP -n $1 -4 addr show dev esp0 2>/dev/null | grep -q 10.99.0.; then
			return 0
		fi
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}
gw_stop() {
	eval "pid=\${GW_PID_$1:-}"
	[ -n "$pid" ] || return
	kill $pid 2>/dev/null
	i=0
	while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	kill -9 $pid 2>/dev/null
	wait $pid 2>/dev/null
	eval "GW_PID_$1="
}
