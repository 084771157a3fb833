// SPDX-License-Identifier: MIT
// The checkpoint container and resume decision without LibTorch: identity, checksum, atomic
// write with a real full filesystem (a 64 KiB tmpfs in a mount namespace of its own), and the
// reclaiming of temp files that killed writers left.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "ddprun/worker/checkpoint_file.hpp"
#include "ddprun/worker/process_liveness.hpp"

namespace fs = std::filesystem;
using namespace ddp::worker;
using Action = ResumePlan::Action;

namespace {

CheckpointIdentity job() { return {"run-a", 2, "synthetic 512; seed 3", "8 tensors, crc64 0123"}; }

fs::path temp_dir() {
  char pattern[] = "/tmp/ckpt-test.XXXXXX";
  return fs::path(::mkdtemp(pattern));
}

CheckpointProbe valid(const CheckpointIdentity& identity) {
  CheckpointProbe probe;
  probe.state = CheckpointProbe::State::Valid;
  probe.header = {identity, 1, 32};
  return probe;
}

int dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST_CASE("crc64 is CRC-64/XZ") {
  CHECK(crc64("123456789") == 0x995DC9BBDF1939FAULL);  // the catalogue's check value
  CHECK(crc64("") == 0);
  CHECK(crc64("56789", crc64("1234")) == crc64("123456789"));
}

TEST_CASE("encode and decode round-trip identity, progress and payload") {
  const std::string payload("PK\x03\x04 zip bytes \0 and more", 27);
  const auto decoded = decode_checkpoint(encode_checkpoint({job(), 3, 96}, payload), "ck.pt");
  CHECK(decoded.payload == payload);
  CHECK(decoded.header.epoch == 3);
  CHECK(decoded.header.step == 96);
  CHECK(decoded.header.identity.run_id == "run-a");
  CHECK(decoded.header.identity.world_size == 2);
  CHECK(decoded.header.identity.data_fingerprint == job().data_fingerprint);
  CHECK(decoded.header.identity.model_fingerprint == job().model_fingerprint);
}

TEST_CASE("any flipped, missing or foreign byte fails the checksum or the format (defect 7)") {
  const std::string good = encode_checkpoint({job(), 1, 2}, std::string(1000, 'w'));
  for (const std::size_t at : {good.find('\n') + 5, good.size() - 1, good.size() / 2}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    CHECK_THROWS_WITH_AS(decode_checkpoint(bad, "ck.pt"), doctest::Contains("ck.pt is corrupt"),
                         CheckpointError);
  }
  CHECK_THROWS_WITH_AS(decode_checkpoint(good.substr(0, good.size() - 10), "ck.pt"),
                       doctest::Contains("truncated"), CheckpointError);
  CHECK_THROWS_WITH_AS(decode_checkpoint("PK\x03\x04...", "old.pt"),
                       doctest::Contains("old.pt is not a ddprun checkpoint"), CheckpointError);
}

TEST_CASE("a restart resumes only its own job's checkpoint (defect 1)") {
  const auto path = "checkpoints/worker.pt";
  // The default policy looks at the file only after a launcher restart.
  CHECK(plan_resume(ResumePolicy::OnRestart, 0, valid(job()), job(), path).action == Action::Fresh);
  CHECK(plan_resume(ResumePolicy::OnRestart, 1, valid(job()), job(), path).action ==
        Action::Resume);
  auto other_seed = job();
  other_seed.data_fingerprint = "synthetic 512; seed 4";
  const auto plan = plan_resume(ResumePolicy::OnRestart, 1, valid(other_seed), job(), path);
  CHECK(plan.action == Action::Fresh);
  CHECK(plan.line ==
        "checkpoints/worker.pt was written by another job (data 'synthetic 512; seed 4' "
        "(this job: 'synthetic 512; seed 3')); starting from scratch, it will be overwritten "
        "(--resume continues another run with the same data and model)");
  auto other_run = job();
  other_run.run_id = "run-b";
  CHECK(plan_resume(ResumePolicy::OnRestart, 2, valid(other_run), job(), path).action ==
        Action::Fresh);
  auto other_world = job();
  other_world.world_size = 4;
  CHECK(plan_resume(ResumePolicy::OnRestart, 1, valid(other_world), job(), path)
            .line.find("world size 4 (this job: 2)") != std::string::npos);
  // --resume: another run's file of the same data and model, on the first start too.
  CHECK(plan_resume(ResumePolicy::Always, 0, valid(other_run), job(), path).action ==
        Action::Resume);
  const auto refused = plan_resume(ResumePolicy::Always, 0, valid(other_seed), job(), path);
  CHECK(refused.action == Action::Fail);
  CHECK(refused.line.rfind("--resume: checkpoints/worker.pt does not belong to this job: data",
                           0) == 0);
  CHECK(plan_resume(ResumePolicy::Always, 0, CheckpointProbe{}, job(), path).line ==
        "no checkpoint at checkpoints/worker.pt; starting from scratch");
  // --no-resume never looks.
  CHECK(plan_resume(ResumePolicy::Never, 3, valid(job()), job(), path).action == Action::Fresh);
  // A corrupt file is never trained over silently.
  CheckpointProbe corrupt;
  corrupt.state = CheckpointProbe::State::Unreadable;
  corrupt.problem = "checkpoints/worker.pt is corrupt: checksum mismatch";
  const auto failed = plan_resume(ResumePolicy::OnRestart, 1, corrupt, job(), path);
  CHECK(failed.action == Action::Fail);
  CHECK(failed.line.find("checksum mismatch; not resuming from it") != std::string::npos);
}

TEST_CASE("atomic write: the file appears whole, no temp file stays") {
  const auto dir = temp_dir();
  const auto path = (dir / "sub" / "ck.pt").string();
  write_file_atomically(path, "first");
  write_file_atomically(path, "second");
  CHECK(read_whole_file(path) == std::optional<std::string>("second"));
  CHECK(std::distance(fs::directory_iterator(dir / "sub"), fs::directory_iterator()) == 1);
  CHECK_FALSE(read_whole_file((dir / "absent").string()).has_value());
  fs::remove_all(dir);
}

TEST_CASE(
    "a full filesystem is one CheckpointError naming ENOSPC, the temp file removed, the old file "
    "kept (defect 3)") {
  // A real 64 KiB tmpfs, in a mount namespace of the child's own.
  const auto dir = temp_dir();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) {
      ::_exit(10);
    }
    const std::string path = (dir / "ck.pt").string();
    try {
      write_file_atomically(path, "the previous checkpoint");
    } catch (...) {
      ::_exit(11);
    }
    try {
      write_file_atomically(path, std::string(200 * 1024, 'x'));
      ::_exit(12);  // should not fit
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      if (what.find("cannot write checkpoint " + path) != 0 ||
          what.find("(ENOSPC)") == std::string::npos || what.find('\n') != std::string::npos) {
        std::fprintf(stderr, "unexpected message: %s\n", e.what());
        ::_exit(13);
      }
    }
    int entries = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      ++entries;
      if (entry.path().filename() != "ck.pt") ::_exit(14);  // the temp file stayed
    }
    if (entries != 1 ||
        read_whole_file(path) != std::optional<std::string>("the previous checkpoint"))
      ::_exit(15);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  fs::remove_all(dir);
}

TEST_CASE("temp files of killed writers on this host are reclaimed, live ones kept (defect 6)") {
  const auto dir = temp_dir();
  const auto path = (dir / "ck.pt").string();
  const std::string host = this_host_name();
  const int dead = dead_pid();
  const std::vector<std::string> stale = {path + ".tmp." + host + "." + std::to_string(dead),
                                          path + ".tmp." + std::to_string(dead)};
  const std::vector<std::string> kept = {path + ".tmp." + host + "." + std::to_string(::getpid()),
                                         path + ".tmp.otherhost." + std::to_string(dead),
                                         (dir / "other.pt.tmp.1").string()};
  for (const auto& f : stale) std::ofstream(f) << "partial";
  for (const auto& f : kept) std::ofstream(f) << "partial";
  CHECK(reclaim_stale_temp_files(path) == 2);
  for (const auto& f : stale) CHECK_FALSE(fs::exists(f));
  for (const auto& f : kept) CHECK(fs::exists(f));
  fs::remove_all(dir);
}
