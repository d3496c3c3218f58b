// OPENSSL_ia32cap_P for the CRYPTOGAMS objects linked from libcrypto.a (see
// cpu_features.hpp and crypto/CMakeLists.txt).
//
// Theory of operation: aesni-sha1-x86_64.o, aesni-sha256-x86_64.o and
// aesni-x86_64.o have exactly one undefined symbol, OPENSSL_ia32cap_P, the
// capability vector that libcrypto fills in OPENSSL_cpuid_setup(). Inside
// libcrypto.so that vector is hidden, so these objects cannot use it: we
// define our own and fill it the way OpenSSL 3.0's crypto/x86_64cpuid.pl
// (OPENSSL_ia32_cpuid) does, for every bit the linked code reads:
//
//   word 0 = CPUID.1:EDX with bit 30 set on Intel CPUs ("Intel CPU" bit,
//            `or $0x40000000,%edx` after the "GenuineIntel" check). Read by
//            aesni_cbc_sha1_enc: its AVX path needs AVX *and* this bit.
//   word 1 = CPUID.1:ECX, with bit 11 replaced by AMD's XOP bit from
//            CPUID.0x80000001:ECX (`and $0xfffff7ff,%ecx; or %ecx,%r9d`), and
//            AVX (28), FMA (12) and XOP (11) cleared unless OSXSAVE (27) is
//            set and XCR0 has both XMM and YMM state (bits 1-2) enabled
//            (`.Lclear_avx`). Bits read: SSSE3 (9, the SHA-1 fallback path),
//            AVX (28) and XOP (11) by both stitched routines and by
//            aesni_set_encrypt_key; MOVBE (22) and XSAVE (26) by
//            aesni_cbc_encrypt (its Silvermont tuning). AES-NI is bit 25
//            (OpenSSL's AESNI_CBC_HMAC_SHA_CAPABLE macro tests
//            OPENSSL_ia32cap_P[1] bit 57-32).
//   word 2 = CPUID.(EAX=7,ECX=0):EBX, with AVX2 (5) cleared under the same
//            YMM-state condition (`andl $0xffffffdf,8(%rdi)`). Bits read by
//            aesni_cbc_sha256_enc: SHA (29, tested as bit 61 of the 64-bit
//            load at word 1), BMI1 (3), AVX2 (5), BMI2 (8); SHA also by
//            aesni_cbc_sha1_enc.
//   word 3 = 0. OpenSSL 3.0 stores CPUID.7:ECX there (VAES, ...) and clears
//            AVX-512 bits unless XCR0 enables ZMM state; nothing we link
//            reads word 3 or the AVX-512 bits, so we do not claim them.
#include "crypto/cpu_features.hpp"

#include <cpuid.h>
#include <cstring>

extern "C" {
// Defined here, read by the assembly; 16 bytes, like OpenSSL's
// `.comm OPENSSL_ia32cap_P,16,4`.
alignas(16) unsigned int OPENSSL_ia32cap_P[4];
}

namespace esptun::crypto::cpu {
namespace {

constexpr unsigned bit(unsigned n) { return 1u << n; }

// Word 1 (CPUID.1:ECX).
constexpr unsigned kPclmul = bit(1), kSsse3 = bit(9), kXop = bit(11), kFma = bit(12), kAesni = bit(25),
                   kOsxsave = bit(27), kAvx = bit(28);
// Word 2 (CPUID.7.0:EBX).
constexpr unsigned kBmi1 = bit(3), kAvx2 = bit(5), kBmi2 = bit(8), kSha = bit(29);
// CPUID.7.0: AVX-512 F, BW, VL (EBX); VAES, VPCLMULQDQ (ECX).
constexpr unsigned kAvx512F = bit(16), kAvx512Bw = bit(30), kAvx512Vl = bit(31);
constexpr unsigned kVaes = bit(9), kVpclmulqdq = bit(10);
// XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM state.
constexpr uint64_t kXcr0Zmm = 0xe6;
// AVX-512 F, DQ, IFMA, PF, ER, CD, BW, VL: never claimed (see above).
constexpr unsigned kAvx512 = bit(16) | bit(17) | bit(21) | bit(26) | bit(27) | bit(28) | bit(30) | bit(31);
// Word 0: OpenSSL's "Intel CPU" bit; reserved bits 20 and 30 forced to 0
// first (`and $0xbfefffff,%edx`).
constexpr unsigned kIntel = bit(30), kEdxReserved = 0xbfefffffu;

uint64_t xgetbv0() noexcept {
	uint32_t lo = 0, hi = 0;
	// XGETBV with ECX=0 reads XCR0; only valid when OSXSAVE is set.
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return uint64_t(hi) << 32 | lo;
}

void fill(unsigned cap[4]) noexcept {
	unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
	cap[0] = cap[1] = cap[2] = cap[3] = 0;
	if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return;
	const unsigned max_leaf = eax;
	const bool intel = ebx == 0x756e6547 && edx == 0x49656e69 && ecx == 0x6c65746e; // "GenuineIntel"
	const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;   // "AuthenticAMD"

	unsigned xop = 0;
	if (amd && __get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx)) xop = ecx & kXop;

