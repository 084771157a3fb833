// SPDX-License-Identifier: MIT
// term_ignorer OUTDIR [also-int]: ignores SIGTERM (and SIGINT with "also-int"), writes
// OUTDIR/<RANK>.pid containing "pid pgid", then sleeps up to 1000 s. Only SIGKILL stops it.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  signal(SIGTERM, SIG_IGN);
  if (argc > 2 && std::strcmp(argv[2], "also-int") == 0) signal(SIGINT, SIG_IGN);
  const char* rank = std::getenv("RANK");
  std::string path = std::string(argv[1]) + "/" + (rank ? rank : "x") + ".pid";
  std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%d %d\n", static_cast<int>(getpid()), static_cast<int>(getpgrp()));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
  for (int i = 0; i < 1000; ++i) sleep(1);
  return 0;
}
