// Security associations, peers and the table that finds them: by inner
// destination on the way out, by SPI on the way in. The peers come from the
// config, and a reload adds and removes some while the others keep running
// (prepare_peers()/commit_peers()); their SAs are either static (keys from
// the config, built with the peer) or installed and removed at run time by
// the control plane (IKEv2, RFC 7296) while the data-path workers keep
// forwarding.
//
// Theory of operation (run-time SAs)
//
// The data path takes no lock and allocates nothing. It finds a peer's
// current outbound SA with one atomic load of Peer::outbound(), and an
// inbound SA by SPI with two: the slot array, then the slot the SPI's low
// bits pick (SaTable::allocate_spi() makes them unique), before the
// immutable map of static SPIs. The array starts with 4096 slots and doubles
// whenever half of them are taken, up to a bound (about a million): the
// control plane copies the SAs into a twice as large array, publishes it
// and retires the old one like an SA. Growing keeps the low bits unique (a
// superset of them is compared), so no SA moves to a shared slot. Those loads are seq_cst,
// which costs what acquire does (a plain load on x86-64, LDAR on ARMv8) and
// lets the reclamation proof below do without fences. The control plane
// builds an SA completely, then publishes it with a seq_cst (so also release)
// store; a worker that loads the pointer sees it whole.
//
// The peers' lookup structures (allowed_ips prefixes, static SPIs) form one
// immutable PeerSet behind an atomic pointer: a reload builds a new set,
// publishes it with one store and retires the old one, and a removed peer
// with it, the same way as an SA.
//
// Replacing or removing an SA unpublishes it, but a worker may still hold the
// old pointer for the packet in hand, so the object is retired, not freed:
// epoch-based reclamation. Every worker announces the global epoch it saw
// when it picked up work (SaTable::enter(), once per batch) and clears the
// announcement before it sleeps (leave()). An SA retired at epoch e is freed
// once every worker is idle or announced an epoch later than e: such a worker
// started its batch after the SA was gone, so it cannot hold it. The proof,
// with its memory orders, is at SaTable::enter() in sa.cpp.
//
// Make-before-break (RFC 7296 section 2.8): install the new inbound SA
// first, so both old and new decrypt, then the new outbound SA (the peer
// receives on the new SPI from then on; our workers still holding the old
// outbound SA finish their packet with it and its own sequence counter), and
// remove the old inbound SA last, when the peer says so.
#pragma once

#include "base/counters.hpp"
#include "base/inet.hpp"
#include "base/secret.hpp"
#include "crypto/esp_transform.hpp"
#include "tunnel/address_pool.hpp"
#include "tunnel/allowed_ips.hpp"
#include "tunnel/replay_window.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace esptun::tunnel {

/// Everything needed to build one SA direction of a statically keyed peer.
struct SaParams {
	uint32_t spi = 0;
	SecretBytes enc_key; ///< wiped when freed
	SecretBytes auth_key;
};

/// Everything needed to build one peer (and, keyed statically, its pair of SAs).
struct PeerParams {
	std::string name;
	std::optional<Endpoint> endpoint;
	std::vector<IpPrefix> allowed_ips;
	/// true: the SA pair below is built with the table, from the config
	/// ([peer.out]/[peer.in]). false: the peer starts without SAs, and the
	/// control plane installs them (IKE); cipher, esn, replay_window, out and
	/// in are then ignored, and each SA brings its own.
	bool keyed_statically = true;
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	bool esn = true;
	uint32_t replay_window = 1024;
	crypto::CryptoImpl impl = crypto::CryptoImpl::automatic; ///< also for SAs installed later
	SaParams out, in;
};

/**
 * AddressRange - the addresses of one traffic selector (RFC 7296 section
 * 3.13.1), first to last inclusive, of one family; protocol and ports aside.
 */
struct AddressRange {
	IpAddress first, last;

	/// contains() - whether @a (of the same family) lies between first and last
	bool contains(const IpAddress& a) const noexcept {
		if (a.family != first.family) return false;
		const size_t n = a.size();
		return std::memcmp(first.bytes.data(), a.bytes.data(), n) <= 0 &&
		       std::memcmp(a.bytes.data(), last.bytes.data(), n) <= 0;
	}
};

