#include <doctest/doctest.h>
#include <fmt/format.h>

#include <random>

#include "launcher/scheduler/hostlist.hpp"
#include "launcher/scheduler/scheduler_types.hpp"

using namespace ddp::launcher::scheduler;
using Hosts = std::vector<std::string>;

TEST_CASE("hostlist: single names and plain lists") {
  CHECK(expand_hostlist("vm") == Hosts{"vm"});
  CHECK(expand_hostlist("a,b,c") == Hosts{"a", "b", "c"});
  CHECK(expand_hostlist("gpu-01.cluster") == Hosts{"gpu-01.cluster"});
}

TEST_CASE("hostlist: ranges, commas inside brackets, zero padding") {
  CHECK(expand_hostlist("n[1-2]") == Hosts{"n1", "n2"});
  CHECK(expand_hostlist("node[01-04,10]") ==
        Hosts{"node01", "node02", "node03", "node04", "node10"});
  CHECK(expand_hostlist("n[08-11]") == Hosts{"n08", "n09", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[9-11]") == Hosts{"n9", "n10", "n11"});
  CHECK(expand_hostlist("gnode[10,20,25,37]") == Hosts{"gnode10", "gnode20", "gnode25", "gnode37"});
  CHECK(expand_hostlist("n[3]") == Hosts{"n3"});
}

TEST_CASE("hostlist: suffixes after brackets and several items") {
  CHECK(expand_hostlist("a[1-2]-ib,b3") == Hosts{"a1-ib", "a2-ib", "b3"});
  CHECK(expand_hostlist("x[1,3],y[2-3],z") == Hosts{"x1", "x3", "y2", "y3", "z"});
}

TEST_CASE("hostlist: several bracket groups in one name, last group fastest") {
  CHECK(expand_hostlist("rack[1-2]-n[01-02]") ==
        Hosts{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"});
  CHECK(first_host("rack[3-4]-n[07,09]") == "rack3-n07");
}

TEST_CASE("hostlist: first host") {
  CHECK(first_host("n[1-2]") == "n1");
  CHECK(first_host("node[01-04,10]") == "node01");
  CHECK(first_host("b3,a[1-2]") == "b3");
}

TEST_CASE("hostlist: errors quote the whole list") {
  const char* bad[] = {"",        "n[1-2",  "n1-2]", "n[[1-2]]",     "n[]", "n[a-b]",
                       "n[2-1]",  "n[1-]",  "n[-3]", "a,,b",         "a,",  ",a",
                       "n[1,,2]", "n[1 2]", "n 1",   "n[0-99999999]"};
  for (const char* list : bad) {
    CAPTURE(list);
    try {
      expand_hostlist(list);
      FAIL("no error for a bad list");
    } catch (const SchedulerError& e) {
      std::string quoted = fmt::format("'{}'", list);
      CHECK(std::string(e.what()).find(quoted) != std::string::npos);
    }
  }
}

TEST_CASE("hostlist: the size cap applies across items and groups") {
  CHECK_THROWS_AS(expand_hostlist("a[0-999999]-b[0-9]"), SchedulerError);
  CHECK(expand_hostlist("a[0-999]").size() == 1000);
}

TEST_CASE("hostlist: compressed lists of random host sets expand back to the same hosts") {
  // Compress like Slurm does (runs of consecutive numbers with the same width as lo-hi inside
  // brackets, one bracket group per prefix) and check that expansion gives the original order.
  std::mt19937 rng(12345);
  for (int round = 0; round < 300; ++round) {
    CAPTURE(round);
    Hosts expected;
    std::string list;
    const int prefixes = 1 + static_cast<int>(rng() % 3);
    for (int p = 0; p < prefixes; ++p) {
      std::string prefix = fmt::format("{}{}", "abc"[p], rng() % 2 ? "node" : "gpu-");
      const int width = 1 + static_cast<int>(rng() % 4);
      int n = static_cast<int>(rng() % 5);
      std::string body;
      for (int run = 0; run < 1 + static_cast<int>(rng() % 4); ++run) {
        const int lo = n;
        const int hi = lo + static_cast<int>(rng() % 4);
        for (int i = lo; i <= hi; ++i)
          expected.push_back(fmt::format("{}{:0{}}", prefix, i, width));
        if (!body.empty()) body += ",";
        body += lo == hi ? fmt::format("{:0{}}", lo, width)
                         : fmt::format("{:0{}}-{:0{}}", lo, width, hi, width);
        n = hi + 2 + static_cast<int>(rng() % 5);  // a gap, so runs stay separate
      }
      if (!list.empty()) list += ",";
      list += fmt::format("{}[{}]", prefix, body);
    }
    CAPTURE(list);
    CHECK(expand_hostlist(list) == expected);
    CHECK(first_host(list) == expected.front());
  }
}
