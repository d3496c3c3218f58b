#!/bin/sh
# kernel-xfrm - the harness's own check, no esptun: Linux ESP-in-UDP between
# two namespaces for all six ciphers, ESN on and off, ping both ways. Proves
# the kernel side of xfrm-interop (modules, `ip xfrm` command lines, encap
# socket) works, so a failure there points at esptun.
#
#   ns ka: inner 10.99.0.1/32 on lo          ns kb: inner 10.99.0.2/32 on lo
#          outer va 10.201.0.1/24 ----veth---- vb 10.201.0.2/24
#          kernel ESP <== ESP-in-UDP 4500/4500 ==> kernel ESP
#
# vm-requires: (nothing from the build)
. /scenarios/lib.sh
NAME=kernel-xfrm
A=ka B=kb
fail=0

underlay $A $B || { echo "SCENARIO_FAIL $NAME: namespace/veth set-up failed"; exit 1; }
$IP -n $A addr add 10.99.0.1/32 dev lo
$IP -n $B addr add 10.99.0.2/32 dev lo
# A route is needed before the policy lookup; src picks the inner address.
$IP -n $A route add 10.99.0.2/32 dev va src 10.99.0.1
$IP -n $B route add 10.99.0.1/32 dev vb src 10.99.0.2
$IP netns exec $A $VMTOOL encap-sock 4500 >/dev/null
$IP netns exec $B $VMTOOL encap-sock 4500 >/dev/null

n=0
for cipher in $CIPHERS; do
	for esn in on off; do
		n=$((n + 1))
		case_name="$cipher/esn=$esn"
		new_sa AB $cipher $((0x3000 + n)) && new_sa BA $cipher $((0x4000 + n))
		ok=1
		for ns in $A $B; do
			{
				kernel_flush
				kernel_sa 10.201.0.1 10.201.0.2 AB $cipher $esn
				kernel_sa 10.201.0.2 10.201.0.1 BA $cipher $esn
				if [ $ns = $A ]; then
					kernel_policy 10.99.0.1 10.99.0.2 10.201.0.1 10.201.0.2 $AB_SPI $BA_SPI
				else
					kernel_policy 10.99.0.2 10.99.0.1 10.201.0.2 10.201.0.1 $BA_SPI $AB_SPI
				fi
			} | kernel_apply $ns || ok=0
		done
		if [ $ok = 0 ]; then
			echo "RESULT $case_name FAIL ip xfrm refused the state or policy"
			fail=1
			continue
		fi
		ping_count $A 10.99.0.2 3 >/tmp/res.ab &
		bg=$!
		ping_count $B 10.99.0.1 3 >/tmp/res.ba
		wait $bg
		ab=$(cat /tmp/res.ab) ba=$(cat /tmp/res.ba)
		if [ "$ab" = 3 ] && [ "$ba" = 3 ]; then
			echo "RESULT $case_name PASS ping a->b 3/3 b->a 3/3"
		else
			echo "RESULT $case_name FAIL ping a->b ${ab:-0}/3 b->a ${ba:-0}/3"
			$IP -n $B -s xfrm state
			$IP netns exec $B cat /proc/net/xfrm_stat | awk '$2 != 0'
			fail=1
		fi
	done
done
if [ $fail = 0 ]; then echo "SCENARIO_PASS $NAME"; else echo "SCENARIO_FAIL $NAME: see RESULT lines"; fi