/// One direction of a Child SA negotiated at run time (RFC 7296 section 2.17
/// derives the keys; the suite may change at every rekey).
struct ChildSaKeys {
	uint32_t spi = 0; ///< inbound: from SaTable::allocate_spi(); outbound: the peer's choice
	crypto::Cipher cipher = crypto::Cipher::aes128_gcm;
	SecretBytes enc_key;           ///< AES key (CBC) or AES key || salt (GCM, RFC 4106 section 8.1)
	SecretBytes auth_key;          ///< HMAC key (CBC-HMAC), empty for GCM
	bool esn = true;               ///< extended sequence numbers (RFC 4303 section 2.2.1)
	uint32_t replay_window = 1024; ///< inbound only
	/// Inbound only: our side of the CHILD_SA (its local traffic selectors);
	/// a packet to an inner destination outside them is dropped. Empty: any.
	std::vector<AddressRange> local;
};

/**
 * OutboundSa - the SA we send with. Every data-path worker may send on it
 * (the tun spreads flows over its queues), so the sequence number is taken
 * with compare-and-swap: unique across workers, never reused. A replaced SA
 * keeps its own counter until it is freed, so a worker that still finishes a
 * packet on it cannot collide with the new SA's numbers (which have other keys).
 */
struct OutboundSa {
	uint32_t spi = 0;
	bool esn = true;
	const crypto::CipherSpec* spec = nullptr; ///< the suite: lengths and alignment for the data path
	/// One transform per data-path worker: a transform holds OpenSSL
	/// contexts and IV state that one thread at a time may use.
	std::vector<std::unique_ptr<crypto::EspTransform>> transforms;
	std::atomic<uint64_t> next_seq{1}; ///< the next number to take
	std::atomic<uint64_t> last_seq{0}; ///< the highest number taken and sealed so far
	/// The highest sequence number the data path may use: what the state file
	/// has reserved (service/seq_state.hpp); no limit without one.
	std::atomic<uint64_t> seq_limit{UINT64_MAX};
	SharedCounter packets, bytes; ///< bytes: inner packet bytes

	/// note_sent() - raise last_seq to @seq (workers finish out of order)
	void note_sent(uint64_t seq) noexcept {
		uint64_t cur = last_seq.load(std::memory_order_relaxed);
		while (cur < seq && !last_seq.compare_exchange_weak(cur, seq, std::memory_order_relaxed))
			;
	}
};

/**
 * SpinLock - for the replay window: held for a few dozen instructions, and
 * uncontended as long as one peer's packets arrive on one worker's socket
 * (SO_REUSEPORT hashes the 4-tuple), which is the normal case.
 */
class SpinLock {
public:
	void lock() noexcept {
		while (flag_.test_and_set(std::memory_order_acquire))
			while (flag_.test(std::memory_order_relaxed))
				;
	}
	void unlock() noexcept { flag_.clear(std::memory_order_release); }

private:
	std::atomic_flag flag_;
};

struct Peer;

/// InboundSa - an SA we receive on, found by its SPI.
struct InboundSa {
	uint32_t spi = 0;
	bool esn = true;
	const crypto::CipherSpec* spec = nullptr; ///< the suite: lengths and alignment for the data path
	std::vector<std::unique_ptr<crypto::EspTransform>> transforms; ///< one per worker, as OutboundSa's
	ReplayWindow replay; ///< under replay_lock (check, then commit after the ICV)
	mutable SpinLock replay_lock;
	std::atomic<uint64_t> highest_seq{0}; ///< published copy for status
	SharedCounter packets, bytes;
	/// Authenticated packets accepted although a higher sequence number had
	/// already arrived (reordered on the way, inside the replay window)
	SharedCounter reordered;
	Peer* peer = nullptr;
	/// Our side of the CHILD_SA: set before the SA is published, then only
	/// read. Empty: any destination (statically keyed SAs).
	std::vector<AddressRange> local;

	/// destination_allowed() - whether an inner packet to @dst may come
	/// through this SA (RFC 4301 section 5.2: its selectors, checked after
	/// it is opened). A scan of a few ranges; no allocation.
	bool destination_allowed(const IpAddress& dst) const noexcept {
		if (local.empty()) return true;
		for (const AddressRange& r : local)
			if (r.contains(dst)) return true;
		return false;
	}

	InboundSa(uint32_t window, bool esn_on) : esn(esn_on), replay(window, esn_on) {}
};

/// Traffic of a peer summed over its SAs (inner packets and bytes).
struct SaTotals {
	uint64_t tx_packets = 0, tx_bytes = 0;
	uint64_t rx_packets = 0, rx_bytes = 0;
};

