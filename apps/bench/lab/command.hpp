// Programs run to completion inside a namespace with their output captured:
// how the comparison's subjects configure and query their tunnels.
#pragma once

#include "apps/bench/lab/process.hpp"

#include <string>
#include <vector>

namespace esptun::bench::lab {

/// find_program() - the full path of @name in PATH, or "" when absent
std::string find_program(const std::string& name);

/// CmdResult - what a finished command left: its wait status and output.
struct CmdResult {
	int status = -1;
	std::string out; ///< stdout
	std::string err; ///< stderr (the last 2 kB)
	bool ok() const noexcept { return exited_ok(status); }
};

/**
 * capture() - run @argv (looked up in PATH) inside @netns and collect output
 * @netns:   namespace name; empty for the current one
 * @timeout: the command is killed after this long (throws)
 * @scratch: a folder for the stderr file (named after the child's pid)
 * Throws Interrupted on a stop request.
 */
CmdResult capture(const std::string& netns, const std::vector<std::string>& argv, Millis timeout,
                  const std::string& scratch);

/**
 * run_in() - capture(), and throw std::runtime_error naming the command and
 * quoting its stderr when it does not exit with 0
 */
std::string run_in(const std::string& netns, const std::vector<std::string>& argv, const std::string& scratch,
                   Millis timeout = Millis(15000));

/// word_after() - the word that follows @prefix in @text ("" when @prefix is absent)
std::string word_after(const std::string& text, const std::string& prefix);

/**
 * version_word() - the word after @prefix in what `@argv` prints on stdout
 * or stderr (exit status ignored: `swanctl --version` also asks a daemon),
 * "" when there is none or the program cannot run
 */
std::string version_word(const std::vector<std::string>& argv, const std::string& prefix,
                         const std::string& scratch);

} // namespace esptun::bench::lab
