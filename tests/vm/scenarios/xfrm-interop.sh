#!/bin/sh
# xfrm-interop - esptun-gateway against Linux's own ESP (ip xfrm), RFC 4303
# tunnel mode in UDP (RFC 3948), for all six ciphers with ESN on and off:
# ping both ways and a checksummed TCP transfer both ways, then esptun's
# counters (no auth failures, packets received on the SA) and the kernel's
# XFRM error counters (none may grow). Last, an ESN sender crossing 2^32.
#
#   ns a (esptun)                                 ns b (kernel XFRM)
#   esp0 (tun) 10.99.0.1/24                       lo 10.99.0.2/32
#     esptun-gateway run -c /tmp/a.toml             policy 10.99.0.2 <-> 10.99.0.1
#     UDP 0.0.0.0:4500                              vmtool encap-sock 4500 (UDP_ENCAP_ESPINUDP)
#   va 10.201.0.1/24 ============ veth ============ vb 10.201.0.2/24
#        SA a->b: SPI 0x1NNN (esptun out, kernel in)
#        SA b->a: SPI 0x2NNN (kernel out, esptun in)
#
# Kernel command line options: esptun.xfer_kb=N (transfer size, default 256),
# esptun.ciphers=a,b (subset), esptun.cross=a,b (ciphers for the 2^32 case,
# "none" to skip), esptun.corrupt=1 (self-check: kernel b->a key differs from
# esptun's, every case must FAIL).
#
# vm-requires: esptun-gateway
. /scenarios/lib.sh
NAME=xfrm-interop
A=a B=b
GW=/bin/esptun-gateway
CONF=/tmp/a.toml
SOCK=/run/esptun/a.sock
XFER_KB=$(cmdline_opt xfer_kb 256)
ciphers=$(cmdline_opt ciphers "$CIPHERS" | tr ',' ' ')
cross=$(cmdline_opt cross "aes128-gcm,aes128-cbc-hmac-sha1" | tr ',' ' ')
[ "$cross" = none ] && cross=""
corrupt=$(cmdline_opt corrupt 0)
CRYPTO_IMPL=$(cmdline_opt crypto_impl stitched)
fail=0

# write_conf CIPHER ESN - esptun's side: sends with SA AO, receives with SA BO
write_conf() {
	cipher_params $1
	{
		echo "[tunnel]"
		echo 'interface = "esp0"'
		echo 'addresses = ["10.99.0.1/24"]'
		echo 'listen = "0.0.0.0:4500"'
		echo 'tun_io = "direct"'
		# The one-pass stitched CBC-HMAC (fails to start if the guest CPU
		# lacks it, rather than quietly testing two-pass); esptun.crypto_impl=
		# two-pass on the kernel command line checks the other implementation.
		echo "crypto_impl = \"$CRYPTO_IMPL\""
		echo "control_socket = \"$SOCK\""
		echo "[[peer]]"
		echo 'name = "kernel"'
		echo 'endpoint = "10.201.0.2:4500"'
		echo 'allowed_ips = ["10.99.0.2/32"]'
		echo "cipher = \"$1\""
		if [ $2 = on ]; then echo "esn = true"; else echo "esn = false"; fi
		echo "replay_window = 1024"
		for t in out:AO in:BO; do
			eval "spi=\$${t#*:}_SPI enc=\$${t#*:}_ENC auth=\$${t#*:}_AUTH"
			echo "  [peer.${t%:*}]"
			printf '  spi = 0x%x\n' $spi
			if [ $C_AEAD = 1 ]; then
				echo "  key = \"0x$enc\""
			else
				echo "  enc_key = \"0x$enc\""
				echo "  auth_key = \"0x$auth\""
			fi
		done
	} >$CONF
	chmod 600 $CONF
}

# gw_start / gw_stop come from lib.sh (namespace $A: /tmp/a.toml, /run/esptun/a.sock, /tmp/gw.a.log).