/**
 * Peer - the other end of a tunnel.
 *
 * The endpoint is written by the data path (when an authenticated packet
 * arrives from a new address: NAT rebinding) and by the control plane, and
 * read by every worker for every packet it sends: a sequence lock over three
 * atomic words, so a read takes no lock and never sees half of an update; the
 * rare writers take a mutex among themselves.
 */
struct Peer {
	std::string name;
	std::vector<IpPrefix> allowed_ips;
	bool keyed_statically = true; ///< SAs from the config; false: installed at run time
	bool endpoint_configured = false;
	crypto::CryptoImpl impl = crypto::CryptoImpl::automatic; ///< CBC-HMAC flavour of its SAs
	/// The statically keyed pair, built with the table and never replaced.
	/// A peer keyed at run time leaves them unused (`out` without transforms,
	/// `in` null): use outbound() and SaTable::sa_info() instead. Kept as
	/// plain members because code written for static keys reads them
	/// directly: the sequence state file (service/seq_state.cpp), and the
	/// unit tests and the ESP fuzz target that check the static pair.
	OutboundSa out;
	std::unique_ptr<InboundSa> in;
	std::atomic<int64_t> last_rx_unix_ms{0}; ///< wall clock of the last authenticated packet
	SharedCounter endpoint_changes;
	/// Packets of this peer dropped, by reason (drop_is_per_peer() says
	/// which reasons are ever counted here); every worker adds to them, and
	/// they are only touched when a packet is dropped.
	std::array<SharedCounter, kDropReasons> drops{};

	/**
	 * outbound() - the SA to send with now, or nullptr before the first
	 * key exchange completed. Data path: one seq_cst load (see the proof
	 * at SaTable::enter() in sa.cpp), which also makes the SA's construction
	 * visible; the pointer stays valid until the worker's next SaTable::leave().
	 */
	OutboundSa* outbound() const noexcept { return out_sa_.load(std::memory_order_seq_cst); }

	/// The current endpoint, if any: a consistent copy, from any thread.
	std::optional<Endpoint> endpoint() const noexcept;
	/// Move to a new endpoint (data path: roaming; control plane: IKE).
	void set_endpoint(const Endpoint& ep) noexcept;
	/// Same as endpoint() (the control plane's name for it).
	std::optional<Endpoint> endpoint_snapshot() const { return endpoint(); }

private:
	friend class SaTable;
	void store_endpoint(const std::optional<Endpoint>& ep) noexcept;

	std::atomic<OutboundSa*> out_sa_{nullptr}; ///< &out, a run-time SA, or nullptr

	// Run-time SAs: changed and read by the control plane only, under
	// SaTable's control mutex.
	std::unique_ptr<OutboundSa> run_out_;            ///< owns what out_sa_ points to
	std::vector<std::unique_ptr<InboundSa>> run_in_; ///< installed, oldest first
	SaTotals freed_;                                 ///< counters of its SAs already freed

	std::mutex endpoint_write_;                             ///< writers among themselves
	std::atomic<uint32_t> endpoint_seq_;                    ///< odd while a write is in progress
	std::array<std::atomic<uint64_t>, 3> endpoint_words_{}; ///< address, then has|family|port
};

/// One SA as the status output shows it: a copy taken under the control mutex.
struct SaInfo {
	uint32_t spi = 0;
	std::string_view cipher; ///< config name of the suite
	std::string impl;        ///< EspTransform::impl_name()
	bool esn = true;
	bool keyed_statically = true;
	uint64_t packets = 0, bytes = 0;
	uint64_t seq = 0;           ///< outbound: last_seq; inbound: highest_seq
	uint64_t replay_window = 0; ///< inbound only
	uint64_t reordered = 0;     ///< inbound only
};

/// A peer's SAs as the status output shows them.
struct PeerSaInfo {
	std::optional<SaInfo> out; ///< the current outbound SA, if any
	std::vector<SaInfo> in;    ///< the installed inbound SAs, oldest first
	SaTotals totals;           ///< over every SA the peer had, freed ones included
	size_t retiring = 0;       ///< its replaced or removed SAs not yet freed
};

/// PeerSet - what the data path finds peers by: built whole, published with
/// one atomic store, never changed after (a reload publishes a new one).
struct PeerSet {
	AllowedIps allowed;
	std::unordered_map<uint32_t, InboundSa*> by_spi; ///< static SPIs
};

class SaTable;

/// Peers by name (views of their own names), for the control plane.
using NameIndex = std::unordered_map<std::string_view, Peer*>;

