// SPDX-License-Identifier: MIT
// line_check NRANKS LINES_PER_RANK < ddprun-output: verifies that every line is
// "[rank<R>]:r<R> <seq> <x...>" with seq = 0,1,2... per rank, plus one "[rank<R>]:r<R> end" per
// rank (output_flooder's format). Prints "lines=<n> torn=<n> lost=<n>" and exits 1 on any problem.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) return 64;
  const int nranks = std::atoi(argv[1]);
  const long per_rank = std::atol(argv[2]);
  std::vector<long> next(nranks, 0);
  std::vector<int> ends(nranks, 0);
  long lines = 0, torn = 0;
  std::string carry;
  std::vector<char> buf(1 << 20);
  auto check = [&](const char* p, size_t n) {
    ++lines;
    std::string_view line(p, n);
    if (line.substr(0, 5) != "[rank") return ++torn, void();
    char* end = nullptr;
    long r = std::strtol(p + 5, &end, 10);
    if (r < 0 || r >= nranks || std::strncmp(end, "]:r", 3) != 0) return ++torn, void();
    char* end2 = nullptr;
    long r2 = std::strtol(end + 3, &end2, 10);
    if (r2 != r || *end2 != ' ') return ++torn, void();
    if (std::strncmp(end2 + 1, "end", 3) == 0 && end2 + 4 == p + n) return ++ends[r], void();
    char* end3 = nullptr;
    long seq = std::strtol(end2 + 1, &end3, 10);
    if (seq != next[r] || *end3 != ' ') return ++torn, void();
    for (const char* q = end3 + 1; q < p + n; ++q) {
      if (*q != 'x') return ++torn, void();
    }
    ++next[r];
  };
  ssize_t got;
  while ((got = ::read(0, buf.data(), buf.size())) > 0) {
    const char* p = buf.data();
    const char* e = p + got;
    while (p < e) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', e - p));
      if (!nl) {
        carry.append(p, e);
        break;
      }
      if (!carry.empty()) {
        carry.append(p, nl);
        check(carry.data(), carry.size());
        carry.clear();
      } else {
        check(p, nl - p);
      }
      p = nl + 1;
    }
  }
  if (!carry.empty()) ++torn;  // ddprun always ends the last line
  long lost = 0;
  for (int r = 0; r < nranks; ++r) lost += (per_rank - next[r]) + (1 - ends[r]);
  std::printf("lines=%ld torn=%ld lost=%ld\n", lines, torn, lost);
  return torn == 0 && lost == 0 ? 0 : 1;
}
