// Body framing and the incremental decoders (common/http/body_reader.h). Every input sits in an
// exactly-sized heap buffer, and every decoder case is fed whole, split in two at every byte
// boundary, and one byte at a time: a read arrives in whatever pieces the network chose.
#include "http/body_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "exact_buffer.h"

namespace proxy {
namespace {

using namespace std::string_view_literals;
using test::Decoded;
using test::every_byte;
using test::ExactBuffer;
using test::feed_in_pieces;
using test::printable;

Decoded decode_chunked(std::string_view input, const std::vector<std::size_t>& cuts) {
  ChunkedDecoder decoder;
  return feed_in_pieces(input, cuts, [&](std::string_view piece, std::string& out) {
    return decoder.decode(piece, out);
  });
}

Decoded read_body(BodyFraming framing, std::string_view input,
                  const std::vector<std::size_t>& cuts) {
  BodyReader reader(framing);
  return feed_in_pieces(input, cuts, [&](std::string_view piece, std::string& out) {
    return reader.feed(piece, out);
  });
}

// Feeding `input` split in two at every boundary, and byte by byte, gives what feeding it whole
// gives. `decode` is decode_chunked or a read_body with its framing bound.
template <typename Decode>
void expect_same_result_however_split(std::string_view input, Decode decode) {
  const Decoded whole = decode(input, {});
  for (std::size_t cut = 1; cut < input.size(); ++cut) {
    EXPECT_EQ(decode(input, {cut}), whole) << "split at byte " << cut;
  }
  EXPECT_EQ(decode(input, every_byte(input.size())), whole) << "fed one byte at a time";
}

// ---- ChunkedDecoder: one line per case --------------------------------------------------------

enum class Ends { done, needs_more, error };

struct ChunkedCase {
  const char* name;
  std::string_view input;
  Ends ends;
  std::string_view body;  // checked unless the case ends in error
  std::size_t unread;     // bytes after the body that belong to the next message
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const ChunkedCase& c, std::ostream* os) {
  *os << c.name << ": " << printable(c.input);
}

// clang-format off
constexpr ChunkedCase kChunkedCases[] = {
    {"OneChunk", "5\r\nhello\r\n0\r\n\r\n", Ends::done, "hello", 0},
    {"TwoChunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", Ends::done, "hello world", 0},
    {"UpperCaseHexSize", "A\r\n0123456789\r\n0\r\n\r\n", Ends::done, "0123456789", 0},
    {"LowerCaseHexSize", "a\r\n0123456789\r\n0\r\n\r\n", Ends::done, "0123456789", 0},
    {"LeadingZerosInSize", "005\r\nhello\r\n000\r\n\r\n", Ends::done, "hello", 0},
    {"ExtensionsIgnored", "5;name=value\r\nhello\r\n0;last\r\n\r\n", Ends::done, "hello", 0},
    {"QuotedExtensionIgnored", "5;a=\"b;c\"\r\nhello\r\n0\r\n\r\n", Ends::done, "hello", 0},
    {"WhitespaceBeforeExtension", "5 ;x\r\nhello\r\n0\t;y\r\n\r\n", Ends::done, "hello", 0},
    {"TrailersDropped", "5\r\nhello\r\n0\r\nExpires: never\r\nX-Sum: 1\r\n\r\n", Ends::done, "hello", 0},
    {"EmptyBody", "0\r\n\r\n", Ends::done, "", 0},
    {"DataHoldingCrlf", "4\r\n\r\n\r\n\r\n0\r\n\r\n", Ends::done, "\r\n\r\n", 0},
    {"BinaryData", "3\r\n\000\377\n\r\n0\r\n\r\n"sv, Ends::done, "\000\377\n"sv, 0},
    {"NextMessageLeftUnread", "1\r\nx\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", Ends::done, "x", 17},
    {"MissingLastChunk", "5\r\nhello\r\n", Ends::needs_more, "hello", 0},
    {"MissingFinalCrlf", "5\r\nhello\r\n0\r\n", Ends::needs_more, "hello", 0},
    {"InsideTrailers", "0\r\nX: 1\r\n", Ends::needs_more, "", 0},
    {"LargestSizeAccepted", "FFFFFFFFFFFFFFFF\r\nabc", Ends::needs_more, "abc", 0},
    {"NonHexSizeIsError", "x\r\nhello\r\n0\r\n\r\n", Ends::error, "", 0},
    {"EmptySizeLineIsError", "\r\nhello\r\n0\r\n\r\n", Ends::error, "", 0},
    {"ExtensionWithoutSizeIsError", ";a\r\n", Ends::error, "", 0},
    {"NegativeSizeIsError", "-5\r\nhello\r\n", Ends::error, "", 0},
    {"HexPrefixIsError", "0x5\r\nhello\r\n", Ends::error, "", 0},
    {"BareLfAfterSizeIsError", "5\nhello\r\n0\r\n\r\n", Ends::error, "", 0},
    {"BareCrAfterSizeIsError", "5\rhello\r\n0\r\n\r\n", Ends::error, "", 0},
    {"BareLfInExtensionIsError", "5;a\nhello\r\n0\r\n\r\n", Ends::error, "", 0},
    {"MissingCrlfAfterDataIsError", "5\r\nhelloX\r\n0\r\n\r\n", Ends::error, "", 0},
    {"DataLongerThanSizeIsError", "3\r\nhello\r\n0\r\n\r\n", Ends::error, "", 0},
    {"LfOnlyAfterDataIsError", "5\r\nhello\n0\r\n\r\n", Ends::error, "", 0},
    {"CrWithoutLfAfterDataIsError", "5\r\nhello\rX0\r\n\r\n", Ends::error, "", 0},
    {"SizeOverflowIsError", "10000000000000000\r\n", Ends::error, "", 0},
    {"SizeOverflowInLastDigitIsError", "FFFFFFFFFFFFFFFF0\r\n", Ends::error, "", 0},
    {"BareLfInTrailerIsError", "0\r\nX: y\n\r\n", Ends::error, "", 0},
    {"BareCrInTrailerIsError", "0\r\nX: y\rz\r\n\r\n", Ends::error, "", 0},
    {"BareLfEndsTrailerSectionIsError", "0\r\n\n", Ends::error, "", 0},
};
// clang-format on

class ChunkedTable : public ::testing::TestWithParam<ChunkedCase> {};

void expect_case(const ChunkedCase& c, const Decoded& whole) {
  EXPECT_EQ(whole.done, c.ends == Ends::done);
  EXPECT_EQ(whole.error, c.ends == Ends::error);
  if (c.ends != Ends::error) {
    EXPECT_EQ(whole.body, c.body);
    EXPECT_EQ(whole.consumed, c.input.size() - c.unread);
  }
}

TEST_P(ChunkedTable, DecoderGivesTheExpectedBody) {
  expect_case(GetParam(), decode_chunked(GetParam().input, {}));
}

TEST_P(ChunkedTable, DecoderGivesTheSameResultHoweverTheInputIsSplit) {
  expect_same_result_however_split(GetParam().input, decode_chunked);
}

TEST_P(ChunkedTable, BodyReaderGivesTheSameResultsAsTheDecoder) {
  auto read_chunked = [](std::string_view input, const std::vector<std::size_t>& cuts) {
    return read_body({BodyKind::chunked, 0}, input, cuts);
  };
  expect_case(GetParam(), read_chunked(GetParam().input, {}));
  expect_same_result_however_split(GetParam().input, read_chunked);
}

INSTANTIATE_TEST_SUITE_P(Cases, ChunkedTable, ::testing::ValuesIn(kChunkedCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- ChunkedDecoder: bounds and calls after the end -------------------------------------------

TEST(ChunkedDecoder, OverlongExtensionIsError) {
  const std::string input = "5;" + std::string(5000, 'a') + "\r\nhello\r\n0\r\n\r\n";
  EXPECT_TRUE(decode_chunked(input, {}).error);
  EXPECT_TRUE(decode_chunked(input, every_byte(input.size())).error);
}

TEST(ChunkedDecoder, OverlongTrailerLineIsError) {
  const std::string input = "0\r\nX: " + std::string(5000, 'a') + "\r\n\r\n";
  EXPECT_TRUE(decode_chunked(input, {}).error);
}

TEST(ChunkedDecoder, ManyShortTrailerLinesAreFine) {
  std::string input = "1\r\nx\r\n0\r\n";
  for (int i = 0; i < 100; ++i)
    input += "X-Line-" + std::to_string(i) + ": " + std::string(60, 'v') + "\r\n";
  input += "\r\n";
  const Decoded decoded = decode_chunked(input, {});
  EXPECT_TRUE(decoded.done);
  EXPECT_FALSE(decoded.error);
  EXPECT_EQ(decoded.body, "x");
}

TEST(ChunkedDecoder, EmptyInputMakesNoProgress) {
  ChunkedDecoder decoder;
  std::string out;
  ExactBuffer empty("");
  ChunkedDecoder::Result r = decoder.decode(empty.view(), out);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_FALSE(r.done);
  EXPECT_FALSE(r.error);
  ExactBuffer rest("1\r\nx\r\n0\r\n\r\n");
  r = decoder.decode(rest.view(), out);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(out, "x");
}

TEST(ChunkedDecoder, AfterTheLastChunkConsumesNothingMore) {
  ChunkedDecoder decoder;
  std::string out;
  ExactBuffer body("2\r\nhi\r\n0\r\n\r\n");
  ASSERT_TRUE(decoder.decode(body.view(), out).done);
  ExactBuffer next("3\r\nabc\r\n");
  ChunkedDecoder::Result r = decoder.decode(next.view(), out);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(out, "hi");
}

// ---- BodyReader for the other framings ---------------------------------------------------------

TEST(BodyReader, ContentLengthTakesExactlyThatManyBytesHoweverSplit) {
  constexpr std::string_view kInput = "helloHTTP/1.1 200 OK\r\n";
  auto read = [](std::string_view input, const std::vector<std::size_t>& cuts) {
    return read_body({BodyKind::content_length, 5}, input, cuts);
  };
  const Decoded whole = read(kInput, {});
  EXPECT_EQ(whole, (Decoded{"hello", 5, true, false}));
  expect_same_result_however_split(kInput, read);
}

TEST(BodyReader, ContentLengthCutShortIsNotCompleteAtEof) {
  BodyReader reader({BodyKind::content_length, 5});
  std::string out;
  ExactBuffer part("hel");
  BodyReader::Result r = reader.feed(part.view(), out);
  EXPECT_EQ(r.consumed, 3u);
  EXPECT_FALSE(r.done);
  EXPECT_FALSE(reader.done());
  EXPECT_FALSE(reader.complete_at_eof());
  ExactBuffer rest("lo");
  r = reader.feed(rest.view(), out);
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(reader.complete_at_eof());
  EXPECT_EQ(out, "hello");
}

TEST(BodyReader, ZeroContentLengthIsDoneBeforeAnyInput) {
  BodyReader reader({BodyKind::content_length, 0});
  EXPECT_TRUE(reader.done());
  EXPECT_TRUE(reader.complete_at_eof());
  std::string out;
  ExactBuffer next("GET / HTTP/1.1\r\n");
  BodyReader::Result r = reader.feed(next.view(), out);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(out, "");
}

TEST(BodyReader, NoBodyIsDoneAndTakesNothing) {
  BodyReader reader({BodyKind::none, 0});
  EXPECT_TRUE(reader.done());
  EXPECT_TRUE(reader.complete_at_eof());
  std::string out;
  ExactBuffer next("HTTP/1.1 200 OK\r\n");
  BodyReader::Result r = reader.feed(next.view(), out);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_TRUE(r.done);
  EXPECT_FALSE(r.error);
  EXPECT_EQ(out, "");
}

TEST(BodyReader, CloseDelimitedTakesEverythingAndEndsOnlyAtEof) {
  constexpr std::string_view kInput = "all of this\r\n0\r\n\r\nuntil the origin closes";
  auto read = [](std::string_view input, const std::vector<std::size_t>& cuts) {
    return read_body({BodyKind::close_delimited, 0}, input, cuts);
  };
  EXPECT_EQ(read(kInput, {}), (Decoded{std::string(kInput), kInput.size(), false, false}));
  expect_same_result_however_split(kInput, read);

  BodyReader reader({BodyKind::close_delimited, 0});
  EXPECT_FALSE(reader.done());
  EXPECT_TRUE(reader.complete_at_eof());
}

TEST(BodyReader, ChunkedIsCompleteAtEofOnlyAfterTheLastChunk) {
  BodyReader reader({BodyKind::chunked, 0});
  std::string out;
  ExactBuffer first("5\r\nhello\r\n");
  reader.feed(first.view(), out);
  EXPECT_FALSE(reader.complete_at_eof());
  ExactBuffer last("0\r\n\r\n");
  EXPECT_TRUE(reader.feed(last.view(), out).done);
  EXPECT_TRUE(reader.complete_at_eof());
  EXPECT_EQ(out, "hello");
}

TEST(BodyReader, ChunkedErrorIsReported) {
  BodyReader reader({BodyKind::chunked, 0});
  std::string out;
  ExactBuffer bad("5\r\nhelloXX");
  BodyReader::Result r = reader.feed(bad.view(), out);
  EXPECT_TRUE(r.error);
  EXPECT_FALSE(reader.done());
  EXPECT_FALSE(reader.complete_at_eof());
}

TEST(BodyReader, HugeContentLengthDoesNotOverflow) {
  BodyReader reader({BodyKind::content_length, UINT64_MAX});
  std::string out;
  ExactBuffer some("abc");
  BodyReader::Result r = reader.feed(some.view(), out);
  EXPECT_EQ(r.consumed, 3u);
  EXPECT_FALSE(r.done);
  EXPECT_EQ(reader.framing().length, UINT64_MAX);
}

// ---- response_body_framing and request_body_framing: one line per case ------------------------

std::string describe(const std::optional<BodyFraming>& framing) {
  if (!framing) return "invalid";
  switch (framing->kind) {
    case BodyKind::none:
      return "none";
    case BodyKind::content_length:
      return "content_length " + std::to_string(framing->length);
    case BodyKind::chunked:
      return "chunked";
    case BodyKind::close_delimited:
      return "close_delimited";
  }
  return "?";
}

struct ResponseFramingCase {
  const char* name;
  int status;
  const char* method;
  HeaderFields fields;
  const char* expected;
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const ResponseFramingCase& c, std::ostream* os) {
  *os << c.name;
}

// clang-format off
std::vector<ResponseFramingCase> response_framing_cases() {
  return {
    {"HeadResponseHasNoBody", 200, "HEAD", {{"Content-Length", "5"}}, "none"},
    {"HeadResponseIgnoresChunked", 200, "HEAD", {{"Transfer-Encoding", "chunked"}}, "none"},
    {"NoContentHasNoBody", 204, "GET", {{"Content-Length", "5"}}, "none"},
    {"NotModifiedHasNoBody", 304, "GET", {{"Content-Length", "10"}}, "none"},
    {"ContinueHasNoBody", 100, "GET", {}, "none"},
    {"SwitchingProtocolsHasNoBody", 101, "GET", {{"Content-Length", "3"}}, "none"},
    {"Informational199HasNoBody", 199, "GET", {}, "none"},
    {"OkWithContentLength", 200, "GET", {{"Content-Length", "5"}}, "content_length 5"},
    {"LowerCaseFieldName", 200, "GET", {{"content-length", "7"}}, "content_length 7"},
    {"ZeroContentLength", 200, "GET", {{"Content-Length", "0"}}, "content_length 0"},
    {"ErrorStatusWithContentLength", 404, "GET", {{"Content-Length", "9"}}, "content_length 9"},
    {"NineteenDigitLength", 200, "GET", {{"Content-Length", "9999999999999999999"}}, "content_length 9999999999999999999"},
    {"NoFramingIsCloseDelimited", 200, "GET", {}, "close_delimited"},
    {"Chunked", 200, "GET", {{"Transfer-Encoding", "chunked"}}, "chunked"},
    {"ChunkedIsCaseInsensitive", 200, "GET", {{"Transfer-Encoding", "Chunked"}}, "chunked"},
    {"GzipThenChunkedIsInvalidWeDecodeOnlyChunked", 200, "GET", {{"Transfer-Encoding", "gzip, chunked"}}, "invalid"},
    {"CodingsAcrossTwoFieldsAreInvalid", 200, "GET", {{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}}, "invalid"},
    {"ChunkedTwiceIsInvalid", 200, "GET", {{"Transfer-Encoding", "chunked, chunked"}}, "invalid"},
    {"ChunkedNotLastIsInvalid", 200, "GET", {{"Transfer-Encoding", "chunked, gzip"}}, "invalid"},
    {"TransferEncodingWinsOverContentLength", 200, "GET", {{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}, "chunked"},
    {"DuplicateEqualListIsOk", 200, "GET", {{"Content-Length", "5, 5"}}, "content_length 5"},
    {"RepeatedEqualFieldsAreOk", 200, "GET", {{"Content-Length", "5"}, {"Content-Length", "5"}}, "content_length 5"},
    {"DifferingListIsInvalid", 200, "GET", {{"Content-Length", "5, 6"}}, "invalid"},
    {"DifferingFieldsAreInvalid", 200, "GET", {{"Content-Length", "5"}, {"Content-Length", "6"}}, "invalid"},
    {"NonNumericIsInvalid", 200, "GET", {{"Content-Length", "abc"}}, "invalid"},
    {"NegativeIsInvalid", 200, "GET", {{"Content-Length", "-1"}}, "invalid"},
    {"PlusSignIsInvalid", 200, "GET", {{"Content-Length", "+5"}}, "invalid"},
    {"HexIsInvalid", 200, "GET", {{"Content-Length", "0x5"}}, "invalid"},
    {"DecimalPointIsInvalid", 200, "GET", {{"Content-Length", "5.0"}}, "invalid"},
    {"TrailingJunkIsInvalid", 200, "GET", {{"Content-Length", "5x"}}, "invalid"},
    {"EmptyIsInvalid", 200, "GET", {{"Content-Length", ""}}, "invalid"},
    {"OverflowIsInvalid", 200, "GET", {{"Content-Length", "99999999999999999999"}}, "invalid"},
  };
}
// clang-format on

class ResponseFramingTable : public ::testing::TestWithParam<ResponseFramingCase> {};

TEST_P(ResponseFramingTable, GivesTheExpectedFraming) {
  ResponseHead head;
  head.status = GetParam().status;
  head.fields = GetParam().fields;
  EXPECT_EQ(describe(response_body_framing(head, GetParam().method)), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Cases, ResponseFramingTable, ::testing::ValuesIn(response_framing_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

struct RequestFramingCase {
  const char* name;
  HeaderFields fields;
  const char* expected;
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const RequestFramingCase& c, std::ostream* os) {
  *os << c.name;
}

// clang-format off
std::vector<RequestFramingCase> request_framing_cases() {
  return {
    {"NoFramingHasNoBody", {}, "none"},
    {"ZeroLengthHasNoBody", {{"Content-Length", "0"}}, "none"},
    {"ContentLength", {{"Content-Length", "12"}}, "content_length 12"},
    {"Chunked", {{"Transfer-Encoding", "chunked"}}, "chunked"},
    {"ChunkedIsCaseInsensitive", {{"transfer-encoding", "CHUNKED"}}, "chunked"},
    {"GzipThenChunkedIsInvalid", {{"Transfer-Encoding", "gzip, chunked"}}, "invalid"},
    {"ChunkedTwiceIsInvalid", {{"Transfer-Encoding", "chunked, chunked"}}, "invalid"},
    {"DuplicateEqualListIsOk", {{"Content-Length", "5, 5"}}, "content_length 5"},
    {"RepeatedEqualFieldsAreOk", {{"Content-Length", "5"}, {"Content-Length", "5"}}, "content_length 5"},
    {"TransferEncodingWithContentLengthIsInvalid", {{"Transfer-Encoding", "chunked"}, {"Content-Length", "5"}}, "invalid"},
    {"ContentLengthThenTransferEncodingIsInvalid", {{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}, "invalid"},
    {"TransferEncodingWithZeroLengthIsInvalid", {{"Transfer-Encoding", "chunked"}, {"Content-Length", "0"}}, "invalid"},
    {"TransferEncodingWithBadLengthIsInvalid", {{"Transfer-Encoding", "chunked"}, {"Content-Length", "x"}}, "invalid"},
    {"GzipOnlyIsInvalid", {{"Transfer-Encoding", "gzip"}}, "invalid"},
    {"ChunkedThenGzipIsInvalid", {{"Transfer-Encoding", "chunked, gzip"}}, "invalid"},
    {"ChunkedThenGzipFieldIsInvalid", {{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "gzip"}}, "invalid"},
    {"EmptyTransferEncodingIsInvalid", {{"Transfer-Encoding", ""}}, "invalid"},
    {"DifferingListIsInvalid", {{"Content-Length", "5, 6"}}, "invalid"},
    {"DifferingFieldsAreInvalid", {{"Content-Length", "5"}, {"Content-Length", "6"}}, "invalid"},
    {"NonNumericIsInvalid", {{"Content-Length", "five"}}, "invalid"},
    {"NegativeIsInvalid", {{"Content-Length", "-5"}}, "invalid"},
    {"EmptyIsInvalid", {{"Content-Length", ""}}, "invalid"},
  };
}
// clang-format on

class RequestFramingTable : public ::testing::TestWithParam<RequestFramingCase> {};

TEST_P(RequestFramingTable, GivesTheExpectedFraming) {
  Request request;
  request.method = "POST";
  request.target = "http://example.com/";
  request.fields = GetParam().fields;
  EXPECT_EQ(describe(request_body_framing(request)), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Cases, RequestFramingTable, ::testing::ValuesIn(request_framing_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace proxy
