// x86-64 CPU features for the stitched AES-CBC+HMAC transform: fills the
// OPENSSL_ia32cap_P vector that the CRYPTOGAMS routines linked from
// libcrypto.a read, and says which code path those routines will take.
// Set-up time only; nothing here runs per packet.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace esptun::crypto::cpu {

/// The features the linked routines care about, as OpenSSL would report them
/// (AVX/AVX2 only when the OS saves YMM state).
struct X86Features {
	bool intel = false; ///< "GenuineIntel"
	bool ssse3 = false;
	bool aesni = false;
	bool avx = false;
	bool xop = false; ///< AMD only
	bool avx2 = false;
	bool bmi1 = false;
	bool bmi2 = false;
	bool sha = false; ///< SHA extensions (SHA-NI)
};

/**
 * ia32cap_init() - fill OPENSSL_ia32cap_P from CPUID once (thread-safe,
 * function-local static) and return the decoded features. Must run before
 * the first call into any linked aesni_* routine; the stitched transform's
 * constructor and stitched_supported() call it.
 */
const X86Features& ia32cap_init() noexcept;

/**
 * vaes_avx512() - whether crypto/gcm_vaes.cpp can run here: AVX-512 F, BW
 * and VL, VAES, VPCLMULQDQ, AES-NI and PCLMULQDQ, with the OS saving the
 * opmask and both halves of the ZMM state (XCR0). Read from CPUID once; it
 * does not touch OPENSSL_ia32cap_P, which never claims AVX-512 (see the .cpp).
 */
bool vaes_avx512() noexcept;

/// Which variant aesni_cbc_sha1_enc / aesni_cbc_sha256_enc dispatch to, read
/// from the current OPENSSL_ia32cap_P exactly as their entry code does.
enum class StitchPath : uint8_t { shaext, avx2, avx, xop, ssse3, none };
StitchPath sha1_stitch_path() noexcept;
StitchPath sha256_stitch_path() noexcept;
std::string_view stitch_path_name(StitchPath p) noexcept;

/**
 * ScopedCapMask - tests and fuzzing only: clear feature bits in
 * OPENSSL_ia32cap_P so the routines take a slower variant (e.g. clear SHA to
 * run the AVX/AVX2 code on a SHA-NI machine), restored on destruction.
 * Only ever removes features, so the result still runs on this CPU. Not
 * thread-safe; never on the packet path.
 */
class ScopedCapMask {
public:
	struct Clear {
		bool sha = false;
		bool avx2 = false;
		bool avx = false;
	};
	explicit ScopedCapMask(Clear c) noexcept;
	~ScopedCapMask();
	ScopedCapMask(const ScopedCapMask&) = delete;
	ScopedCapMask& operator=(const ScopedCapMask&) = delete;

private:
	std::array<unsigned, 4> saved_;
};

} // namespace esptun::crypto::cpu
