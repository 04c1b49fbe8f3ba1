// Loads every compiled BPF object into the running kernel (open + load, then destroy): the verifier is the
// judge of the probe's C, so this runs on every build.
#include <bpf/libbpf.h>

#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "support/privileged.hpp"

#ifndef NETPRISM_BPF_OBJECTS
#error "NETPRISM_BPF_OBJECTS must list the compiled .bpf.o files"
#endif

namespace {

struct ObjectCloser {
  void operator()(bpf_object* o) const { bpf_object__close(o); }
};

std::vector<std::string> objects() {
  std::vector<std::string> out;
  std::stringstream ss(NETPRISM_BPF_OBJECTS);
  for (std::string s; std::getline(ss, s, ';');)
    if (!s.empty()) out.push_back(s);
  return out;
}

TEST(BpfLoad, EveryObjectLoadsInTheKernel) {
  NP_REQUIRE_ROOT();
  auto objs = objects();
  ASSERT_FALSE(objs.empty());
  for (const auto& path : objs) {
    SCOPED_TRACE(path);
    std::unique_ptr<bpf_object, ObjectCloser> obj(bpf_object__open_file(path.c_str(), nullptr));
    ASSERT_TRUE(obj) << "open failed: " << path;
    int err = bpf_object__load(obj.get());
    EXPECT_EQ(err, 0) << "the kernel refused " << path << " (errno " << -err << ")";
    int progs = 0;
    bpf_program* p;
    bpf_object__for_each_program(p, obj.get()) {
      EXPECT_GE(bpf_program__fd(p), 0) << bpf_program__name(p);
      ++progs;
    }
    EXPECT_GT(progs, 0);
  }
}

}  // namespace
