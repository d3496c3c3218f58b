// SA table: construction, the control plane's install and remove calls, and
// the epoch-based reclamation of the SAs they replace. See sa.hpp.
#include "tunnel/sa.hpp"

#include "base/disjoint_prefixes.hpp"
#include "base/vectors.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace esptun::tunnel {
namespace {

std::string spi_text(uint32_t spi) {
	char buf[16];
	std::snprintf(buf, sizeof buf, "0x%08x", spi);
	return buf;
}

/// The fields both directions have; @seq: the last sent or highest received number.
template <class Sa> SaInfo common_info(const Sa& sa, bool keyed_statically, uint64_t seq) {
	SaInfo i;
	i.spi = sa.spi;
	i.cipher = sa.spec->name;
	i.impl = std::string(sa.transforms.front()->impl_name());
	i.esn = sa.esn;
	i.keyed_statically = keyed_statically;
	i.packets = sa.packets.get();
	i.bytes = sa.bytes.get();
	i.seq = seq;
	return i;
}

SaInfo out_info(const OutboundSa& sa, bool keyed_statically) {
	return common_info(sa, keyed_statically, sa.last_seq.load(std::memory_order_relaxed));
}

SaInfo in_info(const InboundSa& sa, bool keyed_statically) {
	SaInfo i = common_info(sa, keyed_statically, sa.highest_seq.load(std::memory_order_relaxed));
	i.replay_window = sa.replay.size();
	i.reordered = sa.reordered.get();
	return i;
}

void add_out(SaTotals& t, const OutboundSa& sa) noexcept {
	t.tx_packets += sa.packets.get();
	t.tx_bytes += sa.bytes.get();
}

void add_in(SaTotals& t, const InboundSa& sa) noexcept {
	t.rx_packets += sa.packets.get();
	t.rx_bytes += sa.bytes.get();
}

} // namespace

void Peer::set_endpoint(const Endpoint& ep) noexcept { store_endpoint(ep); }

void Peer::store_endpoint(const std::optional<Endpoint>& ep) noexcept {
	uint64_t a = 0, b = 0, meta = 0;
	if (ep) {
		std::memcpy(&a, ep->addr.bytes.data(), 8);
		std::memcpy(&b, ep->addr.bytes.data() + 8, 8);
		meta = (uint64_t(1) << 63) | (uint64_t(ep->addr.family) << 16) | ep->port;
	}
	std::lock_guard lock(endpoint_write_);
	const uint32_t s = endpoint_seq_.load(std::memory_order_relaxed);
	endpoint_seq_.store(s + 1, std::memory_order_relaxed);
	std::atomic_thread_fence(std::memory_order_release);
	endpoint_words_[0].store(a, std::memory_order_relaxed);
	endpoint_words_[1].store(b, std::memory_order_relaxed);
	endpoint_words_[2].store(meta, std::memory_order_relaxed);
	endpoint_seq_.store(s + 2, std::memory_order_release);
}

std::optional<Endpoint> Peer::endpoint() const noexcept {
	uint64_t a, b, meta;
	for (;;) {
		const uint32_t s1 = endpoint_seq_.load(std::memory_order_acquire);
		a = endpoint_words_[0].load(std::memory_order_relaxed);
		b = endpoint_words_[1].load(std::memory_order_relaxed);
		meta = endpoint_words_[2].load(std::memory_order_relaxed);
		std::atomic_thread_fence(std::memory_order_acquire);
		if (!(s1 & 1) && endpoint_seq_.load(std::memory_order_relaxed) == s1) break;
	}
	if (!(meta >> 63)) return std::nullopt;
	Endpoint ep;
	ep.addr.family = static_cast<Family>((meta >> 16) & 0xff);
	std::memcpy(ep.addr.bytes.data(), &a, 8);
	std::memcpy(ep.addr.bytes.data() + 8, &b, 8);
	ep.port = uint16_t(meta);
	return ep;
}