/**
 * PeerChange - a reload's peers, built and checked by SaTable::
 * prepare_peers() but not yet visible to the data path; commit_peers()
 * publishes it. Dropped uncommitted, it changes nothing.
 */
class PeerChange {
public:
	PeerChange();
	PeerChange(PeerChange&&) noexcept;
	PeerChange& operator=(PeerChange&&) noexcept;
	~PeerChange();
	/// The new peers, in the order given (their static SAs are built and
	/// may still be set up, e.g. their sequence numbers, before the commit).
	std::vector<Peer*> added() const;

private:
	friend class SaTable;
	std::vector<std::unique_ptr<Peer>> added_;
	std::vector<Peer*> removed_;
	/// The added peers' entries for SaTable's name index, made here so that
	/// commit_peers() inserts them without allocating.
	std::vector<NameIndex::node_type> names_;
	/// The new set; null when the change has nothing in it (no allowed_ips,
	/// no static SA on either side: a template's user) and the set stays.
	std::unique_ptr<PeerSet> set_;
};

class SaTable {
public:
	/// Slots for run-time inbound SAs, indexed by the SPI's low bits: the
	/// table starts with kMinSpiSlots and doubles when half are taken, up to
	/// its maximum (kMaxSpiSlots unless the constructor says less).
	static constexpr size_t kMinSpiSlots = 4096;
	static constexpr size_t kMaxSpiSlots = size_t(1) << 20;
	/// SPIs 1-255 are reserved by IANA, 0 for local use (RFC 4303 section 2.1).
	static constexpr uint32_t kMinSpi = 256;

	/// Builds the peers and their static SAs; throws std::invalid_argument on
	/// keys that do not fit the cipher, duplicate SPIs or overlapping allowed_ips.
	/// @workers: data-path threads; each SA gets a transform for each.
	/// @max_spi_slots: the most slots the run-time SPI array grows to (a power
	/// of two from kMinSpiSlots to kMaxSpiSlots; std::invalid_argument otherwise).
	explicit SaTable(const std::vector<PeerParams>& peers, size_t workers = 1,
	                 size_t max_spi_slots = kMaxSpiSlots);
	/// Frees every SA, retired or not: the data path must have stopped.
	~SaTable();
	SaTable(const SaTable&) = delete;
	SaTable& operator=(const SaTable&) = delete;

	// --- Data path: any worker thread, lock-free. -------------------------

	/// Outbound: the peer holding @dst as its virtual address (a host route,
	/// so the longest match there can be), else the one whose allowed_ips
	/// best match it. Inbound, the same lookup checks the inner source.
	Peer* route(const IpAddress& dst) const noexcept {
		if (!pool_.empty())
			if (Peer* p = pool_.lookup(dst)) return p;
		return set_.load(std::memory_order_seq_cst)->allowed.lookup(dst);
	}

	/**
	 * find_inbound() - the SA receiving with @spi, or nullptr
	 *
	 * The run-time slot first (two seq_cst loads, the array and the slot; the
	 * SA's own SPI must match, as SPIs that share the low bits share the
	 * slot), then the static map. A run-time SA found stays valid until the
	 * worker's next leave().
	 */
	InboundSa* find_inbound(uint32_t spi) const noexcept {
		const SpiSlots* slots = slots_.load(std::memory_order_seq_cst);
		InboundSa* sa = slots->slot[spi & slots->mask].load(std::memory_order_seq_cst);
		if (sa && sa->spi == spi) return sa;
		const PeerSet* set = set_.load(std::memory_order_seq_cst);
		if (set->by_spi.empty()) return nullptr;
		auto it = set->by_spi.find(spi);
		return it == set->by_spi.end() ? nullptr : it->second;
	}

	/**
	 * enter() - worker @worker starts handling packets: until leave(), no SA
	 * it finds is freed. Call once per batch, not per packet; see sa.cpp for
	 * why this is enough.
	 */
	void enter(size_t worker) const noexcept;
	/// leave() - worker @worker holds no SA any more (before it sleeps).
	void leave(size_t worker) const noexcept {
		active_[worker].epoch.store(0, std::memory_order_release);
	}

	/// The peers, in config order (new ones at the end). Control plane only:
	/// a reload changes the list.
	const std::vector<std::unique_ptr<Peer>>& peers() const noexcept { return peers_; }
	/// The peer named @name, or nullptr (control plane).
	Peer* find_peer(std::string_view name) const noexcept;
	size_t workers() const noexcept { return workers_; }

