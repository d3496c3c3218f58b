// Key generation for operators: the commands that print keys, PSKs and the
// two mirrored halves of a static link in the form the config loader takes.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace esptun::cli {

/**
 * keygen() - runs one key generation command
 * @verb:   "genkey", "genpsk" or "genpair"
 * @cipher: the suite (genkey, genpair), one of cipher_names(); the command
 *          line has checked it
 * Writes the result to stdout. Return: 0; throws std::runtime_error when
 * the kernel gives no randomness.
 */
int keygen(const std::string& verb, const std::string& cipher);

/// One key generation command for the command line.
struct KeygenCommand {
	const char* name; ///< e.g. "genkey"
	const char* what;
	bool takes_cipher; ///< --cipher C
};
/// keygen_commands() - the key generation commands
std::span<const KeygenCommand> keygen_commands();

/// is_keygen_verb() - @verb is one of keygen_commands()
bool is_keygen_verb(const std::string& verb);

/// cipher_names() - the suites' config names, for --cipher
std::vector<std::string> cipher_names();

} // namespace esptun::cli
