#include "http/http_message.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <utility>

#include "server/lab_stub.h"

namespace proxy {
namespace {

// RFC 9110 §5.6.2: tchar.
bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(c); });
}

// Field values: visible characters, SP, HTAB and obs-text; never CR, LF, NUL or other controls.
bool is_field_value_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Finds the CRLF ending the line that starts at `from`. Returns npos when the buffer ends
// first; sets `bare` when a CR or LF appears alone, which we refuse rather than guess about.
std::size_t find_line_end(std::string_view buffer, std::size_t from, bool& bare) {
  for (std::size_t i = from; i < buffer.size(); ++i) {
    if (buffer[i] == '\n') {
      bare = true;
      return i;
    }
    if (buffer[i] == '\r') {
      if (i + 1 == buffer.size()) return std::string_view::npos;
      if (buffer[i + 1] != '\n') bare = true;
      return i;
    }
  }
  return std::string_view::npos;
}

// HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3). Returns the minor version for 1.x,
// -1 for a well-formed other version, -2 for garbage.
int parse_version(std::string_view v) {
  if (v.size() != 8 || v.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(v[5])) ||
      v[6] != '.' || !std::isdigit(static_cast<unsigned char>(v[7]))) {
    return -2;
  }
  if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) return -1;
  return v[7] - '0';
}

struct FieldsResult {
  ParseStatus status = ParseStatus::incomplete;
  std::size_t end = 0;  // offset just past the blank line
  std::string error;
  bool too_many = false;
  bool too_long = false;
};

// Parses header fields from `pos` up to and including the blank line.
FieldsResult parse_fields(std::string_view buffer, std::size_t pos, HeaderFields& fields,
                          std::size_t max_bytes, std::size_t max_fields) {
  FieldsResult result;
  for (;;) {
    bool bare = false;
    std::size_t eol = find_line_end(buffer, pos, bare);
    if (bare) {
      result.status = ParseStatus::invalid;
      result.error = "bare CR or LF in header section";
      return result;
    }
    if (eol == std::string_view::npos) {
      if (buffer.size() > max_bytes) {
        result.status = ParseStatus::invalid;
        result.too_long = true;
        result.error = "header section too large";
      }
      return result;  // incomplete
    }
    if (eol + 2 > max_bytes) {
      result.status = ParseStatus::invalid;
      result.too_long = true;
      result.error = "header section too large";
      return result;
    }
    std::string_view line = buffer.substr(pos, eol - pos);
    pos = eol + 2;
    if (line.empty()) {
      result.status = ParseStatus::complete;
      result.end = pos;
      return result;
    }
    if (line.front() == ' ' || line.front() == '\t') {
      result.status = ParseStatus::invalid;
      result.error = "obsolete line folding is not accepted (RFC 9112 §5.2)";
      return result;
    }
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
      result.status = ParseStatus::invalid;
      result.error = "malformed header field";
      return result;
    }
    std::string_view value = line.substr(colon + 1);
    if (!std::all_of(value.begin(), value.end(),
                     [](char c) { return is_field_value_char(static_cast<unsigned char>(c)); })) {
      result.status = ParseStatus::invalid;
      result.error = "control character in header field value";
      return result;
    }
    if (fields.size() >= max_fields) {
      result.status = ParseStatus::invalid;
      result.too_many = true;
      result.error = "too many header fields";
      return result;
    }
    fields.push_back({std::string(line.substr(0, colon)), std::string(trim_ows(value))});
  }
}

}  // namespace

std::size_t leading_empty_lines(std::string_view buffer) noexcept {
  std::size_t n = 0;
  while (buffer.substr(n, 2) == "\r\n") n += 2;
  return n;
}

RequestParseResult parse_request(std::string_view buffer, Request& out,
                                 const RequestLimits& limits) {
  // LAB(1) BEGIN parse_request
  RequestParseResult result;
  auto fail = [&](int status, std::string reason) {
    result.status = ParseStatus::invalid;
    result.error_status = status;
    result.error_reason = std::move(reason);
    return result;
  };
  bool bare = false;
  std::size_t eol = find_line_end(buffer, 0, bare);
  if (bare) return fail(400, "bare CR or LF in request line");
  if (eol == std::string_view::npos) {
    // A CR at the end may be the first half of the CRLF, which the limit does not count.
    std::size_t line_bytes = buffer.size() - (buffer.ends_with('\r') ? 1 : 0);
    if (line_bytes > limits.max_request_line) return fail(414, "request line too long");
    return result;  // incomplete
  }
  if (eol > limits.max_request_line) return fail(414, "request line too long");

  // request-line = method SP request-target SP HTTP-version (RFC 9112 §3), single spaces.
  std::string_view line = buffer.substr(0, eol);
  std::size_t sp1 = line.find(' ');
  std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "malformed request line");
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "malformed method");
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
        auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u != 0x7f;
      })) {
    return fail(400, "malformed request target");
  }
  int minor = parse_version(version);
  if (minor == -2) return fail(400, "malformed HTTP version");
  if (minor == -1) return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");

  HeaderFields fields;
  FieldsResult parsed =
      parse_fields(buffer, eol + 2, fields, limits.max_header_bytes, limits.max_header_fields);
  if (parsed.status == ParseStatus::invalid) {
    return fail(parsed.too_long || parsed.too_many ? 431 : 400, parsed.error);
  }
  if (parsed.status == ParseStatus::incomplete) return result;

  out.method = std::string(method);
  out.target = std::string(target);
  out.version_minor = minor;
  out.fields = std::move(fields);
  result.status = ParseStatus::complete;
  result.consumed = parsed.end;
  return result;
  // LAB(1) STUB
  // (void)buffer;
  // (void)out;
  // (void)limits;
  // proxy::todo_student("TODO(student) lab 1: parse_request (common/http/http_message.cpp)");
  // LAB(1) END
}

