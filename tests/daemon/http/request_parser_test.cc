// RequestParser (daemon/http/request_parser.h): requests out of bytes, fed
// whole and byte by byte, pipelined, and every limit with its status.
#include "daemon/http/request_parser.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace minfer::daemon::http {
namespace {

using Event = RequestParser::Event;

// Feeds `bytes` in pieces of `step` (0: whole), answering kHeaders by going
// on; returns the requests, and the error status (0: none) in *error.
std::vector<HttpRequest> FeedAll(RequestParser& p, std::string bytes, size_t step, int* error) {
  std::vector<HttpRequest> out;
  *error = 0;
  std::string pending;
  size_t pos = 0;
  while (pos < bytes.size() || !pending.empty()) {
    if (pos < bytes.size()) {
      const size_t n = step == 0 ? bytes.size() - pos : std::min(step, bytes.size() - pos);
      pending.append(bytes, pos, n);
      pos += n;
    }
    for (;;) {
      if (pending.empty()) break;
      const RequestParser::Result r = p.Feed(pending);
      pending.erase(0, r.consumed);
      if (r.event == Event::kError) {
        *error = p.error_status();
        return out;
      }
      if (r.event == Event::kRequest) out.push_back(p.TakeRequest());
      if (r.event == Event::kNeedMore) break;
    }
    if (pos >= bytes.size() && !pending.empty()) {
      // Stuck: more bytes than requests (cannot happen with kNeedMore
      // consuming everything).
      ADD_FAILURE() << "unconsumed: " << pending;
      break;
    }
  }
  return out;
}

TEST(RequestParserTest, ParsesARequestWholeAndByteByByte) {
  const std::string req =
      "POST /v1/models/a%2Fb?x=1 HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
      "Content-Length: 7\r\nAuthorization: Bearer k\r\n\r\n{\"a\":1}";
  for (size_t step : {size_t{0}, size_t{1}, size_t{5}}) {
    RequestParser p({});
    int error = 0;
    std::vector<HttpRequest> rs = FeedAll(p, req, step, &error);
    ASSERT_EQ(error, 0);
    ASSERT_EQ(rs.size(), 1u) << "step " << step;
    EXPECT_EQ(rs[0].method, "POST");
    EXPECT_EQ(rs[0].target, "/v1/models/a%2Fb?x=1");
    EXPECT_EQ(rs[0].path, "/v1/models/a/b");
    EXPECT_EQ(rs[0].query, "x=1");
    EXPECT_EQ(rs[0].body, "{\"a\":1}");
    EXPECT_EQ(rs[0].content_length, 7);
    EXPECT_TRUE(rs[0].keep_alive);
    ASSERT_NE(rs[0].Header("authorization"), nullptr);
    EXPECT_EQ(*rs[0].Header("AUTHORIZATION"), "Bearer k");
    EXPECT_EQ(rs[0].Header("X-None"), nullptr);
    EXPECT_EQ(rs[0].headers.size(), 4u);
  }
}

TEST(RequestParserTest, StopsAfterTheHeadAndAfterEachRequest) {
  RequestParser p({});
  std::string data =
      "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\r\n"
      "GET /c HTTP/1.0\r\n\r\n";
  RequestParser::Result r = p.Feed(data);
  EXPECT_EQ(r.event, Event::kHeaders);
  EXPECT_EQ(p.head().path, "/a");
  EXPECT_TRUE(p.in_body());
  data.erase(0, r.consumed);
  r = p.Feed(data);
  ASSERT_EQ(r.event, Event::kRequest);
  HttpRequest a = p.TakeRequest();
  EXPECT_EQ(a.body, "abc");
  data.erase(0, r.consumed);
  EXPECT_EQ(data.substr(0, 6), "GET /b");  // the pipelined rest waits
  std::vector<std::string> paths;
  while (!data.empty()) {
    r = p.Feed(data);
    data.erase(0, r.consumed);
    ASSERT_NE(r.event, Event::kError);
    if (r.event == Event::kRequest) paths.push_back(p.TakeRequest().path);
  }
  EXPECT_THAT(paths, ::testing::ElementsAre("/b", "/c"));
}

TEST(RequestParserTest, ChunkedBodiesAndKeepAliveRules) {
  RequestParser p({});
  int error = 0;
  auto rs = FeedAll(p,
                    "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n"
                    "0\r\n\r\nGET /y HTTP/1.1\r\nConnection: close\r\n\r\n"
                    "GET /z HTTP/1.0\r\n\r\nGET /w HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                    3, &error);
  ASSERT_EQ(error, 0);
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs[0].body, "abcde");
  EXPECT_TRUE(rs[0].chunked);
  EXPECT_TRUE(rs[0].keep_alive);
  EXPECT_FALSE(rs[1].keep_alive);
  EXPECT_FALSE(rs[2].keep_alive);
  EXPECT_EQ(rs[2].version_minor, 0);
  EXPECT_TRUE(rs[3].keep_alive);
}

struct LimitCase {
  const char* name;
  std::string bytes;
  int status;
};

TEST(RequestParserTest, EveryLimitHasItsStatus) {
  HttpLimits l;
  l.max_target_bytes = 100;
  l.max_header_bytes = 1000;
  l.max_headers = 10;
  l.max_body_bytes = 50;
  std::string many_headers = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 11; ++i) many_headers += "X-A: b\r\n";
  const std::vector<LimitCase> cases = {
      {"target", "GET /" + std::string(200, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"header count", many_headers + "\r\n", 431},
      {"header bytes", "GET / HTTP/1.1\r\nX-Big: " + std::string(1200, 'v') + "\r\n\r\n", 431},
      {"content-length over the cap", "POST / HTTP/1.1\r\nContent-Length: 51\r\n\r\n", 413},
      {"content-length 1e20", "POST / HTTP/1.1\r\nContent-Length: 1e20\r\n\r\n", 400},
      {"content-length -5", "POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400},
      {"content-length overflow",
       "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400},
      {"chunked body over the cap",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + std::string(64, 'x') +
           "\r\n0\r\n\r\n",
       413},
      {"smuggling: length and chunked",
       "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"not HTTP (a TLS ClientHello)", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 501},
      {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 501},
      {"CONNECT", "CONNECT a:443 HTTP/1.1\r\n\r\n", 501},
      {"an Expect it cannot meet", "POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n",
       417},
  };
  for (const LimitCase& c : cases) {
    for (size_t step : {size_t{0}, size_t{7}}) {
      RequestParser p(l);
      int error = 0;
      auto rs = FeedAll(p, c.bytes, step, &error);
      EXPECT_EQ(error, c.status) << c.name << " (step " << step << "): " << p.error_message();
      EXPECT_TRUE(rs.empty()) << c.name;
      EXPECT_FALSE(p.error_message().empty()) << c.name;
      // Sticky.
      EXPECT_EQ(p.Feed("GET / HTTP/1.1\r\n\r\n").event, Event::kError);
    }
  }
}

TEST(RequestParserTest, TheCapsHoldExactlyAtTheirFigure) {
  HttpLimits l;
  l.max_headers = 3;
  l.max_header_bytes = 30;
  l.max_body_bytes = 4;
  RequestParser p(l);
  int error = 0;
  // 3 fields, 10 + 10 + 10 = 30 bytes of names and values; a 4-byte body.
  auto rs = FeedAll(p,
                    "POST / HTTP/1.1\r\nAaaaa: bbbbb\r\nCcccc: ddddd\r\nContent-Length: 4\r\n\r\n"
                    "abcd",
                    0, &error);
  // "Content-Length" + "4" is 15 bytes: 35 in all, over 30.
  EXPECT_EQ(error, 431);
  l.max_header_bytes = 35;
  RequestParser q(l);
  rs = FeedAll(q,
               "POST / HTTP/1.1\r\nAaaaa: bbbbb\r\nCcccc: ddddd\r\nContent-Length: 4\r\n\r\nabcd", 0,
               &error);
  EXPECT_EQ(error, 0);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].body, "abcd");
}

TEST(RequestParserTest, EndOfStreamMidRequestIsAnErrorBetweenRequestsIsNot) {
  RequestParser p({});
  EXPECT_EQ(p.Feed("").event, Event::kNeedMore);
  RequestParser::Result r = p.Feed("GET / HTTP/1.1\r\nHo");
  EXPECT_EQ(r.event, Event::kNeedMore);
  EXPECT_TRUE(p.in_request());
  EXPECT_EQ(p.Feed("").event, Event::kError);
  EXPECT_EQ(p.error_status(), 400);
}

TEST(RequestParserTest, ExpectContinueIsReported) {
  RequestParser p({});
  RequestParser::Result r =
      p.Feed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_EQ(r.event, Event::kHeaders);
  EXPECT_TRUE(p.head().expect_continue);
}

}  // namespace
}  // namespace minfer::daemon::http
