// libFuzzer target for the inbound path: decapsulate() on datagrams that are
// raw bytes, valid ESP packets mutated after encapsulation, or plaintexts the
// fuzzer writes and the target seals, so the checks behind the ICV (trailer,
// padding, inner packet, policy, roaming) are reached too.
//
// Input: a script of records, run against one receiving SA table (site B,
// put back to its initial state before every input so runs are
// reproducible). The first byte of a record picks its kind (byte % 4):
//   0 raw:     the rest of the input is one datagram.
//   1 encap:   [peer][flags][len be16][n][n x (pos be16, xor)]: encapsulate a
//              valid inner packet of about len bytes from that peer, flip
//              bytes, optionally truncate (flags bit 1), then decapsulate.
//   2 sealed:  [peer][flags][seq be32][seq_hi][len][len bytes]: the bytes are
//              the plaintext (payload, padding, pad length, next header) sealed
//              with the peer's keys and the 64-bit number seq_hi:seq.
//   3 advance: [peer][delta be32]: jump the peer's outbound counter ahead.
// flags bits 2-3 choose the source address the datagram arrives from; in an
// encap record bit 0 makes the inner packet IPv6 and bit 4 gives it a source
// address of another peer (a policy drop); in encap and sealed records bit 5
// sends from peer f instead, whose SA B installed at run time (found through
// the SPI slots rather than the static map, tunnel/sa.hpp).
// Seeds: tests/fuzz/corpus/esp_receive/ (one file per record kind and path);
// ESPTUN_FUZZ_TRACE=1 prints the verdict of every datagram of an input.
#include "tests/unit/tunnel/tunnel_test_util.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

namespace {

using namespace esptun;
using test::Bytes;

/// Input cursor: reads past the end return zeros.
class Input {
public:
	Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
	bool empty() const { return pos_ >= size_; }
	uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
	uint16_t be16() { return uint16_t(u8() << 8 | u8()); }
	uint32_t be32() { return uint32_t(be16()) << 16 | be16(); }
	std::span<const uint8_t> rest() {
		std::span<const uint8_t> r(data_ + pos_, size_ - std::min(pos_, size_));
		pos_ = size_;
		return r;
	}
	std::span<const uint8_t> take(size_t n) {
		n = std::min(n, size_ - std::min(pos_, size_));
		std::span<const uint8_t> r(data_ + pos_, n);
		pos_ += n;
		return r;
	}

private:
	const uint8_t* data_;
	size_t size_;
	size_t pos_ = 0;
};

// Four peers of site B with different suites, ESN and window settings; one
// without a configured endpoint so roaming has something to learn.
const test::Site kSiteD{"d",
                        test::prefix(test::ip4(10, 4, 0, 0), 16),
                        test::prefix(test::ip6(0xfd00, 4, 0, 0), 48),
                        test::endpoint(test::ip6(0x2001, 0xdb8, 4, 4), 4500),
                        0x11223344,
                        0xd0};
const test::Site kSiteE{"e",
                        test::prefix(test::ip4(10, 5, 0, 0), 16),
                        test::prefix(test::ip6(0xfd00, 5, 0, 0), 48),
                        test::endpoint(test::ip4(203, 0, 113, 5), 14500),
                        0x66778899,
                        0xe0};
// Keyed at run time: B allocates its SPI (spi_base unused).
const test::Site kSiteF{"f",
                        test::prefix(test::ip4(10, 6, 0, 0), 16),
                        test::prefix(test::ip6(0xfd00, 6, 0, 0), 48),
                        test::endpoint(test::ip4(192, 0, 2, 66), 4500),
                        0,
                        0xf0};

struct PeerSetup {
	const test::Site* site;
	test::LinkOptions opt;
};
const PeerSetup kPeers[] = {
    {&test::kSiteA, {crypto::Cipher::aes128_gcm, true, 1024, true}},
    {&test::kSiteC, {crypto::Cipher::aes128_cbc_sha1, false, 64, false}},
    {&kSiteD, {crypto::Cipher::aes256_cbc_sha256, true, 0, true}},
    {&kSiteE, {crypto::Cipher::aes256_gcm, false, 8192, true}},
    {&kSiteF, {crypto::Cipher::aes256_cbc_sha1, true, 128, true}},
};
constexpr size_t kPeerCount = std::size(kPeers);
constexpr size_t kRunTime = kPeerCount - 1; ///< f: its SA installed, not configured
constexpr size_t kStatic = kPeerCount - 1;  ///< the record's peer byte picks among these

const Endpoint kSources[] = {
    test::endpoint(test::ip4(192, 0, 2, 1), 4500),
    test::endpoint(test::ip4(100, 64, 0, 1), 40001),
    test::endpoint(test::ip6(0x2001, 0xdb8, 9, 9), 4500),
    test::endpoint(test::ip4(100, 64, 0, 1), 40002),
};

std::vector<tunnel::PeerParams> receiver_params() {
	std::vector<tunnel::PeerParams> v;
	for (const PeerSetup& p : kPeers)
		v.push_back(test::peer_entry(test::kSiteB, *p.site, p.opt));
	v[kRunTime].keyed_statically = false;
	return v;
}

/// B's inbound SA for f, as IKE would install it; the keys are the ones
/// test::peer_entry() gives f's sender. Return: its SPI.
uint32_t install_run_time_sa(tunnel::SaTable& receiver) {
	const test::LinkOptions& o = kPeers[kRunTime].opt;
	tunnel::ChildSaKeys k;
	k.spi = receiver.allocate_spi();
	k.cipher = o.cipher;
	k.enc_key = secret_copy(test::enc_key_to(test::kSiteB, o.cipher));
	k.auth_key = secret_copy(test::auth_key_to(test::kSiteB, o.cipher));
	k.esn = o.esn;
	k.replay_window = o.window;
	receiver.install_inbound(*receiver.peers()[kRunTime], k);
	return k.spi;
}

/**
 * World - site B's table and, built on first use, each peer's own table.
 *
 * Building OpenSSL contexts dominates a run, so the receiver is kept between
 * inputs and put back to its initial state (replay windows, endpoints); it is
 * rebuilt only when the endpoint-less peer learned one, which cannot be
 * undone. Senders are rebuilt per input: CBC IVs chain from packet to packet,
 * so a kept sender would make runs depend on earlier inputs.
 */
struct World {
	std::unique_ptr<tunnel::SaTable> receiver;
	uint32_t run_time_spi = 0; ///< the SPI B allocated for f
	std::array<std::unique_ptr<tunnel::SaTable>, kPeerCount> senders;