# diagnostics - everything needed to debug a failed case, into the log
diagnostics() {
	echo "--- esptun-gateway log"
	tail -n 40 /tmp/gw.$A.log
	echo "--- esptun status"
	echo "$status"
	echo "--- kernel (ns b) xfrm state with stats"
	$IP -n $B -s xfrm state
	echo "--- kernel (ns b) non-zero /proc/net/xfrm_stat"
	echo "$xs_after" | awk '$2 != 0'
	echo "--- ESP-in-UDP on vb (ns b), first packets each way"
	cat /tmp/sniff.out
	echo "--- ping output"
	cat /tmp/ping.$A.out /tmp/ping.$B.out
	echo "--- end of diagnostics"
}

# run_case CIPHER ESN N [OSEQ] - one full case; OSEQ starts the kernel's
# outbound (b->a) SA at that sequence number (ESN wrap test).
run_case() {
	cipher=$1 esn=$2 n=$3 oseq=${4:-}
	case_name="$cipher/esn=$esn${oseq:+/kernel-oseq=$oseq}"
	t0=$(uptime_s)
	new_sa AO $cipher $((0x1000 + n)) && new_sa BO $cipher $((0x2000 + n)) || return 1
	write_conf $cipher $esn
	# Harness self-check (esptun.corrupt=1): the kernel sends with a key esptun
	# does not have, so every case must FAIL with auth_failed > 0.
	[ "$corrupt" = 1 ] && new_sa BO $cipher $BO_SPI
	extra=""
	[ -n "$oseq" ] && extra="replay-oseq $oseq"
	if ! {
		kernel_flush
		kernel_sa 10.201.0.1 10.201.0.2 AO $cipher $esn
		kernel_sa 10.201.0.2 10.201.0.1 BO $cipher $esn $extra
		kernel_policy 10.99.0.2 10.99.0.1 10.201.0.2 10.201.0.1 $BO_SPI $AO_SPI
	} | kernel_apply $B; then
		echo "RESULT $case_name FAIL ip xfrm refused the kernel's state or policy"
		return 1
	fi
	t1=$(uptime_s)
	if ! gw_start $A; then
		echo "RESULT $case_name FAIL esptun-gateway did not come up (esp0 with 10.99.0.1 and $SOCK)"
		cat $CONF | grep -v key
		tail -n 40 /tmp/gw.$A.log
		gw_stop $A
		return 1
	fi
	if [ $n = 1 ]; then # what esp0 looks like to the kernel, once
		echo "NOTE esp0 in ns a: $($IP -n $A addr show dev esp0 | grep -E 'mtu|inet' | tr -s ' \n' ' ')"
	fi
	$IP netns exec $B $VMTOOL sniff vb 2 >/tmp/sniff.out 2>&1 &
	sniff=$!
	xs_before=$(xfrm_errors $B)

	# Both directions at once: pings, then the transfers.
	t2=$(uptime_s)
	ping_count $A 10.99.0.2 3 >/tmp/res.p_ab &
	bg=$!
	ping_count $B 10.99.0.1 3 >/tmp/res.p_ba
	wait $bg
	p_ab=$(cat /tmp/res.p_ab) p_ba=$(cat /tmp/res.p_ba)
	t3=$(uptime_s)
	if [ "$p_ab" = 0 ] || [ "$p_ba" = 0 ]; then
		# A dead direction would only make the transfers wait for their timeout.
		x_ab=skipped-no-ping x_ba=skipped-no-ping
	else
		transfer $A $B 10.99.0.2 5001 /tmp/blob >/tmp/res.x_ab &
		bg=$! # not $! after the next line: transfer starts its own background jobs
		transfer $B $A 10.99.0.1 5002 /tmp/blob >/tmp/res.x_ba
		wait $bg
		x_ab=$(cat /tmp/res.x_ab) x_ba=$(cat /tmp/res.x_ba)
	fi
	t4=$(uptime_s)
	[ -n "$oseq" ] && p_ba2=$(ping_count $B 10.99.0.1 2)

	t5=$(uptime_s)
	status=$($IP netns exec $A $GW status -c $CONF 2>&1)
	xs_after=$(xfrm_errors $B)
	kill $sniff
	wait $sniff
	t6=$(uptime_s)
	gw_stop $A

	drops=$(json_object "$status" drops)
	auth_failed=$(json_num "$drops" auth_failed)
	sa_in=$(json_object "$status" sa_in)
	sa_out=$(json_object "$status" sa_out)
	in_pkts=$(json_num "$sa_in" packets)
	out_pkts=$(json_num "$sa_out" packets)
	highest=$(json_num "$sa_in" highest_seq)
	kerr=$(xfrm_errors_delta "$xs_before" "$xs_after")
	sniffed=$(sed -n 's/^sniff vb: //p' /tmp/sniff.out)
	leak=$(echo "$sniffed" | sed -n 's/.*leak_out=\([0-9]*\).*/\1/p')

	why=""
	[ "$p_ab" = 3 ] || why="$why ping-a->b=${p_ab:-0}/3"
	[ "$p_ba" = 3 ] || why="$why ping-b->a=${p_ba:-0}/3"
	[ "$x_ab" = ok ] || why="$why xfer-a->b:$x_ab"
	[ "$x_ba" = ok ] || why="$why xfer-b->a:$x_ba"
	[ "$auth_failed" = 0 ] || why="$why esptun-auth_failed=${auth_failed:-?}"
	[ "${in_pkts:-0}" -gt 0 ] || why="$why esptun-sa_in.packets=${in_pkts:-?}"
	[ "${out_pkts:-0}" -gt 0 ] || why="$why esptun-sa_out.packets=${out_pkts:-?}"
	[ -z "$kerr" ] || why="$why kernel-xfrm-errors:$kerr"
	[ "$leak" = 0 ] || why="$why plain-inner-packets-on-vb=${leak:-?}"
	if [ -n "$oseq" ]; then
		[ "$p_ba2" = 2 ] || why="$why ping-b->a-after-wrap=${p_ba2:-0}/2"
		# highest_seq must have passed 2^32: the kernel's ESN sender wrapped.
		echo "$highest" | awk '{ exit !($1 >= 4294967296) }' || why="$why esptun-highest_seq=${highest:-?}(<2^32)"
	fi
	t7=$(uptime_s)
	steps=$(echo "$t0 $t1 $t2 $t3 $t4 $t5 $t6 $t7" | awk '{ printf "t: setup=%.1f gw_start=%.1f ping=%.1f xfer=%.1f status=%.1f stop+eval=%.1f", $2-$1, $3-$2, $4-$3, $5-$4, $7-$5, $8-$7 }')
	detail="in=$in_pkts out=$out_pkts highest_seq=$highest drops:[$(json_nonzero "$drops")] $sniffed $steps"
	if [ -z "$why" ]; then
		echo "RESULT $case_name PASS ping 3/3 both ways, ${XFER_KB}KiB both ways, $detail"
		return 0
	fi
	echo "RESULT $case_name FAIL$why ($detail)"
	diagnostics
	return 1
}

