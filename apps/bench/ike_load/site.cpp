// The site and its transfer (site.hpp).
#include "apps/bench/ike_load/site.hpp"

#include "apps/bench/lab/netns_pair.hpp"
#include "apps/bench/lab/sa_keys.hpp"
#include "apps/bench/lab/static_peer.hpp"
#include "crypto/esp_transform.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace esptun::bench::ike_load {
namespace {

using namespace lab;
using service::Json;

constexpr const char* kSiteUnderlay = "10.205.0.1";
constexpr const char* kResponderSide = "10.205.0.2";
constexpr const char* kSiteInner = "10.62.0.1";
constexpr const char* kResponderInner = "10.63.0.1"; // the responder's tun address
constexpr uint16_t kPort = 5290;
constexpr Millis kIdle{60000}; // a restart and a storm fit in it
constexpr const char* kCipher = "aes128-gcm";

} // namespace

Json TransferFigures::to_json() const {
	Json j{{"pace_mbit", pace_mbit},
	       {"bytes", bytes},
	       {"hash_ok", hash_ok},
	       {"resumed_s", resumed_s >= 0 ? Json(service::json_round3(resumed_s)) : Json(nullptr)},
	       {"storm_s", service::json_round3(storm_s)},
	       {"storm_bytes", storm_bytes},
	       {"storm_mbit", service::json_round3(storm_mbit())},
	       {"storm_longest_gap_s", service::json_round3(storm_gap_s)}};
	if (!error.empty()) j["error"] = error;
	return j;
}

std::string TransferFigures::text() const {
	char buf[400];
	if (!error.empty()) return "failed: " + error;
	std::snprintf(buf, sizeof buf,
	              "%.1f MB paced at %.0f Mbit/s through a static-key site, %s; moving again %.2f s "
	              "after the kill; during the storm (%.2f s) %.0f Mbit/s, longest gap %.0f ms",
	              double(bytes) / 1e6, pace_mbit, hash_ok ? "count and hash match" : "MISMATCH",
	              resumed_s, storm_s, storm_mbit(), storm_gap_s * 1000);
	return buf;
}

Site::Site(const std::string& name, const std::string& responder_ns, const std::string& responder_addr,
           const std::string& binary, const TempDir& tmp)
    : responder_ns_(responder_ns), ns_(name) {
	ip({"-n", name, "link", "add", "ikl-t", "type", "veth", "peer", "name", "ikl-rt", "netns",
	    responder_ns});
	ip({"-n", name, "addr", "add", std::string(kSiteUnderlay) + "/24", "dev", "ikl-t"});
	ip({"-n", responder_ns, "addr", "add", std::string(kResponderSide) + "/24", "dev", "ikl-rt"});
	ip({"-n", name, "link", "set", "lo", "up"});
	ip({"-n", name, "link", "set", "ikl-t", "up"});
	ip({"-n", responder_ns, "link", "set", "ikl-rt", "up"});
	// The responder listens on its address towards the generator only.
	ip({"-n", name, "route", "add", responder_addr + "/32", "via", kResponderSide});

	const crypto::CipherSpec* spec = crypto::find_cipher(kCipher);
	if (!spec) throw std::logic_error("no cipher " + std::string(kCipher));
	const SaKeys to_gw = make_sa_keys(*spec), to_site = make_sa_keys(*spec, to_gw.spi);
	responder_peer_ = static_peer_toml({"site", std::string(kSiteUnderlay) + ":4500",
	                                    std::string(kSiteInner) + "/32", *spec, to_site, to_gw});
	std::ostringstream t;
	t << "# esptun-bench ike-load: the site (generated; keys are random per run)\n"
	  << "[tunnel]\n"
	  << "interface = \"iks0\"\n"
	  << "addresses = [\"" << kSiteInner << "/24\"]\n"
	  << "listen = \"" << kSiteUnderlay << ":4500\"\n"
	  << "ike_port = 0\n"
	  << "control_socket = \"" << tmp.file("site.sock") << "\"\n"
	  << "state_dir = \"" << tmp.file("site.state") << "\"\n\n"
	  << static_peer_toml({"responder", responder_addr + ":4500", std::string(kResponderInner) + "/32",
	                       *spec, to_gw, to_site});
	write_private_file(tmp.file("site.toml"), t.str());
	gw_ = std::make_unique<GatewayProcess>("T", name, binary, tmp.file("site.toml"), tmp.file("site.log"),
	                                       tmp.file("site.sock"));
	const auto deadline = Clock::now() + Millis(30000);
	while (!gw_->status()) {
		gw_->check_alive();
		if (Clock::now() > deadline)
			throw std::runtime_error("the site's gateway did not answer status within 30 s: " +
			                         gw_->status_error());
		sleep_for(Millis(100));
	}
}

