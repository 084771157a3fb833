// SPDX-License-Identifier: MIT
// crasher: a worker that fails on purpose.
//   crasher RANK_THAT_FAILS MODE AFTER_MS [UNTIL_RESTART]
// The worker whose RANK equals RANK_THAT_FAILS waits AFTER_MS, writes a line to stderr and then
// MODE: "exit:N" exits N, "signal:N" raises signal N, "error:N" writes a torch-style error.json
// to TORCHELASTIC_ERROR_FILE and exits N. Other ranks sleep (up to 1000 s) and exit 0 on
// SIGTERM's default action... i.e. they die by SIGTERM. With UNTIL_RESTART=K the failing rank
// only fails while TORCHELASTIC_RESTART_COUNT < K, and every rank exits 0 otherwise.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: crasher RANK MODE AFTER_MS [UNTIL_RESTART]\n");
    return 64;
  }
  const int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "-1");
  const int restart = std::atoi(
      std::getenv("TORCHELASTIC_RESTART_COUNT") ? std::getenv("TORCHELASTIC_RESTART_COUNT") : "0");
  const int failing = std::atoi(argv[1]);
  const std::string mode = argv[2];
  const int after_ms = std::atoi(argv[3]);
  const int until_restart = argc > 4 ? std::atoi(argv[4]) : -1;
  std::printf("crasher rank %d restart %d pid %d\n", rank, restart, static_cast<int>(getpid()));
  std::fflush(stdout);
  if (until_restart >= 0 && restart >= until_restart) return 0;
  if (rank != failing) {
    if (until_restart >= 0) {  // wait for the failing rank to take the group down
      std::this_thread::sleep_for(std::chrono::seconds(1000));
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1000));
    return 0;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
  std::fprintf(stderr, "crasher: rank %d failing now (%s)\n", rank, mode.c_str());
  std::fflush(stderr);
  const int n = std::atoi(mode.substr(mode.find(':') + 1).c_str());
  if (mode.rfind("signal:", 0) == 0) {
    signal(n, SIG_DFL);
    raise(n);
    return 99;
  }
  if (mode.rfind("error:", 0) == 0) {
    if (const char* file = std::getenv("TORCHELASTIC_ERROR_FILE")) {
      if (FILE* f = std::fopen(file, "w")) {
        std::fprintf(f,
                     "{\"message\": {\"message\": \"ValueError: crasher rank %d broke\", "
                     "\"extraInfo\": {\"py_callstack\": \"Traceback (most recent call last):\\n  "
                     "File crasher.py, line 1\\nValueError: crasher rank %d broke\", "
                     "\"timestamp\": \"1700000000\"}}}\n",
                     rank, rank);
        std::fclose(f);
      }
    }
  }
  return n;
}
