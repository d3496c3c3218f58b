// `esptun-bench compare`: what the subjects' files share (subjects.cpp,
// kernel_subjects.cpp): the suite esptun runs, and small helpers for
// configuring a tunnel with ip(8).
#pragma once

#include "apps/bench/compare/subjects.hpp"

#include <functional>
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

/**
 * wg_link_pair() - a WireGuard link between the lab's namespaces a and b,
 * fresh keys on both sides (wireguard-go and the kernel's module alike)
 * @net:         the inner subnet's first three octets with a dot, "10.99.3."
 *               (a gets .1, b .2, each the other's /32 as allowed-ips)
 * @port:        the UDP port both listen on
 * @key_base:    key files are @key_base-a.key and @key_base-b.key
 * @make_device: makes side @tag's ('a' or 'b') device in namespace @ns and
 *               returns its name; wg(8) configures it after
 * Throws std::runtime_error naming the command that failed.
 */
void wg_link_pair(const SubjectEnv& env, const std::string& net, const std::string& port,
                  const std::string& key_base,
                  const std::function<std::string(const std::string& ns, char tag)>& make_device);

/// make_kernel_wireguard() - the kernel's WireGuard (kernel_subjects.cpp)
std::unique_ptr<Subject> make_kernel_wireguard();

/// make_kernel_esp() - the kernel's XFRM ESP (kernel_subjects.cpp)
std::unique_ptr<Subject> make_kernel_esp();

} // namespace esptun::bench::compare