PeerChange::PeerChange() = default;
PeerChange::PeerChange(PeerChange&&) noexcept = default;
PeerChange& PeerChange::operator=(PeerChange&&) noexcept = default;
PeerChange::~PeerChange() = default;

std::vector<Peer*> PeerChange::added() const {
	std::vector<Peer*> out;
	for (const auto& p : added_)
		out.push_back(p.get());
	return out;
}

SaTable::SaTable(const std::vector<PeerParams>& params, size_t workers, size_t max_spi_slots)
    : workers_(workers), max_spi_slots_(max_spi_slots) {
	if (workers == 0) throw std::invalid_argument("an SA table needs at least one worker");
	if (max_spi_slots < kMinSpiSlots || max_spi_slots > kMaxSpiSlots ||
	    (max_spi_slots & (max_spi_slots - 1)) != 0)
		throw std::invalid_argument("SA table: at most " + std::to_string(max_spi_slots) +
		                            " SPI slots is not a power of two from " +
		                            std::to_string(kMinSpiSlots) + " to " +
		                            std::to_string(kMaxSpiSlots));
	active_ = std::make_unique<ActiveEpoch[]>(workers);
	slots_owned_ = std::make_unique<SpiSlots>(kMinSpiSlots);
	slots_.store(slots_owned_.get(), std::memory_order_relaxed);
	slot_state_.assign(kMinSpiSlots, SlotState::free);
	slot_spi_.assign(kMinSpiSlots, 0);
	set_owned_ = std::make_unique<PeerSet>();
	set_.store(set_owned_.get(), std::memory_order_relaxed);
	// Visible to the workers through their creation, which comes later.
	commit_peers(prepare_peers({}, params));
}

/// build_peer() - one peer as @p describes it, with its static SAs if any.
std::unique_ptr<Peer> SaTable::build_peer(const PeerParams& p) const {
	auto peer = std::make_unique<Peer>();
	peer->name = p.name;
	peer->allowed_ips = p.allowed_ips;
	peer->keyed_statically = p.keyed_statically;
	peer->impl = p.impl;
	peer->store_endpoint(p.endpoint);
	peer->endpoint_configured = p.endpoint.has_value();
	if (!p.keyed_statically) return peer;

	const crypto::CipherSpec* spec = &crypto::cipher_spec(p.cipher);
	peer->out.spi = p.out.spi;
	peer->out.esn = p.esn;
	peer->out.spec = spec;
	for (size_t w = 0; w < workers_; w++)
		peer->out.transforms.push_back(
		    crypto::make_esp_transform(p.cipher, p.out.enc_key, p.out.auth_key, p.esn, p.impl));
	peer->in = std::make_unique<InboundSa>(p.replay_window, p.esn);
	peer->in->spi = p.in.spi;
	peer->in->spec = spec;
	for (size_t w = 0; w < workers_; w++)
		peer->in->transforms.push_back(
		    crypto::make_esp_transform(p.cipher, p.in.enc_key, p.in.auth_key, p.esn, p.impl));
	peer->in->peer = peer.get();
	// Published with the peer: out_sa_ is read only once the peer is found.
	peer->out_sa_.store(&peer->out, std::memory_order_relaxed);
	return peer;
}

Peer* SaTable::find_peer(std::string_view name) const noexcept {
	const auto it = by_name_.find(name);
	return it == by_name_.end() ? nullptr : it->second;
}

void SaTable::index_names(PeerChange& change) {
	NameIndex made;
	for (const auto& p : change.added_)
		made.emplace(p->name, p.get());
	change.names_.reserve(made.size());
	while (!made.empty())
		change.names_.push_back(made.extract(made.begin()));
}

