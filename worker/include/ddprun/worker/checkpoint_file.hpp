// SPDX-License-Identifier: MIT
#pragma once
/// The checkpoint file without LibTorch: its container (who wrote it, a checksum), the decision
/// whether a job resumes from it, the atomic write and the clean-up of temporary files that
/// killed runs left. checkpoint.hpp puts the LibTorch archive inside; this part is unit-tested
/// on its own.
///
/// Layout (version 1):
///   "DDPRUN-CHECKPOINT 1 <crc64, 16 hex digits> <header bytes> <payload bytes>\n"
///   <header: one JSON object: identity, epoch, step>
///   <payload: the LibTorch archive (a zip)>
/// The CRC-64 (ECMA-182) covers header and payload: any flipped or missing byte fails it.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddp::worker {

/// Which job wrote a checkpoint. A restart resumes only a checkpoint whose identity equals its
/// own; `--resume` (ResumePolicy::Always) accepts another run id but still needs the rest.
struct CheckpointIdentity {
  std::string run_id;  ///< TORCHELASTIC_RUN_ID ("none" under a static rendezvous).
  int world_size = 1;
  std::string data_fingerprint;  ///< The caller's: data source, size, content digest, seed.
  std::string
      model_fingerprint;  ///< Parameter and buffer names, shapes, dtypes (model_fingerprint()).
};

struct CheckpointHeader {
  CheckpointIdentity identity;
  std::int64_t epoch = 0;  ///< Epochs completed.
  std::int64_t step = 0;   ///< Optimizer steps taken.
};

/// A checkpoint that cannot be read back: what() is one line naming the file and the reason.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// CRC-64/ECMA-182 (as xz), continuing from `crc` (0 to start).
std::uint64_t crc64(std::string_view data, std::uint64_t crc = 0);

std::string encode_checkpoint(const CheckpointHeader& header, std::string_view payload);

struct DecodedCheckpoint {
  CheckpointHeader header;
  std::string payload;
};
/// Throws CheckpointError("<what>: ...") for a file that is not a checkpoint of this format,
/// is truncated, or fails its checksum. `what` names the file in the message.
DecodedCheckpoint decode_checkpoint(std::string bytes, const std::string& what);

/// The first field in which `file` differs from `job`, as "run id 'a' (this job: 'b')";
/// std::nullopt when they match. `ignore_run_id`: --resume continues another run's checkpoint.
std::optional<std::string> identity_mismatch(const CheckpointIdentity& file,
                                             const CheckpointIdentity& job, bool ignore_run_id);

/// When a job looks at its checkpoint: OnRestart (the default) only when the launcher restarted
/// it (TORCHELASTIC_RESTART_COUNT > 0) and only its own job's file; Always (--resume) on every
/// start, from any run with the same world size, data and model; Never (--no-resume).
enum class ResumePolicy { OnRestart, Always, Never };

/// What rank 0 found at the checkpoint path.
struct CheckpointProbe {
  enum class State { Missing, Unreadable, Valid } state = State::Missing;
  std::string problem;      ///< Unreadable: why (one line, names the file).
  CheckpointHeader header;  ///< Valid.
};

/// The decision every rank follows. Fresh: start from scratch (`line`, when not empty, says why
/// a file was ignored); Resume: load the file; Fail: stop with `line` as the error.
struct ResumePlan {
  enum class Action { Fresh, Resume, Fail } action = Action::Fresh;
  std::string line;
};
ResumePlan plan_resume(ResumePolicy policy, int restart_count, const CheckpointProbe& probe,
                       const CheckpointIdentity& job, const std::string& path);

/// Reads a whole file; std::nullopt when it does not exist. Throws CheckpointError on a read error.
std::optional<std::string> read_whole_file(const std::string& path);

/// Writes `bytes` to `path` atomically: a temporary file next to it (`temp_file_name`), every
/// write and fsync checked, rename, fsync of the directory. Any error (ENOSPC, EIO, EACCES...)
/// removes the temporary file and throws CheckpointError naming the file and errno.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// `<path>.tmp.<host>.<pid>`: the temporary name this process writes `path` through.
std::string temp_file_name(const std::string& path);

/// Removes temporary files of `path` left by killed writers on this host: `<path>.tmp.<host>.<pid>`
/// (and the older `<path>.tmp.<pid>`) whose pid no longer runs. Returns how many it removed.
int reclaim_stale_temp_files(const std::string& path);

}  // namespace ddp::worker
