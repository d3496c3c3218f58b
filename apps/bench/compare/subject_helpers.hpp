// `esptun-bench compare`: what the subjects' files share (subjects.cpp,
// kernel_subjects.cpp): the suite esptun runs, and small helpers for
// configuring a tunnel with ip(8).
#pragma once

#include "apps/bench/compare/subjects.hpp"

#include <memory>
#include <string>
#include <vector>

namespace esptun::bench::compare {

/// The suite esptun runs in the comparison, and the kernel's ESP with it.
inline constexpr const char* kEspCipher = "aes256-gcm";

/// ip_in() - `ip -n @ns ARGS...`; throws on failure, quoting ip's stderr
void ip_in(const SubjectEnv& env, const std::string& ns, std::vector<std::string> args);

/// kernel_version() - "linux RELEASE" of the running kernel
std::string kernel_version();

/// first_line_of() - @s up to its first newline, without a trailing "\r"
std::string first_line_of(const std::string& s);

/// make_kernel_wireguard() - the kernel's WireGuard (kernel_subjects.cpp)
std::unique_ptr<Subject> make_kernel_wireguard();

/// make_kernel_esp() - the kernel's XFRM ESP (kernel_subjects.cpp)
std::unique_ptr<Subject> make_kernel_esp();

} // namespace esptun::bench::compare
