// The responders `esptun-bench ike-load` measures, each configured for the
// same clients (LoadPlan) and running in the responder's namespace:
// esptun-gateway (as a child of the bench) and strongSwan's charon (with
// kernel-libipsec). With pre-shared keys each client is a peer of its own
// (an identity, a key and an inner address); with certificates one
// connection serves every client whose certificate leads to the run's CA,
// and each gets a virtual address from a pool (esptun: a template [[peer]]
// and [tunnel] address_pool; charon: remote auth = pubkey and a pool), as a
// road-warrior gateway is set up.
#pragma once

#include "apps/bench/ike_load/generator.hpp"
#include "apps/bench/lab/pki.hpp"
#include "apps/bench/lab/temp_dir.hpp"
#include "service/json_io.hpp"

#include <memory>
#include <string>
#include <sys/types.h>

namespace esptun::bench::ike_load {

inline constexpr const char* kResponderAddr = "10.203.0.2";
inline constexpr const char* kResponderId = "gw.load";
inline constexpr const char* kEspProposal = "aes128gcm16";
/// Certificate clients' virtual addresses: one /16 (a pool holds at most 2^16).
inline constexpr const char* kClientPool = "10.64.0.0/16";
inline constexpr size_t kMaxCertClients = 65000;

/// How the clients authenticate, and with what.
struct ResponderAuth {
	bool cert = false;
	std::string ca_pem; ///< cert: the CA of the clients' certificates
	lab::Issued own;    ///< cert: the responder's certificate (SAN kResponderId), key in SEC1 form
};

/// ike_proposal() - the IKE suite of a run with DH @group
std::string ike_proposal(const std::string& group);

/// One responder with the plan's clients configured, running in its namespace.
class Responder {
public:
	virtual ~Responder() = default;
	virtual pid_t pid() const = 0;
	/// established() - the IKE SAs the responder says it holds; @counters:
	/// its IKE counters, where it has them (esptun's status "ike" "counters")
	virtual size_t established(service::Json& counters) = 0;
	/// stop() - stop it; "" when it went cleanly
	virtual std::string stop() = 0;
	/// kill() - SIGKILL it, as a crash would
	virtual void kill() = 0;
	/// log_end() - the end of its log, for errors
	virtual std::string log_end() const = 0;
};

/**
 * start_esptun() - esptun-gateway @binary in @netns for @plan's known
 * clients with DH @group; returns once it answers status (throws after 60 s)
 * @site_peer: a [[peer]] more for its config (the storm's site), or ""
 */
std::unique_ptr<Responder> start_esptun(const std::string& netns, const std::string& binary,
                                        const lab::TempDir& tmp, const LoadPlan& plan,
                                        const ResponderAuth& auth, const std::string& group,
                                        const std::string& site_peer);

/// start_strongswan() - charon in @netns for @plan's known clients with DH @group, its config loaded
std::unique_ptr<Responder> start_strongswan(const std::string& netns, const lab::TempDir& tmp,
                                            const LoadPlan& plan, const ResponderAuth& auth,
                                            const std::string& group);

} // namespace esptun::bench::ike_load