	/// set_address_pool() - the addresses IKE clients lease (before the
	/// data path starts; the pool is empty until then).
	void set_address_pool(AddressPool pool) { pool_ = std::move(pool); }
	/// Leases are made and ended by the control plane (see AddressPool).
	AddressPool& address_pool() noexcept { return pool_; }
	const AddressPool& address_pool() const noexcept { return pool_; }

	// --- Control plane: meant for one control thread. Each call takes the
	// control mutex, so a status request served by another thread is safe.

	/**
	 * allocate_spi() - reserve an SPI for an inbound SA about to be negotiated
	 *
	 * A free slot at random, with random high bits: at least kMinSpi, never a
	 * static SPI, never one installed or reserved. Install it with
	 * install_inbound() or give it back with release_spi(). The slot array
	 * doubles first when half of it is taken and it may still grow.
	 * Throws std::runtime_error when every slot of the largest array is taken.
	 */
	uint32_t allocate_spi();

	/// try_allocate_spi() - allocate_spi(), but nullopt when all slots are
	/// taken: a full table is a refused negotiation, not an error to unwind.
	std::optional<uint32_t> try_allocate_spi();

	/// release_spi() - free a reservation that was never installed.
	/// Return: false when @spi is not reserved (unknown, or installed).
	bool release_spi(uint32_t spi);

	/**
	 * install_inbound() - build an inbound SA for @peer and start receiving on it
	 * @keys: its SPI must come from allocate_spi()
	 *
	 * Builds one transform per worker, then publishes the SA in its slot.
	 * Any older inbound SA of @peer stays: both decrypt until remove_inbound().
	 * Throws std::invalid_argument for a peer keyed statically or not in this
	 * table, an SPI not reserved, or keys that do not fit the cipher (the SPI
	 * then stays reserved); std::runtime_error when OpenSSL fails.
	 * Return: the SA (owned by the table).
	 */
	InboundSa* install_inbound(Peer& peer, const ChildSaKeys& keys);

	/**
	 * install_outbound() - build an outbound SA for @peer and send with it from now on
	 * @keys: the SPI the peer allocated (>= kMinSpi); replay_window is unused
	 *
	 * Swaps the new SA in with one atomic exchange; the previous one is
	 * retired (freed by collect() once no worker can hold it).
	 * Throws as install_inbound() does.
	 */
	OutboundSa* install_outbound(Peer& peer, const ChildSaKeys& keys);

	/// remove_inbound() - stop receiving on @spi and retire its SA.
	/// Return: false when no run-time SA has @spi (static SAs stay).
	bool remove_inbound(uint32_t spi);

	/// remove_outbound() - stop sending to @peer (its packets drop as no_sa)
	/// and retire its SA. Return: false when it had no run-time outbound SA.
	bool remove_outbound(Peer& peer);

	/**
	 * collect() - free the retired SAs that no worker can still hold
	 * Called by install and remove themselves, and on a timer by the control
	 * plane (a worker that was busy at the last call may be idle now).
	 * Return: how many were freed.
	 */
	size_t collect();

	/**
	 * prepare_peers() - build and check a reload's change of peers
	 * @remove: names of peers to take away (each must exist)
	 * @add:    peers to add (a changed peer is removed and added again)
	 *
	 * Builds the new peers with their static SAs and the lookup set the data
	 * path will use, without publishing anything. A change whose peers, on
	 * both sides, have no allowed_ips and no static SA (a template's user
	 * coming or going) leaves the set as it is: it costs the same with ten
	 * peers as with 10,000. Throws std::invalid_argument
	 * as the constructor does (keys, SPIs in use, overlapping allowed_ips,
	 * names), naming the peer; nothing changes then.
	 */
	PeerChange prepare_peers(std::span<const std::string> remove,
	                         const std::vector<PeerParams>& add) const;

	/**
	 * commit_peers() - make @change what the data path sees
	 *
	 * The removed peers' run-time SAs are unpublished, their leases ended,
	 * the new set published with one store; the old set and the removed
	 * peers are retired and freed by collect() like SAs. Packets of the
	 * peers that stay never find a gap. Call only with the result of
	 * prepare_peers() on this table, with no other change in between.
	 */
	void commit_peers(PeerChange change);

	/// Retired SAs waiting for collect() (for tests and status).
	size_t retired() const;
	/// spi_slots() - the size of the run-time SPI array now
	size_t spi_slots() const;
	/// spis_in_use() - run-time SPIs reserved or installed
	size_t spis_in_use() const;

