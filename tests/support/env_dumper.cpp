// SPDX-License-Identifier: MIT
// env_dumper OUTDIR [ARGS...]: writes this worker's whole environment (NAME=value lines) and
// its arguments (ARG=... lines) to OUTDIR/<RANK>.<TORCHELASTIC_RESTART_COUNT>.env, then exits 0.
#include <cstdio>
#include <cstdlib>
#include <string>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: env_dumper OUTDIR [ARGS...]\n");
    return 64;
  }
  const char* rank = std::getenv("RANK");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  std::string path = std::string(argv[1]) + "/" + (rank ? rank : "norank") + "." +
                     (restart ? restart : "0") + ".env";
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return 65;
  for (char** e = environ; *e; ++e) std::fprintf(f, "%s\n", *e);
  for (int i = 2; i < argc; ++i) std::fprintf(f, "ARG=%s\n", argv[i]);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());  // readers never see a half-written file
  std::printf("env_dumper rank %s done\n", rank ? rank : "?");
  return 0;
}