PeerChange SaTable::prepare_peers(std::span<const std::string> remove,
                                  const std::vector<PeerParams>& add) const {
	PeerChange change;
	for (const std::string& name : remove) {
		Peer* p = find_peer(name);
		if (!p) throw std::invalid_argument("peer " + name + " is not in the SA table");
		if (std::find(change.removed_.begin(), change.removed_.end(), p) == change.removed_.end())
			change.removed_.push_back(p);
	}
	auto removed = [&](const Peer* p) {
		return std::find(change.removed_.begin(), change.removed_.end(), p) != change.removed_.end();
	};
	// Names: against the peers that stay (through the index) and each other.
	std::unordered_set<std::string_view> adding;
	for (const PeerParams& p : add) {
		const Peer* there = find_peer(p.name);
		if ((there && !removed(there)) || !adding.insert(p.name).second)
			throw std::invalid_argument("peer " + p.name + " is listed twice");
	}
	for (const PeerParams& p : add)
		change.added_.push_back(build_peer(p));
	index_names(change);
	// A change with nothing the data path routes by, on either side (a
	// template's user coming or going), keeps the set: nothing else to check.
	auto routes_nothing = [](const Peer* p) { return p->allowed_ips.empty() && !p->in; };
	if (std::all_of(change.removed_.begin(), change.removed_.end(), routes_nothing) &&
	    std::all_of(change.added_.begin(), change.added_.end(),
	                [&](const auto& p) { return routes_nothing(p.get()); }))
		return change;
	// Otherwise the new set is built from all, the peers that stay, then the
	// new ones; prefixes are checked through an index, not against every
	// other peer: 10,000 static peers start in well under a second.
	std::vector<Peer*> all;
	for (const auto& p : peers_)
		if (!removed(p.get())) all.push_back(p.get());
	for (const auto& p : change.added_)
		all.push_back(p.get());

	change.set_ = std::make_unique<PeerSet>();
	PeerSet& set = *change.set_;
	std::lock_guard lock(control_);   // the run-time SPIs in use
	DisjointPrefixes<size_t> claimed; // the prefixes so far; the value: the peer's index in all
	for (size_t i = 0; i < all.size(); i++) {
		Peer* peer = all[i];
		if (peer->in) {
			const uint32_t spi = peer->in->spi;
			const size_t i_slot = slot_of(spi);
			if (!set.by_spi.emplace(spi, peer->in.get()).second ||
			    (slot_state_[i_slot] != SlotState::free && slot_spi_[i_slot] == spi))
				throw std::invalid_argument("peer " + peer->name + ": inbound SPI " +
				                            std::to_string(spi) +
				                            " is already used by another peer");
		}
		for (const IpPrefix& prefix : peer->allowed_ips) {
			// An earlier peer's prefix that overlaps refuses the set; one of
			// this peer's own may hold it (then only the outer one is kept).
			const DisjointPrefixes<size_t>::Entry* theirs = nullptr;
			bool covered = false;
			claimed.for_each_overlap(prefix, [&](const DisjointPrefixes<size_t>::Entry& e) {
				if (e.value != i) {
					theirs = &e;
					return false;
				}
				covered = covered || e.prefix.len <= prefix.len;
				return true;
			});
			if (theirs)
				throw std::invalid_argument("peer " + peer->name + ": allowed_ips " +
				                            to_string(prefix) + " overlaps peer " +
				                            all[theirs->value]->name + "'s " +
				                            to_string(theirs->prefix));
			if (!set.allowed.insert(prefix, peer))
				throw std::invalid_argument("peer " + peer->name + ": allowed_ips " +
				                            to_string(prefix) + " is listed twice");
			if (!covered) claimed.insert(prefix, i);
		}
	}
	return change;
}

/// unpublish_run_time_sas() - stop finding @peer's run-time SAs and retire
/// them; room in retired_ is reserved by the caller. Under control_.
void SaTable::unpublish_run_time_sas(Peer& peer) {
	for (auto& sa : peer.run_in_) {
		const size_t i = slot_of(sa->spi);
		slot(i).store(nullptr, std::memory_order_seq_cst); // c1 (enter() in this file)
		slot_state_[i] = SlotState::free;
		slots_in_use_--;
		retire(&peer, nullptr, std::move(sa));
	}
	peer.run_in_.clear();
	if (peer.run_out_) {
		peer.out_sa_.store(nullptr, std::memory_order_seq_cst);
		retire(&peer, std::move(peer.run_out_), nullptr);
	}
}