echo "NOTE $NAME: transfer ${XFER_KB} KiB each way; ciphers: $ciphers; 2^32 crossing: ${cross:-none}"
underlay $A $B || { echo "SCENARIO_FAIL $NAME: namespace/veth set-up failed"; exit 1; }
# Kernel side: the inner address on lo and a route to the far inner address
# (the output route lookup happens before the policy lookup); the policy
# then sends 10.99.0.2 -> 10.99.0.1 through the SA instead of out vb.
$IP -n $B addr add 10.99.0.2/32 dev lo
$IP -n $B route add 10.99.0.1/32 dev vb src 10.99.0.2
$IP netns exec $B $VMTOOL encap-sock 4500 >/dev/null || { echo "SCENARIO_FAIL $NAME: encap socket"; exit 1; }
head -c $((XFER_KB * 1024)) /dev/urandom >/tmp/blob

n=0
for cipher in $ciphers; do
	for esn in on off; do
		n=$((n + 1))
		run_case $cipher $esn $n || fail=1
	done
done
for cipher in $cross; do
	n=$((n + 1))
	run_case $cipher on $n 0xfffffff0 || fail=1
done
if [ $fail = 0 ]; then echo "SCENARIO_PASS $NAME"; else echo "SCENARIO_FAIL $NAME: see RESULT lines"; fi
