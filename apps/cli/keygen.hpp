// Key generation for operators: the commands that print keys, PSKs and the
// two mirrored halves of a static link in the form the config loader takes.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace esptun::cli {

/**
 * keygen_main() - runs one key generation command
 * @verb:    "genkey", "genpsk" or "genpair"
 * @args:    the arguments after the verb (e.g. "--cipher", "aes256-gcm")
 * @program: for messages
 * Writes the result to stdout, mistakes to stderr.
 * Return: the exit status (0, or 2 for a usage mistake, 1 for a failure).
 */
int keygen_main(const std::string& verb, const std::vector<std::string>& args, const char* program);

/// One key generation command for the usage text.
struct KeygenCommand {
	const char* usage; ///< e.g. "genkey --cipher C"
	const char* what;
};
/// keygen_commands() - the key generation commands, for the usage text
std::span<const KeygenCommand> keygen_commands();

} // namespace esptun::cli