void SaTable::commit_peers(PeerChange change) {
	for (const Peer* p : change.removed_)
		pool_.forget(*p);
	std::lock_guard lock(control_);
	size_t more = (change.set_ ? 1 : 0) + change.removed_.size();
	for (const Peer* p : change.removed_)
		more += p->run_in_.size() + 1;
	reserve_retired(more); // nothing below may throw once something is unpublished
	// Then inserting does not allocate. Both grow by doubling: a template's
	// users come one per change.
	const size_t names = by_name_.size() + change.names_.size();
	if (float(names) > float(by_name_.bucket_count()) * by_name_.max_load_factor())
		by_name_.reserve(2 * names);
	reserve_room(peers_, peers_.size() + change.added_.size());
	for (Peer* p : change.removed_)
		unpublish_run_time_sas(*p);
	// c1 for the old set and the removed peers (their static SAs are found
	// only through the set; a change without a set has none).
	if (change.set_) {
		set_.store(change.set_.get(), std::memory_order_seq_cst);
		std::unique_ptr<PeerSet> old_set = std::exchange(set_owned_, std::move(change.set_));
		retire(Retired{0, nullptr, nullptr, nullptr, nullptr, std::move(old_set), nullptr});
	}
	for (Peer* p : change.removed_) {
		auto it =
		    std::find_if(peers_.begin(), peers_.end(), [&](const auto& q) { return q.get() == p; });
		by_name_.erase(p->name);
		std::unique_ptr<Peer> owned = std::move(*it);
		peers_.erase(it);
		retire(Retired{0, nullptr, nullptr, nullptr, std::move(owned), nullptr, nullptr});
	}
	for (auto& node : change.names_)
		by_name_.insert(std::move(node));
	for (auto& p : change.added_)
		peers_.push_back(std::move(p));
	collect_locked();
}

SaTable::~SaTable() = default;

/*
 * enter() - why one announcement per batch makes freeing safe.
 *
 * The control plane (C) retires an SA P in this order: (c1) it unpublishes P
 * (a store to its slot or to Peer::out_sa_), (c2) takes e = epoch_++ in
 * retire(), and later, in collect(), (c3) reads each worker's announcement.
 * P is freed only if every announcement is 0 or greater than e.
 * A worker (W) in enter() (w1) reads epoch_ as a, (w2) announces a, and
 * only then (w3) loads SA pointers, until leave() announces 0.
 *
 * All six accesses are seq_cst, so they lie in one total order S that
 * agrees with program order (C++20 [atomics.order] p4). Suppose W's load w3
 * returns P. Then w3 comes before c1 in S, or it would read c1's value or a
 * later one. Hence w1 < w2 < w3 < c1 < c2 < c3 in S, and:
 *  - w1 precedes the increment c2 in S, so it read a value before it: a <= e;
 *  - c3 comes after w2, so it reads a, or what W announced after a: 0 from
 *    leave() or a' from its next enter(), both stored after W's last use of
 *    P in that batch, with release, and read by c3 (also acquire): that use
 *    happens before the free.
 * So an announcement a with 0 < a <= e keeps P; 0, or a' > e (a batch that
 * began after c2, which cannot find P), proves W is done with it.
 *
 * Cost on the packet path: one seq_cst load per SA lookup (a plain load on
 * x86-64) and, per batch, this store (an xchg) and leave()'s plain store; no
 * locked instruction per packet. A worker that stays entered only delays
 * frees, never makes one unsafe.
 */
void SaTable::enter(size_t worker) const noexcept {
	const uint64_t a = epoch_.load(std::memory_order_seq_cst);
	active_[worker].epoch.store(a, std::memory_order_seq_cst);
}

