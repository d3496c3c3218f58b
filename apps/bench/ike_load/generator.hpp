// The load generator of `esptun-bench ike-load`: N IKEv2 initiators built on
// the project's own engine (ike/engine.hpp), each with its own identity,
// UDP socket and either a pre-shared key and an inner address of its own or
// a certificate (then it asks the responder for a virtual address, as a
// road warrior does), at most C of them in flight
// at once. Each completes IKE_SA_INIT, IKE_AUTH and its first CHILD_SA and
// then stays (answering whatever the responder asks), so the responder holds
// every SA when the run ends. No ESP is sent. Runs inside the generator's
// namespace, in a forked child of the bench (lab::run_collect()).
#pragma once

#include "base/inet.hpp"
#include "base/secret.hpp"
#include "ike/cert.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace esptun::bench::ike_load {

/// What both ends of a run agree on: who the clients are and what they offer.
struct LoadPlan {
	Endpoint responder;             ///< its NAT-T port: IKE behind the non-ESP marker
	std::string responder_id;       ///< its IKE identity (an FQDN)
	std::vector<IpAddress> sources; ///< client i sends from sources[i % size]
	std::string ike_proposal;       ///< one suite, strongSwan spelling
	std::string esp_proposal;
	/// PSK authentication: one key per client, each with its own inner
	/// address (client_inner()); its size is the number of clients.
	std::vector<SecretBytes> psks;
	/// Certificate authentication (when not empty; psks is then unused): one
	/// certificate and key per client, with client_id() as its
	/// subjectAltName; trust holds the CA of the responder's certificate.
	/// Each client asks for a virtual address in IKE_AUTH.
	std::vector<std::shared_ptr<const ike::Credentials>> credentials;
	std::shared_ptr<const ike::TrustStore> trust;
	/// The responders know clients [0, known) only; the rest are strangers
	/// to them (their refusal is part of what is measured).
	size_t known = 0;
	size_t concurrency = 64; ///< clients in flight at once
	std::chrono::milliseconds client_timeout{20000};
	/// The storm (both set): once every client is through, run_load()
	/// writes a byte to storm_ready_fd and waits for one on storm_go_fd
	/// (the bench restarts the responder meanwhile); then every
	/// established client starts a new IKE SA at the same moment.
	int storm_ready_fd = -1, storm_go_fd = -1;
	size_t clients() const noexcept { return credentials.empty() ? psks.size() : credentials.size(); }
};

/// client_id() - client @i's IKE identity, "c<i>.load"
std::string client_id(size_t i);
/// client_inner() - client @i's inner address (its side of the CHILD_SA):
/// 10.64.0.0/16 upwards, one /32 each; at most kMaxClients
IpAddress client_inner(size_t i);
/// The responder's side of every CHILD_SA.
inline constexpr const char* kResponderNet = "10.63.0.0/24";
inline constexpr size_t kMaxClients = 100000;

/// What the generator saw.
struct LoadResult {
	size_t established = 0;
	size_t failed = 0;                 ///< not established within client_timeout
	double seconds = 0;                ///< first start to last establishment
	std::vector<double> setup_ms;      ///< per established client: start to its CHILD_SA
	std::vector<std::string> failures; ///< the first few: identity and the engine's last line
	double cpu_s = 0;                  ///< the generator's own CPU time
	size_t virtual_addresses = 0;      ///< distinct ones the established clients were given
	uint64_t datagrams_in = 0, datagrams_out = 0;
	/// The storm's reconnections, when the plan asked for one.
	std::shared_ptr<LoadResult> storm;
};

/// run_load() - run @plan from the current namespace; throws on set-up
/// errors (sockets), lab::Interrupted on a stop request
LoadResult run_load(const LoadPlan& plan);

/// to_json() / from_json() - the result across the pipe from the child
std::string to_json(const LoadResult& r);
LoadResult result_from_json(const std::string& text);

} // namespace esptun::bench::ike_load
