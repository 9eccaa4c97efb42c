#include "http/body_reader.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "server/lab_stub.h"

namespace proxy {
namespace {

// Parses one Content-Length field value; nullopt unless it is all digits and fits 64 bits.
std::optional<std::uint64_t> parse_length(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// All Content-Length values must agree, including those in a comma list ("5, 5"), which
// RFC 9112 §6.3 lets a recipient collapse; anything else is an error.
struct LengthFields {
  bool present = false;
  bool valid = true;
  std::uint64_t length = 0;
};

LengthFields content_length(const HeaderFields& fields) {
  LengthFields result;
  for (const auto& field : fields) {
    if (!iequals(field.name, "Content-Length")) continue;
    auto items = split_list(field.value);
    if (items.empty()) result.valid = false;
    for (std::string_view item : items) {
      auto value = parse_length(item);
      if (!value || (result.present && *value != result.length)) {
        result.valid = false;
        return result;
      }
      result.present = true;
      result.length = *value;
    }
  }
  return result;
}

// The last transfer coding is what frames the message (RFC 9112 §6.3, item 4).
std::optional<std::string_view> last_transfer_coding(const HeaderFields& fields) {
  std::optional<std::string_view> last;
  for (const auto& field : fields) {
    if (!iequals(field.name, "Transfer-Encoding")) continue;
    auto items = split_list(field.value);
    last = items.empty() ? std::string_view{} : items.back();
  }
  return last;
}

// True when the Transfer-Encoding fields list exactly one coding, `chunked`: the only coding this
// proxy removes (RFC 9112 §6.1).
bool only_chunked(const HeaderFields& fields) {
  std::size_t codings = 0;
  for (const auto& field : fields) {
    if (!iequals(field.name, "Transfer-Encoding")) continue;
    for (std::string_view item : split_list(field.value)) {
      if (!iequals(item, "chunked") || ++codings > 1) return false;
    }
  }
  return codings == 1;
}

// LAB(1) BEGIN hex_value
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
// LAB(1) STUB
// LAB(1) END

constexpr std::size_t kMaxChunkLine = 4096;  // size line with extensions, or one trailer line

}  // namespace

std::optional<BodyFraming> response_body_framing(const ResponseHead& head,
                                                 std::string_view request_method) {
  if (request_method == "HEAD" || (head.status >= 100 && head.status < 200) ||
      head.status == 204 || head.status == 304) {
    return BodyFraming{BodyKind::none, 0};
  }
  if (last_transfer_coding(head.fields)) {
    // This proxy removes chunked coding and nothing else (gzip, deflate...): relaying such a body
    // without its Transfer-Encoding would hand the client, and the cache, bytes it cannot know
    // are still coded. Only a lone `chunked` is accepted; anything else is the origin's error.
    if (only_chunked(head.fields)) return BodyFraming{BodyKind::chunked, 0};
    return std::nullopt;
  }
  LengthFields length = content_length(head.fields);
  if (!length.valid) return std::nullopt;
  if (length.present) return BodyFraming{BodyKind::content_length, length.length};
  return BodyFraming{BodyKind::close_delimited, 0};
}

std::optional<BodyFraming> request_body_framing(const Request& request) {
  LengthFields length = content_length(request.fields);
  auto coding = last_transfer_coding(request.fields);
  if (coding) {
    if (length.present || !length.valid) return std::nullopt;  // the classic smuggling pair
    // A lone `chunked` only: the origin would get any other coding's bytes unlabelled, since the
    // proxy re-frames the body it decoded (and `chunked, chunked` is a smuggling probe).
    if (!only_chunked(request.fields)) return std::nullopt;
    return BodyFraming{BodyKind::chunked, 0};
  }
  if (!length.valid) return std::nullopt;
  if (length.present && length.length > 0) return BodyFraming{BodyKind::content_length, length.length};
  return BodyFraming{BodyKind::none, 0};
}

ChunkedDecoder::Result ChunkedDecoder::decode(std::string_view input, std::string& out) {
  // LAB(1) BEGIN ChunkedDecoder::decode
  Result result;
  std::size_t i = 0;
  while (i < input.size() && state_ != State::done) {
    if (state_ == State::data) {
      // Data bytes go in runs: as many as the chunk still owes and the input holds.
      std::size_t take = static_cast<std::size_t>(
          std::min<std::uint64_t>(remaining_, input.size() - i));
      out.append(input.substr(i, take));
      i += take;
      remaining_ -= take;
      if (remaining_ == 0) state_ = State::data_cr;
    } else if (framing_byte(input[i])) {
      ++i;
    } else {
      result.consumed = i;
      result.error = true;
      return result;
    }
  }
  result.consumed = i;
  result.done = state_ == State::done;
  return result;
  // LAB(1) STUB
  // (void)input;
  // (void)out;
  // proxy::todo_student(
  //     "TODO(student) lab 1: ChunkedDecoder::decode (common/http/body_reader.cpp)");
  // LAB(1) END
}

bool ChunkedDecoder::framing_byte(char c) {
  // LAB(1) BEGIN ChunkedDecoder::framing_byte
  switch (state_) {
    case State::size: {
      int digit = hex_value(c);
      if (digit >= 0) {
        if (remaining_ > (UINT64_MAX >> 4)) return false;  // would overflow 64 bits
        remaining_ = remaining_ * 16 + static_cast<std::uint64_t>(digit);
        size_digits_ = true;
      } else if (!size_digits_) {
        return false;
      } else if (c == ';' || c == ' ' || c == '\t') {
        state_ = State::extension;
      } else if (c == '\r') {
        state_ = State::size_lf;
      } else {
        return false;
      }
      return true;
    }
    case State::extension:
      // Extensions are ignored (RFC 9112 §7.1.1) but still bounded, and may not hold a bare LF.
      if (c == '\r') {
        state_ = State::size_lf;
      } else if (c == '\n' || ++line_bytes_ > kMaxChunkLine) {
        return false;
      }
      return true;
    case State::size_lf:
      if (c != '\n') return false;
      line_bytes_ = 0;
      size_digits_ = false;
      if (remaining_ == 0) {
        state_ = State::trailer;
        trailer_line_empty_ = true;
      } else {
        state_ = State::data;
      }
      return true;
    case State::data_cr:
      if (c != '\r') return false;
      state_ = State::data_lf;
      return true;
    case State::data_lf:
      if (c != '\n') return false;
      state_ = State::size;
      return true;
    case State::trailer:
      // Trailer fields are read and dropped; an empty line ends the message.
      if (c == '\r') {
        state_ = State::trailer_lf;
      } else if (c == '\n' || ++line_bytes_ > kMaxChunkLine) {
        return false;
      } else {
        trailer_line_empty_ = false;
      }
      return true;
    case State::trailer_lf:
      if (c != '\n') return false;
      if (trailer_line_empty_) {
        state_ = State::done;
      } else {
        state_ = State::trailer;
        trailer_line_empty_ = true;
        line_bytes_ = 0;
      }
      return true;
    case State::data:  // decode() copies data bytes in runs
    case State::done:
      break;
  }
  return false;
  // LAB(1) STUB
  // (void)c;
  // proxy::todo_student(
  //     "TODO(student) lab 1: ChunkedDecoder::framing_byte (common/http/body_reader.cpp)");
  // LAB(1) END
}

BodyReader::BodyReader(BodyFraming framing)
    : framing_(framing),
      remaining_(framing.length),
      done_(framing.kind == BodyKind::none ||
            (framing.kind == BodyKind::content_length && framing.length == 0)) {}

BodyReader::Result BodyReader::feed(std::string_view input, std::string& out) {
  // LAB(1) BEGIN BodyReader::feed
  if (done_) return {0, true, false};
  switch (framing_.kind) {
    case BodyKind::none:
      return {0, true, false};
    case BodyKind::content_length: {
      std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, input.size()));
      out.append(input.substr(0, take));
      remaining_ -= take;
      done_ = remaining_ == 0;
      return {take, done_, false};
    }
    case BodyKind::chunked: {
      auto r = chunked_.decode(input, out);
      done_ = r.done;
      return {r.consumed, r.done, r.error};
    }
    case BodyKind::close_delimited:
      out.append(input);
      return {input.size(), false, false};
  }
  return {0, false, true};
  // LAB(1) STUB
  // (void)input;
  // (void)out;
  // proxy::todo_student("TODO(student) lab 1: BodyReader::feed (common/http/body_reader.cpp)");
  // LAB(1) END
}

bool BodyReader::complete_at_eof() const noexcept {
  return done_ || framing_.kind == BodyKind::close_delimited;
}

}  // namespace proxy
