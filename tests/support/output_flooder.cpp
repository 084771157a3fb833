// SPDX-License-Identifier: MIT
// output_flooder LINES [BYTES_PER_LINE] [stderr]: writes LINES lines "r<RANK> <seq> xxx...\n"
// through a 64 KiB stdio buffer, so that the write() calls cut lines at arbitrary points, and
// ends with a last line that has no newline ("r<RANK> end"). Used to check that ddprun never
// tears or loses a line.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  const long lines = std::atol(argv[1]);
  const int width = argc > 2 ? std::atoi(argv[2]) : 60;
  FILE* out = (argc > 3 && std::strcmp(argv[3], "stderr") == 0) ? stderr : stdout;
  static char buffer[65536];
  std::setvbuf(out, buffer, _IOFBF, sizeof buffer);
  const char* rank = std::getenv("RANK");
  std::string pad(width > 0 ? width : 1, 'x');
  for (long i = 0; i < lines; ++i)
    std::fprintf(out, "r%s %ld %s\n", rank ? rank : "?", i, pad.c_str());
  std::fprintf(out, "r%s end", rank ? rank : "?");
  return std::fflush(out) == 0 ? 0 : 1;
}
