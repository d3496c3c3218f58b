// Key generation for operators: the commands that print keys, PSKs and the
// two mirrored halves of a static link in the form the config loader takes.
#pragma once

#include <cstdio>
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

/// keygen_usage() - the usage lines of the key generation commands
void keygen_usage(FILE* out, const char* program);

} // namespace esptun::cli
