// SPDX-License-Identifier: MIT
// grandchild_spawner OUTDIR MODE [setsid]: starts a daemonised grandchild (double fork; with
// "setsid" it also leaves the worker's session and process group), then
//   MODE "wait": the worker itself sleeps up to 1000 s;  MODE "exit": the worker exits 0 at once.
// Writes OUTDIR/<RANK>.worker and OUTDIR/<RANK>.grandchild, each "pid pgid". The grandchild
// sleeps up to 1000 s with stdio on /dev/null (as daemons do).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static void write_ids(const std::string& path) {
  std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%d %d\n", static_cast<int>(getpid()), static_cast<int>(getpgrp()));
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

int main(int argc, char** argv) {
  if (argc < 3) return 64;
  const std::string dir = argv[1];
  const bool wait_mode = std::strcmp(argv[2], "wait") == 0;
  const bool use_setsid = argc > 3 && std::strcmp(argv[3], "setsid") == 0;
  const char* rank_env = std::getenv("RANK");
  const std::string rank = rank_env ? rank_env : "x";
  pid_t child = fork();
  if (child == 0) {
    if (use_setsid) setsid();
    if (fork() == 0) {  // the grandchild: re-parented once its parent exits
      int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
      write_ids(dir + "/" + rank + ".grandchild");
      for (int i = 0; i < 1000; ++i) sleep(1);
      _exit(0);
    }
    _exit(0);
  }
  waitpid(child, nullptr, 0);
  // Wait until the grandchild has written its ids so the test can find it.
  std::string gc = dir + "/" + rank + ".grandchild";
  for (int i = 0; i < 500 && access(gc.c_str(), F_OK) != 0; ++i) usleep(10'000);
  write_ids(dir + "/" + rank + ".worker");
  if (!wait_mode) return 0;
  for (int i = 0; i < 1000; ++i) sleep(1);
  return 0;
}
