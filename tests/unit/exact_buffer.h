// Test inputs in heap buffers of exactly their size, as picohttpparser's tests do: a parser that
// reads one byte past the end of its input touches a redzone and AddressSanitizer stops the test.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace proxy::test {

/// A private copy of `text` in a `new char[text.size()]` allocation. Move-only; view() stays
/// valid while the buffer lives.
class ExactBuffer {
 public:
  explicit ExactBuffer(std::string_view text) : size_(text.size()), bytes_(new char[text.size()]) {
    if (size_ != 0) std::memcpy(bytes_.get(), text.data(), size_);
  }

  [[nodiscard]] std::string_view view() const { return {bytes_.get(), size_}; }

 private:
  std::size_t size_;
  std::unique_ptr<char[]> bytes_;
};

/// `text` with CR, LF, HTAB and other non-printing bytes escaped, for failure messages.
inline std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u >= 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

/// What an incremental decoder produced from a whole input.
struct Decoded {
  std::string body;
  std::size_t consumed = 0;
  bool done = false;
  bool error = false;

  bool operator==(const Decoded&) const = default;
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
inline void PrintTo(const Decoded& d, std::ostream* os) {
  *os << "{body \"" << printable(d.body) << "\", consumed " << d.consumed
      << (d.done ? ", done" : "") << (d.error ? ", error" : "") << "}";
}

/// Feeds `input` to `step` (a callable taking a string_view and the body string, returning a
/// result with consumed/done/error) in the pieces that the ascending offsets `cuts` mark, each
/// piece in its own exact buffer. Stops at done or error. A decoder that is neither done nor
/// failed must take the whole piece: it has no way to hand bytes back.
template <typename Step>
Decoded feed_in_pieces(std::string_view input, const std::vector<std::size_t>& cuts, Step step) {
  Decoded decoded;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= cuts.size(); ++i) {
    const std::size_t end = i < cuts.size() ? cuts[i] : input.size();
    ExactBuffer piece(input.substr(start, end - start));
    auto result = step(piece.view(), decoded.body);
    decoded.consumed += result.consumed;
    if (result.error || result.done) {
      decoded.error = result.error;
      decoded.done = result.done;
      return decoded;
    }
    if (result.consumed != piece.view().size()) {
      ADD_FAILURE() << "decoder left " << piece.view().size() - result.consumed
                    << " bytes of an unfinished body unread at offset " << start;
    }
    start = end;
  }
  return decoded;
}

/// Cuts at every offset 1..size-1: the input fed one byte at a time.
inline std::vector<std::size_t> every_byte(std::size_t size) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < size; ++i) cuts.push_back(i);
  return cuts;
}

}  // namespace proxy::test
