// IkeInbox under an IKE flood on port 4500 (issue 16, item 4): the work per
// drain() is bounded, messages for our own IKE SAs are not crowded out by
// IKE_SA_INIT from strangers, and one source cannot take a whole lane.
#include "datapath/ike_inbox.hpp"

#include "base/bytes.hpp"

#include "tests/unit/support/poll_test_util.hpp"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <doctest/doctest.h>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace esptun;
using datapath::IkeInbox;

namespace {

/// An IKE header (RFC 7296 section 3.1) with the given SPIs, padded to 28
/// bytes; @tag goes into the message ID so a test can tell messages apart.
std::vector<uint8_t> ike_message(uint64_t spi_i, uint64_t spi_r, uint32_t tag) {
	std::vector<uint8_t> m(28, 0);
	store_be64(m.data(), spi_i);
	store_be64(m.data() + 8, spi_r);
	m[17] = 0x20; // version 2.0
	m[18] = 34;   // IKE_SA_INIT; the inbox does not care
	store_be32(m.data() + 20, tag);
	store_be32(m.data() + 24, uint32_t(m.size()));
	return m;
}

Endpoint source(uint32_t n, uint16_t port = 4500) {
	return Endpoint{*parse_ip("198.51.100." + std::to_string(n % 250 + 1)), port};
}

/// Everything drain() hands over, until the inbox is empty (bounded loop).
std::vector<uint32_t> drain_all(IkeInbox& inbox, size_t* calls = nullptr) {
	std::vector<uint32_t> tags;
	for (size_t i = 0; i < 1000; i++) {
		const bool more = inbox.drain([&](std::span<const uint8_t> msg, const Endpoint&) {
			tags.push_back(load_be32(msg.data() + 20));
		});
		if (calls) (*calls)++;
		if (!more) break;
	}
	return tags;
}

} // namespace

TEST_CASE("a flood of IKE_SA_INIT does not crowd out a message for a known IKE SA") {
	IkeInbox inbox;
	const uint64_t ours = 0x1122334455667788ull;
	inbox.publish_spis({ours});
	// Many sources, so the per-source bound is not what keeps the slots free.
	for (uint32_t i = 0; i < 10 * IkeInbox::kSlots; i++)
		inbox.push(ike_message(0x1000 + i, 0, i), source(i, uint16_t(1000 + i)));
	// A DPD request from the peer of our IKE SA: we were the responder, so
	// our SPI is the responder SPI.
	CHECK(inbox.push(ike_message(0xabcdef, ours, 424242), source(7)));
	// And one where we were the initiator.
	CHECK(inbox.push(ike_message(ours, 0xabcdef, 434343), source(8)));
	CHECK(inbox.dropped() > 0);
	CHECK(inbox.dropped_stranger() > 0);
	CHECK(inbox.dropped_known() == 0);
	const std::vector<uint32_t> tags = drain_all(inbox);
	REQUIRE(tags.size() >= 2);
	// Known SPIs come first, before the strangers queued ahead of them.
	CHECK(tags[0] == 424242);
	CHECK(tags[1] == 434343);
}

TEST_CASE("clients that connect together fit: 200 IKE_SA_INIT and 100 IKE_AUTH at once") {
	// The burst a gateway sees when many clients start at the same moment
	// (esptun-bench ike-load runs 64 in flight; a restart brings all back):
	// one message per client, each from its own address. With 32 stranger
	// slots half of a 64-client burst was dropped and waited a full
	// retransmission timeout (1 s) to come again.
	IkeInbox inbox;
	std::vector<uint64_t> ours;
	for (uint64_t i = 0; i < 100; i++)
		ours.push_back(0x5000 + i);
	inbox.publish_spis(ours);
	for (uint32_t i = 0; i < 200; i++)
		CHECK(inbox.push(ike_message(0x1000 + i, 0, i), source(i, 500)));
	for (uint32_t i = 0; i < 100; i++)
		CHECK(inbox.push(ike_message(0x9000 + i, ours[i], 1000 + i), source(i, 500)));
	CHECK(inbox.dropped() == 0);
	const std::vector<uint32_t> tags = drain_all(inbox);
	CHECK(tags.size() == 300);
	// Each lane keeps its order.
	std::vector<uint32_t> strangers, known;
	for (uint32_t t : tags)
		(t >= 1000 ? known : strangers).push_back(t);
	CHECK(std::is_sorted(strangers.begin(), strangers.end()));
	CHECK(std::is_sorted(known.begin(), known.end()));
}

