// What the IKE fuzzers share to write their seed corpora: the input item
// framing, the files, and the -write_seeds=DIR option that asks for them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace esptun::fuzz {

/// frame() - one input item: [ctl 1][length 2, big-endian][bytes]
inline std::vector<uint8_t> frame(uint8_t ctl, const std::vector<uint8_t>& bytes = {}) {
	std::vector<uint8_t> out{ctl, uint8_t(bytes.size() >> 8), uint8_t(bytes.size())};
	out.insert(out.end(), bytes.begin(), bytes.end());
	return out;
}

/// A seed: its file name and the pieces its bytes are, in order.
using Seed = std::pair<std::string, std::vector<std::vector<uint8_t>>>;

/// write_seed_files() - each seed as DIR/NAME
inline void write_seed_files(const std::string& dir, const std::vector<Seed>& seeds) {
	for (const auto& [name, parts] : seeds) {
		std::vector<uint8_t> bytes;
		for (const auto& p : parts)
			bytes.insert(bytes.end(), p.begin(), p.end());
		std::ofstream(dir + "/" + name, std::ios::binary)
		    .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
	}
}

/// write_seeds_if_asked() - with -write_seeds=DIR among @argv, @write(DIR)
/// and exit 0 (from LLVMFuzzerInitialize)
template <class Write> void write_seeds_if_asked(int argc, char** argv, Write write) {
	for (int i = 1; i < argc; i++)
		if (std::strncmp(argv[i], "-write_seeds=", 13) == 0) {
			write(std::string(argv[i] + 13));
			std::exit(0);
		}
}

} // namespace esptun::fuzz