	void reset() {
		for (auto& s : senders)
			s.reset();
		bool rebuild = !receiver;
		for (size_t i = 0; receiver && i < kPeerCount; i++) {
			tunnel::Peer& peer = *receiver->peers()[i];
			tunnel::InboundSa& in =
			    i == kRunTime ? *receiver->find_inbound(run_time_spi) : *peer.in;
			in.replay = tunnel::ReplayWindow(kPeers[i].opt.window, kPeers[i].opt.esn);
			if (kPeers[i].opt.endpoint_known)
				peer.set_endpoint(kPeers[i].site->ep);
			else if (peer.endpoint())
				rebuild = true;
		}
		if (rebuild) {
			receiver = std::make_unique<tunnel::SaTable>(receiver_params());
			run_time_spi = install_run_time_sa(*receiver);
		}
	}
	tunnel::SaTable& sender_table(size_t i) {
		if (!senders[i]) {
			test::LinkOptions o = kPeers[i].opt;
			o.endpoint_known = true; // senders always know B
			tunnel::PeerParams p = test::peer_entry(*kPeers[i].site, test::kSiteB, o);
			if (i == kRunTime) p.out.spi = run_time_spi;
			senders[i] = std::make_unique<tunnel::SaTable>(std::vector<tunnel::PeerParams>{p});
		}
		return *senders[i];
	}
	tunnel::Peer& sender(size_t i) { return *sender_table(i).peers().at(0); }
};

/// ESPTUN_FUZZ_TRACE=1 prints every verdict: to check what a corpus file reaches.
const bool kTrace = std::getenv("ESPTUN_FUZZ_TRACE") != nullptr;

/// decapsulate() on an exact-size copy, and a few invariants on the result.
void receive(World& w, std::span<const uint8_t> dgram, const Endpoint& src) {
	// decapsulate() works in place: give it a copy of exactly the datagram's
	// size, so ASan sees any access past the end.
	std::unique_ptr<uint8_t[]> exact(new uint8_t[dgram.size() + !dgram.size()]);
	std::copy(dgram.begin(), dgram.end(), exact.get());
	std::span<uint8_t> d(exact.get(), dgram.size());
	tunnel::InboundResult r = tunnel::decapsulate(*w.receiver, d, src, 1);
	if (kTrace) {
		std::string_view what = r.verdict == tunnel::Verdict::forward  ? "forward"
		                        : r.verdict == tunnel::Verdict::ignore ? ignore_name(r.ignore)
		                                                               : drop_name(r.drop);
		std::fprintf(stderr, "  %zu bytes from %s: %.*s%s\n", d.size(), to_string(src).c_str(),
		             int(what.size()), what.data(), r.endpoint_changed ? " (endpoint changed)" : "");
	}
	// Only authenticated packets (forwarded ones and dummy packets) may move a peer.
	bool authenticated = r.verdict == tunnel::Verdict::forward ||
	                     (r.verdict == tunnel::Verdict::ignore && r.ignore == Ignore::dummy_packet);
	if (r.endpoint_changed &&
	    (!authenticated || !r.peer || !(r.peer->endpoint() == std::optional<Endpoint>(src))))
		__builtin_trap();
	if (r.verdict == tunnel::Verdict::forward) {
		// The inner packet lies inside the datagram and is a whole IP packet.
		if (r.inner.empty() || r.inner.data() < d.data() ||
		    r.inner.data() + r.inner.size() > d.data() + d.size())
			__builtin_trap();
		if (!r.peer) __builtin_trap();
	} else if (!r.inner.empty()) {
		__builtin_trap();
	}
}

void encap_record(World& w, Input& in) {
	size_t p = in.u8() % kStatic;
	uint8_t flags = in.u8();
	if (flags & 0x20) p = kRunTime;
	size_t len = in.be16() % 2048;
	const test::Site& from = *kPeers[p].site;
	// Mostly a source the receiver allows; bit 4 picks a neighbour's (policy).
	const test::Site& src_site = (flags & 0x10) ? *kPeers[(p + 1) % kStatic].site : from;
	test::Rng rng(len);
	Bytes inner = (flags & 1)
	                  ? test::ipv6_packet(src_site.host6(3), test::kSiteB.host6(4), 40 + len, rng)
	                  : test::ipv4_packet(src_site.host4(3), test::kSiteB.host4(4), 20 + len, rng);
	auto d = test::seal_inner(w.sender_table(p), inner);
	if (!d) {
		// Only a spent 32-bit counter (advanced by a record of kind 3) may stop a valid packet.
		const tunnel::OutboundSa& sa = w.sender(p).out;
		if (sa.esn || sa.next_seq <= UINT32_MAX) __builtin_trap();
		return;
	}
	size_t n = in.u8() % 8;
	for (size_t i = 0; i < n; i++) {
		size_t pos = in.be16() % d->size();
		(*d)[pos] ^= in.u8();
	}
	if (flags & 2) d->resize(in.be16() % (d->size() + 1));
	receive(w, *d, kSources[(flags >> 2) & 3]);
}

void sealed_record(World& w, Input& in) {
	size_t p = in.u8() % kStatic;
	uint8_t flags = in.u8();
	if (flags & 0x20) p = kRunTime;
	uint32_t seq_lo = in.be32();
	uint64_t seq = uint64_t(in.u8() & 3) << 32 | seq_lo;
	Bytes pt;
	auto bytes = in.take(in.u8());
	pt.assign(bytes.begin(), bytes.end());
	tunnel::Peer& s = w.sender(p);
	size_t align = s.out.spec->align;
	pt.resize((pt.size() + align - 1) / align * align, 0);
	if (pt.empty()) pt.resize(align, 0);
	Bytes d = test::seal_esp(*s.out.transforms[0], s.out.spi, seq, pt);
	receive(w, d, kSources[(flags >> 2) & 3]);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
	static World w;
	w.reset();
	Input in(data, size);
	for (int records = 0; !in.empty() && records < 64; records++) {
		switch (in.u8() % 4) {
		case 0: {
			auto raw = in.rest();
			receive(w, raw, kSources[0]);
			break;
		}
		case 1:
			encap_record(w, in);
			break;
		case 2:
			sealed_record(w, in);
			break;
		case 3: {
			tunnel::Peer& s = w.sender(in.u8() % kStatic);
			s.out.next_seq += in.be32();
			break;
		}
		}
	}
	return 0;
}