TEST_CASE("SPIs are known only while published") {
	IkeInbox inbox;
	inbox.publish_spis({5, 9});
	for (uint32_t i = 0; i < IkeInbox::kSlots; i++)
		inbox.push(ike_message(0x1000 + i, 0, i), source(i, uint16_t(1000 + i)));
	inbox.publish_spis({9}); // the IKE SA with SPI 5 is gone
	CHECK_FALSE(inbox.push(ike_message(77, 5, 1), source(200)));
	CHECK(inbox.push(ike_message(77, 9, 2), source(200)));
}

TEST_CASE("drain() takes a bounded number per call and leaves the eventfd readable") {
	IkeInbox inbox;
	const size_t queued = IkeInbox::kStrangerSlots;
	for (uint32_t i = 0; i < queued; i++)
		REQUIRE(inbox.push(ike_message(0x1000 + i, 0, i), source(i, uint16_t(1000 + i))));
	size_t got = 0;
	const bool more = inbox.drain([&](std::span<const uint8_t>, const Endpoint&) { got++; });
	CHECK(got == IkeInbox::kDrainBatch);
	CHECK(more);
	// The control loop waits on the eventfd: it must wake again for the rest,
	// after whatever timers are due have run.
	CHECK(test::wait_readable(inbox.fd(), 0));
	size_t calls = 1;
	const std::vector<uint32_t> rest = drain_all(inbox, &calls);
	CHECK(got + rest.size() == queued);
	CHECK(calls == (queued + IkeInbox::kDrainBatch - 1) / IkeInbox::kDrainBatch);
	// Strangers keep their order among themselves.
	for (size_t i = 1; i < rest.size(); i++)
		CHECK(rest[i] == rest[i - 1] + 1);
	CHECK_FALSE(test::wait_readable(inbox.fd(), 0));
}

TEST_CASE("a flood from one address cannot take the stranger lane") {
	IkeInbox inbox;
	size_t accepted = 0;
	for (uint32_t i = 0; i < 10 * IkeInbox::kSlots; i++)
		accepted += inbox.push(ike_message(0x1000 + i, 0, i), source(1, uint16_t(i))) ? 1 : 0;
	// Ports vary: the bound is per address (one host, any number of ports).
	CHECK(accepted == IkeInbox::kPerSourceStranger);
	CHECK(inbox.dropped_source() == 10 * IkeInbox::kSlots - accepted);
	// A new client from another address still gets in.
	CHECK(inbox.push(ike_message(0x9999, 0, 99), source(2)));
	const std::vector<uint32_t> tags = drain_all(inbox);
	CHECK(tags.size() == accepted + 1);
	CHECK(tags.back() == 99);
	// Once drained, the address has its share again.
	CHECK(inbox.push(ike_message(0x1001, 0, 1), source(1)));
}

TEST_CASE("one peer of a known IKE SA cannot take the whole priority lane") {
	IkeInbox inbox;
	inbox.publish_spis({42, 43});
	size_t accepted = 0;
	for (uint32_t i = 0; i < 4 * IkeInbox::kSlots; i++)
		accepted += inbox.push(ike_message(1, 42, i), source(3)) ? 1 : 0;
	CHECK(accepted == IkeInbox::kPerSourceKnown);
	CHECK(inbox.dropped_source() > 0);
	CHECK(inbox.push(ike_message(2, 43, 7), source(4)));
}

TEST_CASE("strangers still get a share while the priority lane stays busy") {
	IkeInbox inbox;
	std::vector<uint64_t> spis;
	for (uint64_t s = 1; s <= IkeInbox::kPrioritySlots; s++)
		spis.push_back(s);
	inbox.publish_spis(spis);
	REQUIRE(inbox.push(ike_message(0x5000, 0, 5000), source(249)));
	for (uint32_t i = 0; i < IkeInbox::kPrioritySlots; i++)
		REQUIRE(inbox.push(ike_message(7, i + 1, i), source(i)));
	std::vector<uint32_t> first;
	inbox.drain([&](std::span<const uint8_t> msg, const Endpoint&) {
		first.push_back(load_be32(msg.data() + 20));
	});
	CHECK(std::find(first.begin(), first.end(), 5000u) != first.end());
}

TEST_CASE("a message too short for an IKE header or too big is dropped and counted") {
	IkeInbox inbox;
	std::vector<uint8_t> big(IkeInbox::kMaxMessage + 1, 0);
	CHECK_FALSE(inbox.push(big, source(1)));
	CHECK(inbox.too_big() == 1);
	std::vector<uint8_t> shortm(10, 0);
	CHECK_FALSE(inbox.push(shortm, source(1)));
	CHECK(inbox.too_short() == 1);
	CHECK_FALSE(test::wait_readable(inbox.fd(), 0));
}