Site::~Site() {
	tx_.reset();
	rx_.reset();
	if (gw_) gw_->stop();
}

uint64_t Site::rx_packets() {
	std::optional<Json> st = gw_->status();
	if (!st) throw std::runtime_error("the site's gateway status failed: " + gw_->status_error());
	const Json* peers = service::json_at(*st, {"peers"});
	if (!peers || !peers->is_array() || peers->empty())
		throw std::runtime_error("the site's status has no peer");
	return service::json_u64(service::json_at(peers->front(), {"totals", "rx_packets"}));
}

void Site::start_transfer(uint64_t mbit) {
	pace_mbit_ = mbit;
	// The receiver first: the sender's child must not hold its pipe.
	rx_ = std::make_unique<TcpReceiver>(responder_ns_, kResponderInner, kPort, kIdle);
	SendOptions paced;
	paced.pace_bytes_per_s = mbit * 1000000 / 8;
	tx_ = std::make_unique<TcpSender>(ns_.name(), kResponderInner, kPort, UINT64_MAX, kIdle, paced);
	const uint64_t before = rx_packets();
	const auto deadline = Clock::now() + Millis(10000);
	sleep_for(Millis(500));
	while (rx_packets() <= before) {
		if (Clock::now() > deadline)
			throw std::runtime_error("the transfer through the site did not start within 10 s");
		sleep_for(Millis(100));
	}
}

bool Site::wait_resumed(Millis limit) {
	const auto deadline = Clock::now() + limit;
	const uint64_t before = rx_packets();
	while (rx_packets() <= before) {
		if (Clock::now() > deadline) return false;
		sleep_for(Millis(50));
	}
	return true;
}

TransferFigures Site::finish(Clock::time_point killed, Clock::time_point restarted,
                             Clock::time_point storm_start, double storm_s) {
	TransferFigures f;
	f.pace_mbit = double(pace_mbit_);
	f.storm_s = storm_s;
	try {
		const TransferSide tx = tx_->result(kIdle);
		const TransferSide rx = rx_->result(kIdle);
		tx_.reset();
		rx_.reset();
		f.bytes = tx.bytes;
		f.hash_ok = tx.bytes == rx.bytes && tx.hash == rx.hash;
		const auto storm_end = storm_start + std::chrono::nanoseconds(int64_t(storm_s * 1e9));
		const int64_t k = TransferSide::note_time(killed), r = TransferSide::note_time(restarted),
		              s0 = TransferSide::note_time(storm_start),
		              s1 = TransferSide::note_time(storm_end);
		// After the restart: what arrived just after the kill was on its
		// way before it.
		for (const auto& [when, bytes] : rx.progress)
			if (when > r) {
				f.resumed_s = double(when - k) / 1e9;
				break;
			}
		f.storm_bytes = rx.bytes_by(storm_end) - rx.bytes_by(storm_start);
		int64_t last = s0;
		for (const auto& [when, bytes] : rx.progress)
			if (when > s0 && when <= s1) {
				f.storm_gap_s = std::max(f.storm_gap_s, double(when - last) / 1e9);
				last = when;
			}
		f.storm_gap_s = std::max(f.storm_gap_s, double(s1 - last) / 1e9);
	} catch (const Interrupted&) {
		throw;
	} catch (const std::exception& e) {
		f.error = e.what();
	}
	return f;
}

} // namespace esptun::bench::ike_load
