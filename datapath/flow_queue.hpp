// FlowQueue: the send-side flow queue, a flow-queueing scheduler with a
// sojourn-time controller per flow (the scheme of FQ-CoDel, RFC 8290) over
// packets a worker has read ahead from the tun.
//
// Why it exists: Linux's tun driver never stops its queue. Packets routed
// into the tunnel wait in the tun's ring, a tail-drop FIFO of up to 500
// TSO super-packets that no queue discipline sees and that TCP Small Queues
// does not count, so a local bulk sender fills it and every other flow's
// packets wait behind (docs/latency-under-load.md measures it). A worker
// with a FlowQueue drains the ring promptly into buffers of its own, files
// each packet under its flow (a keyed hash of the inner addresses, protocol
// and ports), and sends from the flows in turn:
//   - deficit round robin by bytes between flows, so a bulk flow cannot take
//     more than its share of the worker;
//   - a flow that had nothing queued is "new" and is served before the old
//     ones: a ping, a DNS query, a keystroke, a TCP handshake do not wait
//     behind anybody's standing queue;
//   - per flow, Codel (codel.hpp) on the time each packet has waited since it
//     was read: a flow whose queue stays above target for an interval gets
//     signals (the caller marks CE in the inner header of an ECN-capable
//     packet, which encapsulation copies outward, RFC 6040, and drops a
//     Not-ECT one) until its sender slows down;
//   - a bound: the caller has a fixed number of buffers; when it needs one
//     and none is free, shed() takes the oldest packet of the flow holding
//     the most bytes, so the flow that fills the queue is the one that loses.
//
// Pure: packets are slot numbers (the caller owns the buffers), time is
// passed in, nothing allocates after construction.
#pragma once

#include "datapath/codel.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace esptun::datapath {

struct FlowQueueParams {
	/// Packets the queue can hold at once: slot numbers are 0..slots-1.
	uint32_t slots = 0;
	/// Hash buckets: flows that hash alike share one queue.
	uint32_t flows = 1024;
	/// Bytes a flow may send per round before the next flow's turn
	/// (RFC 8290's quantum; about one full-sized packet).
	uint32_t quantum = 1514;
	/// Target and interval of each flow's Codel; target 0: never signal
	/// (flow queueing only).
	CodelParams codel;
};

class FlowQueue {
public:
	explicit FlowQueue(const FlowQueueParams& p);

	/**
	 * enqueue() - file packet @slot at the tail of its flow
	 * @slot:  a slot number not in the queue
	 * @hash:  the packet's flow hash (flow_hash())
	 * @bytes: its length: what the round robin and the bound count
	 * @now_ns: when it was read (monotonic)
	 */
	void enqueue(uint32_t slot, uint64_t hash, uint32_t bytes, int64_t now_ns) noexcept;

	struct Item {
		uint32_t slot = 0;
		uint32_t bytes = 0;
		int64_t sojourn_ns = 0; ///< how long it waited
		bool signal = false;    ///< its flow's Codel says: mark it CE, or drop it
	};

	/**
	 * dequeue() - the next packet to send: sparse flows first, then the old
	 * flows in deficit round robin
	 * @now_ns: the present (monotonic)
	 * Return: nothing when the queue is empty
	 */
	std::optional<Item> dequeue(int64_t now_ns) noexcept;

	/**
	 * shed() - take the oldest packet of the flow that holds the most bytes,
	 * to make room (the caller frees its slot and counts a drop)
	 * Return: nothing when the queue is empty
	 */
	std::optional<Item> shed() noexcept;

	bool empty() const noexcept { return packets_ == 0; }
	uint32_t packets() const noexcept { return packets_; }
	uint64_t bytes() const noexcept { return bytes_; }
	/// Flows with packets queued now.
	uint32_t active_flows() const noexcept { return active_; }
	/// Times a flow's controller entered its signalling state (all flows).
	uint64_t engaged() const noexcept { return engaged_; }
	/// Flows whose controller is signalling now (kept as dequeue() goes,
	/// so that reading it costs nothing per pass).
	uint32_t signalling() const noexcept { return signalling_; }
	const FlowQueueParams& params() const noexcept { return p_; }

	/// The bucket @hash files under (tests: to make flows collide or not).
	uint32_t bucket(uint64_t hash) const noexcept { return uint32_t(hash % p_.flows); }

private:
	static constexpr uint32_t kNone = UINT32_MAX;

	struct Flow {
		uint32_t head = kNone, tail = kNone; ///< slots, linked through next_
		uint32_t next = kNone;               ///< the next flow in the list this one is on
		uint64_t bytes = 0;
		int64_t deficit = 0;
		enum List : uint8_t { none, fresh, old } list = none;
		Codel codel;
		explicit Flow(CodelParams c) noexcept : codel(c) {}
	};
	struct FlowList {
		uint32_t head = kNone, tail = kNone;
	};

	void push_back(FlowList& l, uint32_t f, Flow::List which) noexcept;
	uint32_t pop_front(FlowList& l) noexcept;
	/// Unlinks @f's head packet. Return: its slot.
	Item take_head(Flow& f) noexcept;

	FlowQueueParams p_;
	std::vector<Flow> flows_;
	std::vector<uint32_t> next_;    ///< per slot: the next slot of its flow
	std::vector<uint32_t> len_;     ///< per slot: its bytes
	std::vector<int64_t> enqueued_; ///< per slot: when it was read
	std::vector<uint32_t> flow_of_; ///< per slot: its flow
	FlowList fresh_, old_;          ///< RFC 8290's new_flows and old_flows
	uint32_t packets_ = 0, active_ = 0, signalling_ = 0;
	uint64_t bytes_ = 0, engaged_ = 0;
	uint32_t max_packet_ = 0; ///< the largest packet seen: RFC 8289's maxpacket
};

/**
 * flow_hash() - a keyed hash of an inner IPv4/IPv6 packet's flow: addresses,
 * protocol, and the ports of TCP, UDP, UDP-Lite, SCTP and DCCP (not of a
 * fragment other than the first; IPv6 extension headers are not walked, so
 * such packets hash by addresses and next header). Anything unparsable
 * hashes as one flow.
 * @key: random per worker, so that a sender cannot choose colliding flows
 *       without seeing the outcome (not a cryptographic guarantee)
 */
uint64_t flow_hash(std::span<const uint8_t> pkt, uint64_t key) noexcept;

} // namespace esptun::datapath