namespace {

/// An IKE-looking message of @len bytes (at least the header) whose bytes
/// after the header follow from @tag, so a drained copy can be checked.
std::vector<uint8_t> sized_message(uint64_t spi_i, uint64_t spi_r, uint32_t tag, size_t len) {
	std::vector<uint8_t> m = ike_message(spi_i, spi_r, tag);
	m.resize(len);
	for (size_t i = 28; i < len; i++)
		m[i] = uint8_t(tag * 31 + i);
	return m;
}

bool intact(std::span<const uint8_t> msg) {
	const uint32_t tag = load_be32(msg.data() + 20);
	for (size_t i = 28; i < msg.size(); i++)
		if (msg[i] != uint8_t(tag * 31 + i)) return false;
	return true;
}

} // namespace

TEST_CASE("the lanes keep messages of any size intact and in order through wrap-arounds") {
	// Random sizes from the header to kMaxMessage, pushes and drains mixed,
	// both lanes, many sources: every accepted message comes out once, in
	// its lane's order, byte for byte; a source never holds more than its
	// share; an empty lane always takes a message.
	IkeInbox inbox;
	inbox.publish_spis({7});
	std::mt19937 rng(4303);
	std::deque<uint32_t> want_known, want_stranger;
	std::map<std::string, size_t> held; // by source text, both lanes apart
	uint32_t tag = 0;
	size_t accepted = 0, drained = 0, bytes_seen = 0;
	auto check = [&](std::span<const uint8_t> msg, const Endpoint& from) {
		const uint32_t t = load_be32(msg.data() + 20);
		const bool known = load_be64(msg.data() + 8) == 7;
		auto& q = known ? want_known : want_stranger;
		REQUIRE(!q.empty());
		CHECK(q.front() == t);
		q.pop_front();
		CHECK(intact(msg));
		held[(known ? "k" : "s") + to_string(from.addr)]--;
		drained++;
		bytes_seen += msg.size();
	};
	for (int round = 0; round < 400; round++) {
		const size_t pushes = rng() % 300;
		for (size_t k = 0; k < pushes; k++) {
			const bool known = rng() % 3 == 0;
			const size_t len = rng() % 4 == 0 ? IkeInbox::kMaxMessage : 28 + rng() % 1200;
			const Endpoint from = source(uint32_t(rng() % 100));
			const auto m = sized_message(known ? 1 : 0x100 + tag, known ? 7 : 0, tag, len);
			const std::string key = (known ? "k" : "s") + to_string(from.addr);
			const bool was_empty = known ? want_known.empty() : want_stranger.empty();
			const bool ok = inbox.push(m, from);
			if (was_empty && held[key] == 0) CHECK(ok);
			if (ok) {
				(known ? want_known : want_stranger).push_back(tag);
				held[key]++;
				CHECK(held[key] <=
				      (known ? IkeInbox::kPerSourceKnown : IkeInbox::kPerSourceStranger));
				accepted++;
			}
			tag++;
		}
		// Fewer drains than pushes on average: the lanes fill up and drop
		// at times, then empty again.
		const size_t drains = rng() % 12;
		for (size_t k = 0; k < drains; k++)
			inbox.drain(check);
	}
	while (inbox.drain(check)) {}
	CHECK(want_known.empty());
	CHECK(want_stranger.empty());
	CHECK(inbox.dropped() > 0);
	CHECK(accepted > 20000);
	CHECK(drained == accepted);
	MESSAGE(accepted, " accepted, ", drained, " checked (", bytes_seen, " bytes)");
}

TEST_CASE("the stranger lane holds its bytes' worth of the largest messages") {
	// Contiguous bytes per message waste at most one message's room at the
	// end of the ring.
	IkeInbox inbox;
	size_t accepted = 0;
	for (uint32_t i = 0; i < 2 * IkeInbox::kStrangerBytes / IkeInbox::kMaxMessage; i++)
		accepted +=
		    inbox.push(sized_message(0x100 + i, 0, i, IkeInbox::kMaxMessage), source(i)) ? 1 : 0;
	CHECK(accepted == IkeInbox::kStrangerBytes / IkeInbox::kMaxMessage);
	// Half out, then as many in again: they go to the start of the ring.
	size_t out = 0;
	while (out < accepted / 2)
		inbox.drain([&](std::span<const uint8_t> msg, const Endpoint&) {
			CHECK(intact(msg));
			out++;
		});
	size_t again = 0;
	for (uint32_t i = 0; i < accepted; i++)
		again +=
		    inbox.push(sized_message(0x9000 + i, 0, 9000 + i, IkeInbox::kMaxMessage), source(i + 7))
		        ? 1
		        : 0;
	CHECK(again + (out - accepted / 2) >= accepted / 2 - 1);
	const std::vector<uint32_t> tags = drain_all(inbox);
	CHECK(tags.size() == accepted - out + again);
}
