#include "http/uri.h"

#include <algorithm>
#include <cctype>

namespace proxy {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool is_scheme_char(unsigned char c) { return std::isalnum(c) || c == '+' || c == '-' || c == '.'; }

// reg-name and IPv4 characters (RFC 3986 §3.2.2), minus percent-encoding, which no DNS name needs.
bool is_host_char(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

}  // namespace

std::string AbsoluteUri::authority() const {
  std::string out = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (!(scheme == "http" && port == 80)) out += ":" + std::to_string(port);
  return out;
}

std::string AbsoluteUri::cache_key() const { return scheme + "://" + authority() + path_and_query; }

std::optional<AbsoluteUri> parse_absolute_uri(std::string_view target) {
  if (std::any_of(target.begin(), target.end(), [](char c) {
        auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u == 0x7f;
      })) {
    return std::nullopt;
  }
  std::size_t colon = target.find("://");
  if (colon == std::string_view::npos || colon == 0 ||
      !std::isalpha(static_cast<unsigned char>(target[0])) ||
      !std::all_of(target.begin(), target.begin() + static_cast<std::ptrdiff_t>(colon),
                   [](char c) { return is_scheme_char(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  AbsoluteUri uri;
  uri.scheme = lower(target.substr(0, colon));
  std::string_view rest = target.substr(colon + 3);

  // The fragment never goes on the wire (RFC 9110 §4.2.5); drop it before anything else.
  if (std::size_t hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);

  std::size_t path_start = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_start);
  std::string_view path = path_start == std::string_view::npos ? "" : rest.substr(path_start);
  if (authority.empty() || authority.find('@') != std::string_view::npos) return std::nullopt;

  std::string_view host;
  std::string_view port_text;
  if (authority.front() == '[') {
    std::size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1) return std::nullopt;
    host = authority.substr(1, close - 1);
    if (!std::all_of(host.begin(), host.end(), [](char c) {
          return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
        })) {
      return std::nullopt;
    }
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return std::nullopt;
      port_text = after.substr(1);
    }
  } else {
    std::size_t port_colon = authority.find(':');
    host = authority.substr(0, port_colon);
    if (port_colon != std::string_view::npos) port_text = authority.substr(port_colon + 1);
    if (host.empty() || !std::all_of(host.begin(), host.end(), [](char c) {
          return is_host_char(static_cast<unsigned char>(c));
        })) {
      return std::nullopt;
    }
  }
  uri.host = lower(host);

  if (!port_text.empty()) {
    if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(), [](char c) {
          return c >= '0' && c <= '9';
        })) {
      return std::nullopt;
    }
    unsigned long port = std::stoul(std::string(port_text));
    if (port == 0 || port > 65535) return std::nullopt;
    uri.port = static_cast<std::uint16_t>(port);
  } else if (uri.scheme == "http") {
    uri.port = 80;  // also for "host:" with an empty port (RFC 3986 §6.2.3)
  } else {
    return std::nullopt;
  }

  uri.path_and_query = path.empty() || path.front() == '?' ? "/" + std::string(path) : std::string(path);
  return uri;
}

std::optional<AbsoluteUri> parse_authority_form(std::string_view target) {
  if (target.empty() || target.find_first_of("/?#") != std::string_view::npos) return std::nullopt;
  // Any scheme but http has no default port, so the parser insists on an explicit one.
  return parse_absolute_uri("tunnel://" + std::string(target));
}

}  // namespace proxy
