// SA table construction: see sa.hpp.
#include "tunnel/sa.hpp"

#include <stdexcept>

namespace esptun {

void Peer::set_endpoint(const Endpoint& ep) noexcept {
	std::lock_guard lock(endpoint_mutex_);
	endpoint_ = ep;
}

std::optional<Endpoint> Peer::endpoint_snapshot() const {
	std::lock_guard lock(endpoint_mutex_);
	return endpoint_;
}

SaTable::SaTable(const std::vector<PeerParams>& params) {
	for (const PeerParams& p : params) {
		auto peer = std::make_unique<Peer>();
		peer->name = p.name;
		peer->allowed_ips = p.allowed_ips;
		peer->spec = &crypto::cipher_spec(p.cipher);
		peer->endpoint_ = p.endpoint;
		peer->endpoint_configured = p.endpoint.has_value();

		peer->out.spi = p.out.spi;
		peer->out.esn = p.esn;
		peer->out.transform =
		    crypto::make_esp_transform(p.cipher, p.out.enc_key, p.out.auth_key, p.esn, p.impl);

		peer->in = std::make_unique<InboundSa>(p.replay_window, p.esn);
		peer->in->spi = p.in.spi;
		peer->in->transform =
		    crypto::make_esp_transform(p.cipher, p.in.enc_key, p.in.auth_key, p.esn, p.impl);
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