uint32_t SaTable::allocate_spi() {
	if (std::optional<uint32_t> spi = try_allocate_spi()) return *spi;
	throw std::runtime_error("no inbound SPI left: all " + std::to_string(spi_slots()) +
	                         " run-time SA slots are installed or reserved");
}

std::optional<uint32_t> SaTable::try_allocate_spi() {
	std::lock_guard lock(control_);
	// At most half the slots taken: a random start finds a free one within
	// a few steps. At the maximum size the rest fills up too.
	if (2 * (slots_in_use_ + 1) > slot_state_.size() && grow_slots()) collect_locked();
	const size_t n = slot_state_.size();
	const size_t start = random_() % n;
	for (size_t k = 0; k < n; k++) {
		const size_t i = (start + k) & (n - 1);
		if (slot_state_[i] != SlotState::free) continue;
		// Random high bits, so SPIs are not predictable from one another. A
		// few tries get past the reserved range (only slots below 256 with
		// zero high bits) and the static SPIs; then the next slot.
		for (int attempt = 0; attempt < 16; attempt++) {
			const uint32_t spi = (uint32_t(random_()) & ~uint32_t(n - 1)) | uint32_t(i);
			if (spi < kMinSpi || set_owned_->by_spi.count(spi)) continue;
			slot_state_[i] = SlotState::reserved;
			slot_spi_[i] = spi;
			slots_in_use_++;
			return spi;
		}
	}
	return std::nullopt;
}

bool SaTable::grow_slots() noexcept {
	const size_t n = slot_state_.size();
	if (2 * n > max_spi_slots_) return false;
	const size_t m = 2 * n;
	try {
		auto next = std::make_unique<SpiSlots>(m);
		std::vector<SlotState> state(m, SlotState::free);
		std::vector<uint32_t> spis(m, 0);
		reserve_retired(); // the last allocation: nothing below throws
		// The low bits of the SPIs in use were unique among n slots, so
		// they are among m: each keeps a slot of its own.
		for (size_t i = 0; i < n; i++) {
			if (slot_state_[i] == SlotState::free) continue;
			const size_t j = slot_spi_[i] & (m - 1);
			state[j] = slot_state_[i];
			spis[j] = slot_spi_[i];
			next->slot[j].store(slot(i).load(std::memory_order_relaxed),
			                    std::memory_order_relaxed);
		}
		// Release (seq_cst includes it): a worker that loads the new array
		// sees it filled. c1 for the old array (enter() in this file): a
		// worker may still read it for the packet in hand, and an SA removed
		// later from the new array stays findable there; such a worker
		// announced an epoch before this retirement, so it also holds back
		// the SA's own, later one.
		slots_.store(next.get(), std::memory_order_seq_cst);
		retire(Retired{0, nullptr, nullptr, nullptr, nullptr, nullptr,
		               std::exchange(slots_owned_, std::move(next))});
		slot_state_.swap(state);
		slot_spi_.swap(spis);
		return true;
	} catch (const std::bad_alloc&) {
		return false; // the array stays as it is: allocation refuses when it is full
	}
}

bool SaTable::release_spi(uint32_t spi) {
	std::lock_guard lock(control_);
	const size_t i = slot_of(spi);
	if (slot_state_[i] != SlotState::reserved || slot_spi_[i] != spi) return false;
	slot_state_[i] = SlotState::free;
	slots_in_use_--;
	return true;
}

void SaTable::check_dynamic_peer(const Peer& peer, const char* what) const {
	if (std::none_of(peers_.begin(), peers_.end(), [&](const auto& p) { return p.get() == &peer; }))
		throw std::invalid_argument(std::string(what) + ": peer " + peer.name +
		                            " is not in this table");
	// Static SAs are never replaced: their sequence numbers live in the state
	// file (service/seq_state.hpp), keyed by the configured SPI.
	if (peer.keyed_statically)
		throw std::invalid_argument(std::string(what) + ": peer " + peer.name +
		                            " is keyed statically (its SAs come from the config)");
}

