// FlowQueue and flow_hash(): see flow_queue.hpp. The scheduling follows
// RFC 8290 section 4 (new and old flow lists, deficit round robin), the
// controller RFC 8289 through Codel.
#include "datapath/flow_queue.hpp"

#include <algorithm>
#include <cstring>

namespace esptun::datapath {

FlowQueue::FlowQueue(const FlowQueueParams& p)
    : p_(p), next_(p.slots, kNone), len_(p.slots, 0), enqueued_(p.slots, 0), flow_of_(p.slots, 0) {
	if (p_.flows == 0) p_.flows = 1;
	if (p_.quantum == 0) p_.quantum = 1;
	flows_.assign(p_.flows, Flow(p_.codel));
}

void FlowQueue::push_back(FlowList& l, uint32_t f, Flow::List which) noexcept {
	flows_[f].next = kNone;
	flows_[f].list = which;
	if (l.tail == kNone)
		l.head = f;
	else
		flows_[l.tail].next = f;
	l.tail = f;
}

uint32_t FlowQueue::pop_front(FlowList& l) noexcept {
	const uint32_t f = l.head;
	l.head = flows_[f].next;
	if (l.head == kNone) l.tail = kNone;
	flows_[f].next = kNone;
	flows_[f].list = Flow::none;
	return f;
}

void FlowQueue::enqueue(uint32_t slot, uint64_t hash, uint32_t bytes, int64_t now_ns) noexcept {
	if (slot >= next_.size()) return; // not a slot of ours: a caller bug, and nothing to file
	const uint32_t fi = bucket(hash);
	Flow& f = flows_[fi];
	next_[slot] = kNone;
	len_[slot] = bytes;
	enqueued_[slot] = now_ns;
	flow_of_[slot] = fi;
	if (f.tail == kNone)
		f.head = slot;
	else
		next_[f.tail] = slot;
	f.tail = slot;
	if (f.bytes == 0) active_++;
	f.bytes += bytes;
	bytes_ += bytes;
	packets_++;
	max_packet_ = std::max(max_packet_, bytes);
	// A flow on neither list had nothing queued and has had its turn: it
	// joins the new flows with a fresh quantum (RFC 8290 section 4.1).
	if (f.list == Flow::none) {
		f.deficit = p_.quantum;
		push_back(fresh_, fi, Flow::fresh);
	}
}

FlowQueue::Item FlowQueue::take_head(Flow& f) noexcept {
	const uint32_t slot = f.head;
	f.head = next_[slot];
	if (f.head == kNone) f.tail = kNone;
	next_[slot] = kNone;
	f.bytes -= len_[slot];
	if (f.bytes == 0) active_--;
	bytes_ -= len_[slot];
	packets_--;
	return Item{slot, len_[slot], 0, false};
}

std::optional<FlowQueue::Item> FlowQueue::dequeue(int64_t now_ns) noexcept {
	for (;;) {
		FlowList* l = fresh_.head != kNone ? &fresh_ : old_.head != kNone ? &old_ : nullptr;
		if (!l) return std::nullopt;
		const uint32_t fi = l->head;
		Flow& f = flows_[fi];
		if (f.deficit <= 0) {
			// Its share of this round is spent: more credit, to the back.
			f.deficit += p_.quantum;
			pop_front(*l);
			push_back(old_, fi, Flow::old);
			continue;
		}
		if (f.head == kNone) {
			// Nothing queued. A new flow goes to the old list once more, so
			// that one which keeps coming back cannot stay new and starve
			// the others; an old one leaves the lists (section 4.2).
			pop_front(*l);
			if (l == &fresh_) push_back(old_, fi, Flow::old);
			continue;
		}
		Item it = take_head(f);
		it.sojourn_ns = std::max<int64_t>(0, now_ns - enqueued_[it.slot]);
		// RFC 8289's ok_to_drop: a queue of no more than one packet is not
		// a standing queue, whatever it waited.
		const int64_t judged = f.bytes <= max_packet_ ? 0 : it.sojourn_ns;
		if (p_.codel.target_ns > 0) {
			const uint64_t before = f.codel.engaged();
			const bool was = f.codel.dropping();
			it.signal = f.codel.on_dequeue(judged, now_ns, it.bytes >= kBulkBytes);
			engaged_ += f.codel.engaged() - before;
			if (f.codel.dropping() != was) was ? signalling_-- : signalling_++;
		}
		f.deficit -= it.bytes;
		return it;
	}
}

std::optional<FlowQueue::Item> FlowQueue::shed() noexcept {
	if (packets_ == 0) return std::nullopt;
	// The fattest flow is on one of the lists (a flow with packets always
	// is); a scan, as fq_codel's, but only when the buffers run out.
	uint32_t fattest = kNone;
	for (const FlowList* l : {&fresh_, &old_})
		for (uint32_t fi = l->head; fi != kNone; fi = flows_[fi].next)
			if (flows_[fi].bytes > 0 &&
			    (fattest == kNone || flows_[fi].bytes > flows_[fattest].bytes))
				fattest = fi;
	if (fattest == kNone) return std::nullopt; // unreachable while packets_ > 0
	return take_head(flows_[fattest]);
}

// --- flow_hash() ---

namespace {

/// One round of a 64-bit mixer (the finaliser of splitmix64).
constexpr uint64_t mix(uint64_t x) noexcept {
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t load64(const uint8_t* p) noexcept {
	uint64_t v;
	std::memcpy(&v, p, sizeof v);
	return v;
}

bool has_ports(uint8_t proto) noexcept {
	// TCP, UDP, DCCP, SCTP, UDP-Lite: source and destination port first.
	return proto == 6 || proto == 17 || proto == 33 || proto == 132 || proto == 136;
}

} // namespace

uint64_t flow_hash(std::span<const uint8_t> pkt, uint64_t key) noexcept {
	uint64_t h = mix(key ^ 0x9e3779b97f4a7c15ULL);
	auto feed = [&](uint64_t v) noexcept { h = mix(h ^ v); };
	if (pkt.size() >= 20 && (pkt[0] >> 4) == 4) {
		const size_t ihl = size_t(pkt[0] & 15) * 4;
		const uint8_t proto = pkt[9];
		feed(load64(&pkt[12])); // source and destination address
		uint64_t tail = uint64_t(proto) << 32;
		// Ports only in the first fragment (offset 0), which has them.
		const bool first = ((pkt[6] & 0x1f) | pkt[7]) == 0;
		if (first && has_ports(proto) && ihl >= 20 && pkt.size() >= ihl + 4)
			tail |= uint64_t(pkt[ihl]) << 24 | uint64_t(pkt[ihl + 1]) << 16 |
			        uint64_t(pkt[ihl + 2]) << 8 | pkt[ihl + 3];
		feed(tail);
		return h;
	}
	if (pkt.size() >= 40 && (pkt[0] >> 4) == 6) {
		const uint8_t next = pkt[6];
		for (size_t off = 8; off < 40; off += 8)
			feed(load64(&pkt[off]));
		uint64_t tail = uint64_t(next) << 32 | 6ULL << 40;
		if (has_ports(next) && pkt.size() >= 44)
			tail |= uint64_t(pkt[40]) << 24 | uint64_t(pkt[41]) << 16 | uint64_t(pkt[42]) << 8 |
			        pkt[43];
		feed(tail);
		return h;
	}
	feed(0xffffffffffffffffULL);
	return h;
}

} // namespace esptun::datapath
