// SPDX-License-Identifier: MIT
// The worker program: `ddprun --nproc_per_node=2 build/bin/worker` trains Fashion-MNIST with
// DDP + SyncBatchNorm. Wiring only: flags -> TrainOptions, environment -> WorkerEnv, run, and
// any escaping exception -> one stderr line, the launcher's error file, exit code 1.
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdio>

#include "ddprun/worker/error_file.hpp"
#include "ddprun/worker/worker_env.hpp"
#include "examples/worker/train.hpp"

namespace {

/// "--epochs: must be at least 1 (got 0)" instead of CLI11's range up to the type's maximum.
CLI::Validator at_least(double minimum) {
  return CLI::Validator(
      [minimum](std::string& value) -> std::string {
        double number = 0;
        try {
          std::size_t used = 0;
          number = std::stod(value, &used);
          if (used != value.size()) return "'" + value + "' is not a number";
        } catch (const std::exception&) {
          return "'" + value + "' is not a number";
        }
        if (number < minimum) {
          char text[64];
          std::snprintf(text, sizeof text, "%g", minimum);
          return std::string("must be at least ") + text + " (got " + value + ")";
        }
        return "";
      },
      "", "at least");
}

/// Above zero, for the floating-point flags (--lr, --timeout).
CLI::Validator above_zero() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        try {
          std::size_t used = 0;
          const double number = std::stod(value, &used);
          if (used != value.size()) return "'" + value + "' is not a number";
          if (!(number > 0)) return "must be greater than 0 (got " + value + ")";
        } catch (const std::exception&) {
          return "'" + value + "' is not a number";
        }
        return "";
      },
      "", "above zero");
}

}  // namespace

int main(int argc, char** argv) {
  ddp::examples::TrainOptions options;
  CLI::App app{"Train a Fashion-MNIST CNN with DDP + SyncBatchNorm (run it under ddprun)",
               "worker"};
  // As with ddprun (and argparse), a repeated option takes its last value: `demo.sh --epochs 1`.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--epochs", options.epochs, "Epochs to train")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--batch-size", options.batch_size, "Batch size per rank")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--lr", options.lr, "SGD learning rate")
      ->check(above_zero())
      ->capture_default_str();
  app.add_option("--momentum", options.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--data", options.data_dir, "Directory with the gzipped Fashion-MNIST IDX files")
      ->capture_default_str();
  app.add_option("--checkpoint", options.checkpoint,
                 "Checkpoint file (written by rank 0; resumed after a launcher restart when this "
                 "job wrote it)")
      ->capture_default_str();
  bool resume = false, no_resume = false;
  auto* resume_flag = app.add_flag("--resume", resume,
                                   "Resume from --checkpoint on every start, also one an earlier "
                                   "run wrote (same world size, data and model)");
  app.add_flag("--no-resume", no_resume,
               "Never resume: start from scratch (and overwrite --checkpoint)")
      ->excludes(resume_flag);
  app.add_option("--seed", options.seed, "Seed for initialisation and shuffling")
      ->capture_default_str();
  app.add_option("--backend", options.backend, "auto, gloo or nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  app.add_option("--synthetic", options.synthetic,
                 "Train on N generated images instead of Fashion-MNIST")
      ->check(at_least(0));
  app.add_option("--timeout", options.timeout_s,
                 "Seconds before a stuck collective or store call fails")
      ->check(above_zero())
      ->capture_default_str();
  app.add_option("--threads", options.threads,
                 "Intra-op threads per rank (0: OMP_NUM_THREADS or cores/ranks)")
      ->check(at_least(0));
  app.add_option("--bucket-kb", options.bucket_kb, "DDP gradient bucket cap in KiB")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--max-steps", options.max_steps, "Stop each epoch after N steps (benchmarks)")
      ->check(at_least(0));
  app.add_option("--log-every", options.log_every,
                 "Progress line every N steps when not on a terminal")
      ->check(at_least(1))
      ->capture_default_str();
  // Test-only flags: an empty group keeps them out of --help (docs/worker.md lists them).
  app.add_option("--dump-params", options.dump_params,
                 "Each rank writes its final parameters to PATH.rank<R> (tests)")
      ->group("");
  app.add_option("--summary-json", options.summary_json,
                 "Rank 0 writes throughput, accuracy and overlap as JSON");
  app.add_option("--fail-after-epoch", options.fail_after_epoch,
                 "Tests: the last rank kills itself after this epoch on the first attempt")
      ->group("");
  app.add_flag("!--no-eval", options.evaluate, "Skip the test-set evaluation");
  app.add_flag("--channels-last", options.channels_last, "NHWC weights and activations");
  app.add_flag("!--no-sync-bn", options.sync_batch_norm,
               "Keep per-rank BatchNorm statistics (for comparison with PyTorch's CPU DDP)");
  app.add_flag(
      "!--no-shm", options.shared_memory,
      "Small all-reduces over Gloo even when all ranks are on this host (also DDPRUN_NO_SHM=1)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "worker: error: %s (see --help)\n", e.what());
    return 2;
  }
  if (resume) options.resume = "always";
  if (no_resume) options.resume = "never";

  ddp::worker::WorkerEnv env;
  try {
    env = ddp::worker::worker_env_from_environment();
  } catch (const ddp::worker::WorkerEnvError& e) {
    std::fprintf(stderr, "worker: error: %s\n", e.what());
    return 2;
  }
  const int code = ddp::worker::run_reporting_errors(
      env.error_file, [&] { return ddp::examples::train(options, env); });
  std::fflush(stdout);
  std::fflush(stderr);
  // A failed collective can leave the backend's threads blocked on a dead peer; do not wait
  // for their destructors, so the launcher sees the exit code at once.
  if (code != 0) ::_exit(code);
  return code;
}
