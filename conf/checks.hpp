// Config checks that need no TOML: names, keys, SPIs, addresses, key files.
// conf/config.cpp walks the TOML tree and calls these; each returns an empty
// string when the value is fine, else a message that says how to fix it.
#pragma once

#include "base/inet.hpp"
#include "base/secret.hpp"
#include "conf/file_source.hpp"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

namespace esptun::conf {

/// Edit distance (insert, delete, substitute, swap two neighbours).
size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to @word when it is near enough to be a typo, else "".
std::string_view closest_match(std::string_view word, std::span<const std::string_view> candidates);

/// A tun device name the kernel accepts (dev_valid_name) and we can put in a path.
std::string check_interface_name(std::string_view name);
/// A peer name: 1..64 of [A-Za-z0-9._-] (it appears in logs and on the control socket).
std::string check_peer_name(std::string_view name);
/// SPI 0 is never sent and 1..255 are reserved by IANA (RFC 4303 section 2.1).
std::string check_spi(int64_t spi);
/// An address to put on the tunnel interface (host bits kept).
std::string check_interface_address(const IpPrefix& p);

/**
 * decode_hex_key() - hex key text into bytes: "0x0123..." (as `ip xfrm state`
 * takes keys) or the bare digits "0123..." (as `openssl rand -hex` prints).
 * The message never repeats the key text: it is a secret.
 */
std::string decode_hex_key(std::string_view text, SecretBytes& out);

/// The largest key or PSK file: one hex key or passphrase plus whitespace is far less.
inline constexpr size_t kKeyFileMax = 4096;

/**
 * read_key_file() - the text of a key file, surrounding whitespace trimmed.
 * Only regular files are opened, and only when group and others have no
 * access to them (check_secret_mode()). Every copy of the text is wiped.
 * @files: where the file is read (the file system unless replaying a
 *         helper's reads: file_source.hpp)
 */
std::string read_key_file(const std::filesystem::path& path, SecretString& text,
                          FileSource& files = real_files());

/**
 * read_file_wiped() - the whole of the regular file @path, at most @max
 * bytes, read with read(2) into @out (no stdio buffer keeps a copy of the
 * secret). @st receives the opened file's fstat(). Return: "" or why not
 * (strerror text, "not a regular file", "larger than N bytes").
 */
std::string read_file_wiped(const std::filesystem::path& path, size_t max, SecretString& out,
                            struct stat& st);

/**
 * check_secret_mode() - the one rule for files that hold secrets (key files,
 * and a config with inline keys or PSKs): group and others have no access
 * (st_mode & 077 == 0). @what names the file in the message ("key file",
 * "config"), which also gives its mode and the chmod to run.
 */
std::string check_secret_mode(std::string_view what, const std::string& name, unsigned mode);

} // namespace esptun::conf