std::vector<std::unique_ptr<crypto::EspTransform>> SaTable::make_transforms(const Peer& peer,
                                                                            const ChildSaKeys& keys) const {
	// The first from the keys; the other workers' share its key material
	// where the implementation can (crypto::EspTransform::for_another_worker()).
	std::vector<std::unique_ptr<crypto::EspTransform>> t;
	t.reserve(workers_);
	t.push_back(
	    crypto::make_esp_transform(keys.cipher, keys.enc_key, keys.auth_key, keys.esn, peer.impl));
	for (size_t w = 1; w < workers_; w++) {
		std::unique_ptr<crypto::EspTransform> next = t.front()->for_another_worker();
		if (!next)
			next = crypto::make_esp_transform(keys.cipher, keys.enc_key, keys.auth_key, keys.esn,
			                                  peer.impl);
		t.push_back(std::move(next));
	}
	return t;
}

InboundSa* SaTable::install_inbound(Peer& peer, const ChildSaKeys& keys) {
	std::lock_guard lock(control_);
	check_dynamic_peer(peer, "install_inbound");
	const size_t i = slot_of(keys.spi);
	if (slot_state_[i] != SlotState::reserved || slot_spi_[i] != keys.spi)
		throw std::invalid_argument("install_inbound: peer " + peer.name + ": SPI " +
		                            spi_text(keys.spi) + " was not reserved by allocate_spi()");
	auto sa = std::make_unique<InboundSa>(keys.replay_window, keys.esn);
	sa->spi = keys.spi;
	sa->spec = &crypto::cipher_spec(keys.cipher);
	sa->transforms = make_transforms(peer, keys);
	sa->peer = &peer;
	sa->local = keys.local;
	InboundSa* raw = sa.get();
	peer.run_in_.push_back(std::move(sa));
	slot_state_[i] = SlotState::installed;
	// Release (seq_cst includes it): a worker that loads the pointer sees the
	// SA fully built.
	slot(i).store(raw, std::memory_order_seq_cst);
	collect_locked();
	return raw;
}

OutboundSa* SaTable::install_outbound(Peer& peer, const ChildSaKeys& keys) {
	std::lock_guard lock(control_);
	check_dynamic_peer(peer, "install_outbound");
	if (keys.spi < kMinSpi)
		throw std::invalid_argument("install_outbound: peer " + peer.name + ": SPI " +
		                            spi_text(keys.spi) + " is reserved (RFC 4303 section 2.1)");
	auto sa = std::make_unique<OutboundSa>();
	sa->spi = keys.spi;
	sa->esn = keys.esn;
	sa->spec = &crypto::cipher_spec(keys.cipher);
	sa->transforms = make_transforms(peer, keys);
	OutboundSa* raw = sa.get();
	reserve_retired(); // nothing below may throw: the old SA must not be freed early
	std::unique_ptr<OutboundSa> old = std::exchange(peer.run_out_, std::move(sa));
	peer.out_sa_.store(raw, std::memory_order_seq_cst); // c1 for the old one (enter() in this file)
	if (old) retire(&peer, std::move(old), nullptr);
	collect_locked();
	return raw;
}

bool SaTable::remove_inbound(uint32_t spi) {
	std::lock_guard lock(control_);
	const size_t i = slot_of(spi);
	if (slot_state_[i] != SlotState::installed || slot_spi_[i] != spi) return false;
	InboundSa* sa = slot(i).load(std::memory_order_relaxed);
	Peer* peer = sa->peer;
	auto it = std::find_if(peer->run_in_.begin(), peer->run_in_.end(),
	                       [&](const auto& p) { return p.get() == sa; });
	reserve_retired();
	std::unique_ptr<InboundSa> owned = std::move(*it);
	peer->run_in_.erase(it);
	slot(i).store(nullptr, std::memory_order_seq_cst); // c1 (enter() in this file)
	slot_state_[i] = SlotState::free;
	slots_in_use_--;
	retire(peer, nullptr, std::move(owned));
	collect_locked();
	return true;
}