	if (max_leaf >= 7) {
		__cpuid_count(7, 0, eax, ebx, ecx, edx);
		cap[2] = ebx & ~kAvx512;
	}

	__cpuid(1, eax, ebx, ecx, edx);
	cap[0] = (edx & kEdxReserved) | (intel ? kIntel : 0);
	cap[1] = (ecx & ~kXop) | xop;

	// AVX needs the OS to save YMM state on context switches: OSXSAVE set
	// and XCR0 bits 1 (SSE) and 2 (AVX) both on. Otherwise AVX instructions
	// fault or lose state, so OpenSSL clears AVX, FMA, XOP and AVX2.
	const bool ymm_ok = (cap[1] & kOsxsave) && (xgetbv0() & 6) == 6;
	if (!ymm_ok) {
		cap[1] &= ~(kAvx | kFma | kXop);
		cap[2] &= ~kAvx2;
	}
}

X86Features decode(const unsigned cap[4]) noexcept {
	X86Features f;
	f.intel = cap[0] & kIntel;
	f.ssse3 = cap[1] & kSsse3;
	f.aesni = cap[1] & kAesni;
	f.avx = cap[1] & kAvx;
	f.xop = cap[1] & kXop;
	f.avx2 = cap[2] & kAvx2;
	f.bmi1 = cap[2] & kBmi1;
	f.bmi2 = cap[2] & kBmi2;
	f.sha = cap[2] & kSha;
	return f;
}

} // namespace

bool vaes_avx512() noexcept {
	static const bool yes = [] {
		unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
		if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx) || eax < 7) return false;
		__cpuid(1, eax, ebx, ecx, edx);
		if ((ecx & (kAesni | kPclmul | kOsxsave)) != (kAesni | kPclmul | kOsxsave)) return false;
		if ((xgetbv0() & kXcr0Zmm) != kXcr0Zmm) return false;
		__cpuid_count(7, 0, eax, ebx, ecx, edx);
		return (ebx & (kAvx512F | kAvx512Bw | kAvx512Vl)) == (kAvx512F | kAvx512Bw | kAvx512Vl) &&
		       (ecx & (kVaes | kVpclmulqdq)) == (kVaes | kVpclmulqdq);
	}();
	return yes;
}

const X86Features& ia32cap_init() noexcept {
	static const X86Features features = [] {
		fill(OPENSSL_ia32cap_P);
		return decode(OPENSSL_ia32cap_P);
	}();
	return features;
}

StitchPath sha1_stitch_path() noexcept {
	ia32cap_init();
	const unsigned* cap = OPENSSL_ia32cap_P;
	// aesni_cbc_sha1_enc entry: `bt $61` on the 64-bit load of words 1-2
	// (SHA), then AVX and "Intel CPU" both set -> AVX, else SSSE3.
	if (cap[2] & kSha) return StitchPath::shaext;
	if ((cap[1] & kAvx) && (cap[0] & kIntel)) return StitchPath::avx;
	if (cap[1] & kSsse3) return StitchPath::ssse3;
	return StitchPath::none; // "caller should check for SSSE3 and AES-NI bits"
}

StitchPath sha256_stitch_path() noexcept {
	ia32cap_init();
	const unsigned* cap = OPENSSL_ia32cap_P;
	// aesni_cbc_sha256_enc entry: SHA, then XOP, then BMI1+AVX2+BMI2, then
	// AVX; with none of them it executes ud2.
	if (cap[2] & kSha) return StitchPath::shaext;
	if (cap[1] & kXop) return StitchPath::xop;
	if ((cap[2] & (kBmi1 | kAvx2 | kBmi2)) == (kBmi1 | kAvx2 | kBmi2)) return StitchPath::avx2;
	if (cap[1] & kAvx) return StitchPath::avx;
	return StitchPath::none;
}

std::string_view stitch_path_name(StitchPath p) noexcept {
	switch (p) {
	case StitchPath::shaext:
		return "sha-ni";
	case StitchPath::avx2:
		return "avx2";
	case StitchPath::avx:
		return "avx";
	case StitchPath::xop:
		return "xop";
	case StitchPath::ssse3:
		return "ssse3";
	case StitchPath::none:
		break;
	}
	return "none";
}

ScopedCapMask::ScopedCapMask(Clear c) noexcept {
	ia32cap_init();
	std::memcpy(saved_.data(), OPENSSL_ia32cap_P, sizeof OPENSSL_ia32cap_P);
	if (c.sha) OPENSSL_ia32cap_P[2] &= ~kSha;
	if (c.avx2) OPENSSL_ia32cap_P[2] &= ~kAvx2;
	if (c.avx) {
		// As without OS YMM support: AVX and everything built on it.
		OPENSSL_ia32cap_P[1] &= ~(kAvx | kFma | kXop);
		OPENSSL_ia32cap_P[2] &= ~kAvx2;
	}
}

ScopedCapMask::~ScopedCapMask() { std::memcpy(OPENSSL_ia32cap_P, saved_.data(), sizeof OPENSSL_ia32cap_P); }

} // namespace esptun::crypto::cpu
