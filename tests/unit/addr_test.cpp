#include <gtest/gtest.h>

#include "netprism/addr.hpp"

namespace netprism {
namespace {

TEST(Addr, V4IsPrintedAsDottedQuad) {
  auto a = parse_addr("10.1.2.3");
  ASSERT_TRUE(a);
  EXPECT_TRUE(is_v4_mapped(a->data()));
  EXPECT_EQ(format_addr(a->data()), "10.1.2.3");
}

TEST(Addr, V6IsRfc5952) {
  auto a = parse_addr("2001:0DB8:0000:0000:0000:0000:0000:0001");
  ASSERT_TRUE(a);
  EXPECT_EQ(format_addr(a->data()), "2001:db8::1");
  EXPECT_FALSE(is_v4_mapped(a->data()));
}

TEST(Addr, Garbage) {
  EXPECT_FALSE(parse_addr("10.1.2"));
  EXPECT_FALSE(parse_addr(""));
  EXPECT_FALSE(parse_addr("::g"));
}

}  // namespace
}  // namespace netprism
