// Proves "no heap allocation per packet": a child process of this test binary
// installs counting allocators into OpenSSL (CRYPTO_set_mem_functions only
// works before OpenSSL's first allocation, hence the fresh process) and runs
// seal()/open() for every suite. Our own code has no allocating calls on the
// packet path; OpenSSL's are what this counts.
#include "crypto/esp_transform.hpp"
#include "tests/unit/crypto/crypto_test_util.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <doctest/doctest.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace esptun::crypto;
using namespace esptun::crypto::test;

namespace {

constexpr const char* kProbeEnv = "ESPTUN_CRYPTO_ALLOC_PROBE";
std::atomic<long> g_allocs{0};

void* count_malloc(size_t n, const char*, int) {
	g_allocs++;
	return std::malloc(n);
}
void* count_realloc(void* p, size_t n, const char*, int) {
	g_allocs++;
	return std::realloc(p, n);
}
void count_free(void* p, const char*, int) { std::free(p); }

} // namespace

TEST_CASE("per-packet allocation probe (child process half; does nothing unless started by the test below)") {
	if (!std::getenv(kProbeEnv)) return;
	REQUIRE_MESSAGE(CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free) == 1,
	                "OpenSSL allocated before the probe started");
	{ // negative control: the counter does see OpenSSL's allocations
		const long before = g_allocs.load();
		EVP_CIPHER_CTX_free(EVP_CIPHER_CTX_new());
		REQUIRE(g_allocs.load() > before);
	}
	std::mt19937_64 rng(99);
	for (const auto& spec : all_ciphers()) {
		for (bool esn : {false, true}) {
			const Bytes enc = random_bytes(rng, spec.enc_key_len),
			            auth = random_bytes(rng, spec.auth_key_len);
			auto tx = make_esp_transform(spec.id, enc, auth, esn);
			auto rx = make_esp_transform(spec.id, enc, auth, esn);
			std::vector<Bytes> packets;
			for (size_t len : {size_t(0), size_t(64), size_t(1024), size_t(1440), size_t(8992)})
				packets.push_back(
				    esp_packet(spec, 1, 1, Bytes(len - len % spec.align, 0x42)));
			auto run = [&](uint64_t first_seq) {
				bool all_ok = true;
				uint64_t seq = first_seq;
				for (auto& p : packets) {
					tx->seal(p, seq);
					all_ok &= rx->open(p, uint32_t(seq >> 32));
					Bytes forged =
					    p; // operator new: not counted, only OpenSSL's allocator is
					forged[8] ^= 1;
					all_ok &= !rx->open(forged, uint32_t(seq >> 32));
					seq++;
				}
				return all_ok;
			};
			REQUIRE(run(1)); // warm-up: lazy one-time set-up inside OpenSSL may allocate
			const long before = g_allocs.load();
			bool ok = true;
			for (int round = 0; round < 50; round++)
				ok &= run(100 + uint64_t(round) * 10);
			const long allocs = g_allocs.load() - before;
			CHECK(ok);
			std::printf("ALLOC-PROBE %s esn=%d openssl_allocs=%ld\n",
			            std::string(spec.name).c_str(), int(esn), allocs);
			CHECK_MESSAGE(allocs == 0, spec.name << " esn=" << esn << ": " << allocs
			                                     << " OpenSSL allocations");
		}
	}
	std::printf("ALLOC-PROBE-DONE\n");
}

TEST_CASE("seal() and open() make no OpenSSL heap allocation per packet, for every suite (child process)") {
	std::array<char, 4096> exe{};
	const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
	REQUIRE(n > 0);
	const std::string cmd = std::string(kProbeEnv) + "=1 '" + std::string(exe.data(), size_t(n)) +
	                        "' '--test-case=per-packet allocation probe*' --no-version 2>&1";
	FILE* f = popen(cmd.c_str(), "r");
	REQUIRE(f);
	std::string out;
	std::array<char, 512> buf;
	while (size_t got = std::fread(buf.data(), 1, buf.size(), f))
		out.append(buf.data(), got);
	const int status = pclose(f);
	INFO(out);
	CHECK(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) == 0);
	CHECK(out.find("ALLOC-PROBE-DONE") != std::string::npos);
}