	/// sa_info() - @peer's SAs and totals, copied under the control mutex.
	PeerSaInfo sa_info(const Peer& peer) const;

private:
	enum class SlotState : uint8_t { free, reserved, installed };
	/// The run-time SPI array the data path reads: a power of two of slots.
	struct SpiSlots {
		explicit SpiSlots(size_t n)
		    : mask(n - 1), slot(std::make_unique<std::atomic<InboundSa*>[]>(n)) {}
		size_t mask;
		std::unique_ptr<std::atomic<InboundSa*>[]> slot; ///< value-initialized: nullptr
	};
	/// A retired SA (one of the two), peer, peer set or slot array, and the
	/// epoch when it was unpublished.
	struct Retired {
		uint64_t epoch;
		Peer* peer;
		std::unique_ptr<OutboundSa> out;
		std::unique_ptr<InboundSa> in;
		std::unique_ptr<Peer> removed_peer;
		std::unique_ptr<PeerSet> old_set;
		std::unique_ptr<SpiSlots> old_slots;
	};
	/// One worker's announcement, alone on its cache line: each worker
	/// writes its own twice per batch, and must not slow the others down.
	struct alignas(64) ActiveEpoch {
		std::atomic<uint64_t> epoch{0}; ///< 0: not handling packets
	};

	void check_dynamic_peer(const Peer& peer, const char* what) const;
	std::vector<std::unique_ptr<crypto::EspTransform>> make_transforms(const Peer& peer,
	                                                                   const ChildSaKeys& keys) const;
	std::unique_ptr<Peer> build_peer(const PeerParams& p) const;
	void reserve_retired(size_t more = 1);
	void retire(Peer* peer, std::unique_ptr<OutboundSa> out, std::unique_ptr<InboundSa> in);
	void retire(Retired r);
	void unpublish_run_time_sas(Peer& peer);
	size_t collect_locked();
	/// index_names() - @change's entries for by_name_, from its added peers
	static void index_names(PeerChange& change);
	/// grow_slots() - double the SPI array (under control_); false at the
	/// maximum or when memory for it cannot be had
	bool grow_slots() noexcept;
	/// The slot of @spi in the current array (control plane).
	size_t slot_of(uint32_t spi) const noexcept { return spi & (slot_state_.size() - 1); }
	/// The current array's slot @i, for the control plane's stores.
	std::atomic<InboundSa*>& slot(size_t i) noexcept { return slots_owned_->slot[i]; }

	size_t workers_;
	std::vector<std::unique_ptr<Peer>> peers_; ///< control plane only
	/// peers_ by name (views of their own names): control plane only.
	NameIndex by_name_;
	std::unique_ptr<PeerSet> set_owned_;       ///< what set_ points to
	std::atomic<const PeerSet*> set_{nullptr}; ///< read by the data path
	AddressPool pool_;

	/// Run-time inbound SAs, published by the control plane, read by workers.
	std::atomic<const SpiSlots*> slots_{nullptr};
	std::unique_ptr<SpiSlots> slots_owned_; ///< what slots_ points to
	size_t max_spi_slots_;
	alignas(64) std::atomic<uint64_t> epoch_{1}; ///< bumped at every retirement
	std::unique_ptr<ActiveEpoch[]> active_;      ///< one per worker

	mutable std::mutex control_; ///< everything below, and the peers' run-time SA lists
	std::vector<SlotState> slot_state_;
	std::vector<uint32_t> slot_spi_; ///< the reserved or installed SPI
	size_t slots_in_use_ = 0;        ///< slots not free
	std::vector<Retired> retired_;
	std::random_device random_;
};

/**
 * RouteCache - SaTable::route()'s last answer, for the runs of packets to
 * (or from) one address that a worker's pass mostly is: one comparison
 * instead of a prefix lookup per packet. Routes change between passes
 * (address pool leases), so the data path clears it when a pass starts;
 * within a pass it answers as the table did at the pass's first packet to
 * that address.
 */
class RouteCache {
public:
	Peer* route(const SaTable& table, const IpAddress& addr) noexcept {
		if (!valid_ || !(addr == addr_)) {
			addr_ = addr;
			peer_ = table.route(addr);
			valid_ = true;
		}
		return peer_;
	}
	void clear() noexcept { valid_ = false; }

private:
	IpAddress addr_{};
	Peer* peer_ = nullptr;
	bool valid_ = false;
};

} // namespace esptun::tunnel