bool SaTable::remove_outbound(Peer& peer) {
	std::lock_guard lock(control_);
	if (!peer.run_out_) return false;
	reserve_retired();
	peer.out_sa_.store(nullptr, std::memory_order_seq_cst); // c1 (enter() in this file)
	retire(&peer, std::move(peer.run_out_), nullptr);
	collect_locked();
	return true;
}

/// reserve_retired() - room for one more retired SA, taken before an SA is
/// unpublished: from then on it must be queued, as freeing it could pull it
/// from under a worker.
void SaTable::reserve_retired(size_t more) {
	if (retired_.capacity() - retired_.size() < more) retired_.reserve(2 * retired_.size() + more + 4);
}

/// retire() - queue an SA that was just unpublished for collect(); the
/// caller reserved room in retired_, so this cannot throw.
void SaTable::retire(Peer* peer, std::unique_ptr<OutboundSa> out, std::unique_ptr<InboundSa> in) {
	retire(Retired{0, peer, std::move(out), std::move(in), nullptr, nullptr, nullptr});
}

void SaTable::retire(Retired r) {
	// c2: after the unpublishing store in S; a worker that reads the new
	// value cannot find the SA any more (enter() in this file).
	r.epoch = epoch_.fetch_add(1, std::memory_order_seq_cst);
	retired_.push_back(std::move(r));
}

size_t SaTable::collect() {
	std::lock_guard lock(control_);
	return collect_locked();
}

size_t SaTable::collect_locked() {
	if (retired_.empty()) return 0;
	uint64_t oldest = UINT64_MAX;
	for (size_t w = 0; w < workers_; w++) {
		// c3: seq_cst, after every unpublishing store in S (enter() in this file).
		const uint64_t a = active_[w].epoch.load(std::memory_order_seq_cst);
		if (a != 0 && a < oldest) oldest = a;
	}
	// Freed when every announcement is 0 or > its epoch, i.e. oldest > epoch.
	size_t kept = 0, freed = 0;
	for (Retired& r : retired_) {
		if (r.epoch >= oldest) {
			if (&retired_[kept] != &r) retired_[kept] = std::move(r);
			kept++;
			continue;
		}
		// No worker adds to its counters any more: fold them into the peer's
		// (a removed peer is retired after its SAs, so it is still there).
		if (r.out) add_out(r.peer->freed_, *r.out);
		if (r.in) add_in(r.peer->freed_, *r.in);
		r.out.reset();
		r.in.reset();
		r.removed_peer.reset();
		r.old_set.reset();
		r.old_slots.reset();
		freed++;
	}
	retired_.resize(kept);
	return freed;
}

size_t SaTable::retired() const {
	std::lock_guard lock(control_);
	return retired_.size();
}

size_t SaTable::spi_slots() const {
	std::lock_guard lock(control_);
	return slot_state_.size();
}

size_t SaTable::spis_in_use() const {
	std::lock_guard lock(control_);
	return slots_in_use_;
}

PeerSaInfo SaTable::sa_info(const Peer& peer) const {
	std::lock_guard lock(control_);
	PeerSaInfo info;
	info.totals = peer.freed_;
	if (const OutboundSa* sa = peer.out_sa_.load(std::memory_order_acquire))
		info.out = out_info(*sa, peer.keyed_statically);
	if (peer.in) {
		info.in.push_back(in_info(*peer.in, true));
		add_out(info.totals, peer.out);
		add_in(info.totals, *peer.in);
	}
	if (peer.run_out_) add_out(info.totals, *peer.run_out_);
	for (const auto& sa : peer.run_in_) {
		info.in.push_back(in_info(*sa, false));
		add_in(info.totals, *sa);
	}
	for (const Retired& r : retired_) {
		if (r.peer != &peer) continue;
		info.retiring++;
		if (r.out) add_out(info.totals, *r.out);
		if (r.in) add_in(info.totals, *r.in);
	}
	return info;
}

} // namespace esptun::tunnel
