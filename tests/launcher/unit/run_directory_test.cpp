// SPDX-License-Identifier: MIT
#include "launcher/run/run_directory.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

using ddp::launcher::kRunDirNameMax;
using ddp::launcher::run_dir_name;
using ddp::launcher::RunDirectory;

TEST_CASE("run_dir_name: a short id keeps its sanitised self") {
  CHECK(run_dir_name("team/exp1") == "team_exp1");
  CHECK(run_dir_name("job-1.a_b") == "job-1.a_b");
}

TEST_CASE("run_dir_name: a long id is bounded and long ids that share a head stay apart") {
  const std::string a(300, 'x');
  const std::string b = std::string(299, 'x') + "y";
  CHECK(run_dir_name(a).size() <= kRunDirNameMax);
  CHECK(run_dir_name(a).rfind(std::string(64, 'x'), 0) == 0);
  CHECK(run_dir_name(a) != run_dir_name(b));
  std::string cjk;
  for (int i = 0; i < 84; ++i) cjk += "\xe5\xad\x97";  // 84 x U+5B57, 252 bytes
  CHECK(run_dir_name(cjk).size() <= kRunDirNameMax);
}

TEST_CASE("RunDirectory: any id names one directory below --log_dir") {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("ddprun-rundir-test-" + std::to_string(::getpid()));
  for (std::size_t n : {200, 249, 256, 1000}) {
    auto dir = RunDirectory::create(root.string(), std::string(n, 'x'), true);
    REQUIRE_MESSAGE(dir, "id of " << n << " bytes");
    CHECK(fs::is_directory(dir->path()));
    CHECK(fs::path(dir->path()).parent_path() == root);
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}