ResponseParseResult parse_response_head(std::string_view buffer, ResponseHead& out,
                                        std::size_t max_head_bytes) {
  ResponseParseResult result;
  auto fail = [&](std::string reason) {
    result.status = ParseStatus::invalid;
    result.error_reason = std::move(reason);
    return result;
  };
  bool bare = false;
  std::size_t eol = find_line_end(buffer, 0, bare);
  if (bare) return fail("bare CR or LF in status line");
  if (eol == std::string_view::npos) {
    if (buffer.size() > max_head_bytes) return fail("status line too long");
    return result;
  }
  // status-line = HTTP-version SP status-code SP [ reason-phrase ] (RFC 9112 §4)
  std::string_view line = buffer.substr(0, eol);
  if (line.size() < 12 || line[8] != ' ' || (line.size() > 12 && line[12] != ' ')) {
    return fail("malformed status line");
  }
  int minor = parse_version(line.substr(0, 8));
  if (minor < 0) return fail("origin answered with an unsupported HTTP version");
  std::string_view code = line.substr(9, 3);
  if (!std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return fail("malformed status code");
  }
  std::string_view reason = line.size() > 13 ? line.substr(13) : std::string_view{};
  if (!std::all_of(reason.begin(), reason.end(),
                   [](char c) { return is_field_value_char(static_cast<unsigned char>(c)); })) {
    return fail("control character in reason phrase");
  }

  HeaderFields fields;
  FieldsResult parsed = parse_fields(buffer, eol + 2, fields, max_head_bytes, 1000);
  if (parsed.status == ParseStatus::invalid) return fail("origin sent " + parsed.error);
  if (parsed.status == ParseStatus::incomplete) return result;

  out.version_minor = minor;
  out.status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
  out.reason = std::string(reason);
  out.fields = std::move(fields);
  result.status = ParseStatus::complete;
  result.consumed = parsed.end;
  return result;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::optional<std::string_view> find_field(const HeaderFields& fields, std::string_view name) {
  for (const auto& field : fields) {
    if (iequals(field.name, name)) return std::string_view(field.value);
  }
  return std::nullopt;
}

std::vector<std::string_view> split_list(std::string_view value) {
  std::vector<std::string_view> items;
  while (!value.empty()) {
    std::size_t comma = value.find(',');
    std::string_view item = trim_ows(value.substr(0, comma));
    if (!item.empty()) items.push_back(item);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return items;
}

bool field_has_token(const HeaderFields& fields, std::string_view name, std::string_view token) {
  for (const auto& field : fields) {
    if (!iequals(field.name, name)) continue;
    for (std::string_view item : split_list(field.value)) {
      if (iequals(item, token)) return true;
    }
  }
  return false;
}

std::size_t count_fields(const HeaderFields& fields, std::string_view name) noexcept {
  return static_cast<std::size_t>(std::count_if(
      fields.begin(), fields.end(), [&](const HeaderField& field) { return iequals(field.name, name); }));
}

std::string_view reason_phrase(int status) noexcept {
  static constexpr std::pair<int, std::string_view> kPhrases[] = {
      {100, "Continue"},           {101, "Switching Protocols"},
      {200, "OK"},                 {201, "Created"},
      {202, "Accepted"},           {204, "No Content"},
      {206, "Partial Content"},    {301, "Moved Permanently"},
      {302, "Found"},              {303, "See Other"},
      {304, "Not Modified"},       {307, "Temporary Redirect"},
      {308, "Permanent Redirect"}, {400, "Bad Request"},
      {401, "Unauthorized"},       {403, "Forbidden"},
      {404, "Not Found"},          {405, "Method Not Allowed"},
      {408, "Request Timeout"},    {410, "Gone"},
      {413, "Content Too Large"},  {414, "URI Too Long"},
      {429, "Too Many Requests"},  {431, "Request Header Fields Too Large"},
      {500, "Internal Server Error"}, {501, "Not Implemented"},
      {502, "Bad Gateway"},        {503, "Service Unavailable"},
      {504, "Gateway Timeout"},    {505, "HTTP Version Not Supported"},
  };
  for (const auto& [code, phrase] : kPhrases) {
    if (code == status) return phrase;
  }
  return "Status";
}

}  // namespace proxy
