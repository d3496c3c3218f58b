// SA table construction: see sa.hpp.
#include "tunnel/sa.hpp"

#include <cstring>
#include <stdexcept>

namespace esptun {

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

SaTable::SaTable(const std::vector<PeerParams>& params, size_t workers) {
	if (workers == 0) throw std::invalid_argument("an SA table needs at least one worker");
	for (const PeerParams& p : params) {
		auto peer = std::make_unique<Peer>();
		peer->name = p.name;
		peer->allowed_ips = p.allowed_ips;
		peer->spec = &crypto::cipher_spec(p.cipher);
		peer->store_endpoint(p.endpoint);
		peer->endpoint_configured = p.endpoint.has_value();

		peer->out.spi = p.out.spi;
		peer->out.esn = p.esn;
		for (size_t w = 0; w < workers; w++)
			peer->out.transforms.push_back(crypto::make_esp_transform(
			    p.cipher, p.out.enc_key, p.out.auth_key, p.esn, p.impl));

		peer->in = std::make_unique<InboundSa>(p.replay_window, p.esn);
		peer->in->spi = p.in.spi;
		for (size_t w = 0; w < workers; w++)
			peer->in->transforms.push_back(
			    crypto::make_esp_transform(p.cipher, p.in.enc_key, p.in.auth_key, p.esn, p.impl));
		peer->in->peer = peer.get();
		if (!by_spi_.emplace(p.in.spi, peer->in.get()).second)
			throw std::invalid_argument("peer " + p.name + ": inbound SPI " +
			                            std::to_string(p.in.spi) +
			                            " is already used by another peer");
		for (const IpPrefix& prefix : p.allowed_ips) {
			for (const auto& other : peers_)
				for (const IpPrefix& q : other->allowed_ips)
					if (q.overlaps(prefix))
						throw std::invalid_argument(
						    "peer " + p.name + ": allowed_ips " + to_string(prefix) +
						    " overlaps peer " + other->name + "'s " + to_string(q));
			if (!allowed_.insert(prefix, peer.get()))
				throw std::invalid_argument("peer " + p.name + ": allowed_ips " +
				                            to_string(prefix) + " is listed twice");
		}
		peers_.push_back(std::move(peer));
	}
}

} // namespace esptun
