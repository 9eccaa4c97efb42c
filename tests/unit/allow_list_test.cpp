// AllowList (common/server/allow_list.h): CIDR parsing and matching for `--allow`.
#include "server/allow_list.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

namespace proxy {
namespace {

TEST(AllowList, AnEmptyListAllowsEveryone) {
  AllowList list;
  EXPECT_TRUE(list.empty());
  EXPECT_TRUE(list.allows("203.0.113.9"));
  EXPECT_TRUE(list.allows("2001:db8::1"));
}

TEST(AllowList, MatchesIpv4RangesAtTheirEdges) {
  AllowList list;
  list.add("10.0.0.0/8");
  list.add("192.168.1.0/25");
  list.add("203.0.113.7");  // a single host: /32
  EXPECT_TRUE(list.allows("10.0.0.0"));
  EXPECT_TRUE(list.allows("10.255.255.255"));
  EXPECT_FALSE(list.allows("11.0.0.0"));
  EXPECT_FALSE(list.allows("9.255.255.255"));
  EXPECT_TRUE(list.allows("192.168.1.127"));
  EXPECT_FALSE(list.allows("192.168.1.128"));
  EXPECT_TRUE(list.allows("203.0.113.7"));
  EXPECT_FALSE(list.allows("203.0.113.8"));
  EXPECT_FALSE(list.allows("not an address"));
}

TEST(AllowList, IgnoresHostBitsPastThePrefix) {
  AllowList list;
  list.add("10.1.2.3/8");
  EXPECT_TRUE(list.allows("10.200.0.1"));
}

TEST(AllowList, SlashZeroAllowsEveryAddressOfItsFamily) {
  AllowList v4;
  v4.add("0.0.0.0/0");
  EXPECT_TRUE(v4.allows("198.51.100.1"));
  EXPECT_FALSE(v4.allows("2001:db8::1"));
  AllowList v6;
  v6.add("::/0");
  EXPECT_TRUE(v6.allows("2001:db8::1"));
  EXPECT_TRUE(v6.allows("198.51.100.1")) << "::/0 covers the IPv4-mapped range too";
}

TEST(AllowList, MatchesIpv6RangesAndIpv4MappedPeers) {
  AllowList list;
  list.add("fd00::/8");
  list.add("::1");
  list.add("127.0.0.0/8");
  EXPECT_TRUE(list.allows("fd12:3456::1"));
  EXPECT_FALSE(list.allows("fe80::1"));
  EXPECT_TRUE(list.allows("::1"));
  EXPECT_FALSE(list.allows("::2"));
  // A listener bound to "::" sees IPv4 clients as ::ffff:a.b.c.d.
  EXPECT_TRUE(list.allows("::ffff:127.0.0.1"));
  EXPECT_FALSE(list.allows("::ffff:10.0.0.1"));

  sockaddr_storage storage{};
  auto& in = reinterpret_cast<sockaddr_in&>(storage);
  in.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.5.5.5", &in.sin_addr);
  EXPECT_TRUE(list.allows(storage));
  ::inet_pton(AF_INET, "128.0.0.1", &in.sin_addr);
  EXPECT_FALSE(list.allows(storage));
  storage.ss_family = AF_UNIX;
  EXPECT_FALSE(list.allows(storage)) << "an unknown family is refused once a list exists";
}

TEST(AllowList, RefusesMalformedRanges) {
  for (const char* bad : {"", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8",
                          "300.1.1.1", "10.0.0", "example.com", "::1/129", "10.0.0.0/ 8",
                          "10.0.0.0/0008"}) {
    AllowList list;
    EXPECT_THROW(list.add(bad), std::invalid_argument) << bad;
    EXPECT_TRUE(list.empty()) << bad;
  }
}

}  // namespace
}  // namespace proxy
