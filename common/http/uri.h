// The absolute-form request target a forward proxy receives (RFC 9112 §3.2.2), and the cache
// key derived from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace proxy {

/// An absolute-form target `scheme://host[:port][/path][?query]`, normalized: scheme and host
/// lower-cased, an IPv6 literal stored without brackets, an empty path made "/", a fragment
/// dropped. Userinfo ("user@host") is refused (RFC 9110 §4.2.4 deprecates it).
struct AbsoluteUri {
  std::string scheme;          ///< lower-case, e.g. "http"
  std::string host;            ///< lower-case; IPv6 literal without brackets
  std::uint16_t port = 80;     ///< explicit port, or the scheme's default (80 for http)
  std::string path_and_query;  ///< origin-form: starts with '/', no fragment

  /// The Host field value for the origin: host, bracketed when IPv6, with ":port" unless the
  /// port is the default (RFC 9110 §7.2).
  [[nodiscard]] std::string authority() const;
  /// The normalized absolute URI used as the cache key: scheme + "://" + authority() + path.
  [[nodiscard]] std::string cache_key() const;
};

/// Parses an absolute-form target. Returns nullopt when it is not one (origin-form "/x",
/// authority-form, "*", no host, a bad port, userinfo, whitespace or control characters).
/// Any scheme of letters, digits, '+', '-', '.' parses; callers decide which they serve.
/// Only "http" has a default port (80); others need an explicit one. Thread-safe.
std::optional<AbsoluteUri> parse_absolute_uri(std::string_view target);

/// Parses the authority-form target of a CONNECT (RFC 9112 §3.2.3): `host:port`, an IPv6
/// literal in brackets, the port required. The result has scheme "tunnel" and path "/".
/// Returns nullopt for anything else (a path, a query, userinfo, no port). Thread-safe.
std::optional<AbsoluteUri> parse_authority_form(std::string_view target);

}  // namespace proxy
