#!/bin/sh
# udp-gso - UDP GSO's EIO fallback on a kernel that answers EIO.
#
# The host's kernel checksums a UDP_SEGMENT train in software when the route's
# device has no checksum offload, so the unit test "GSO through a device
# without checksum offload" takes its train branch there. Debian 12's 6.1
# answers EIO instead: this runs the same unit test inside the VM and requires
# that branch (UdpSocket::send_batch() switches GSO off and re-sends the train
# datagram by datagram, nothing lost).
#
# vm-requires: tests/unit-platform
. /scenarios/lib.sh
NAME=udp-gso
out=$(/bin/unit-platform '--test-case=GSO through a device*' -s 2>&1)
rc=$?
echo "$out" | grep -E "kernel answer|test cases|ERROR" | sed 's/^/NOTE /'
if [ $rc -ne 0 ]; then
	echo "RESULT gso-fallback FAIL unit-platform exited $rc"
elif echo "$out" | grep -q "kernel answer: EIO, GSO off"; then
	echo "RESULT gso-fallback PASS EIO answered, GSO switched off, every datagram delivered"
else
	echo "RESULT gso-fallback FAIL the kernel did not answer EIO: the fallback was not exercised"
fi
if echo "$out" | grep -q "kernel answer: EIO, GSO off" && [ $rc -eq 0 ]; then
	echo "SCENARIO_PASS $NAME"
else
	echo "SCENARIO_FAIL $NAME"
fi
