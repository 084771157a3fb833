// SPDX-License-Identifier: MIT
#include "launcher/config/secret_scrub.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

extern char** environ;  // NOLINT(readability-identifier-naming): POSIX's name

namespace ddp::launcher {
namespace {

constexpr std::string_view kSecretVariables[] = {"DDPRUN_RDZV_TOKEN", "PET_RDZV_CONF"};

/// "--rdzv_conf", "--rdzv-conf" or an abbreviation of them that only they match ("--rdzv_c").
bool names_rdzv_conf(std::string_view name) {
  constexpr std::string_view kUnderscore = "--rdzv_conf", kDash = "--rdzv-conf";
  return name.size() >= 8 && (kUnderscore.starts_with(name) || kDash.starts_with(name));
}

std::string_view trim_spaces(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

/// Masks in place, so that argv's memory keeps its layout.
void mask_in_place(char* conf) {
  char* entry = conf;
  while (*entry != '\0') {
    char* end = std::strchr(entry, ',');
    if (end == nullptr) end = entry + std::strlen(entry);
    char* eq = static_cast<char*>(std::memchr(entry, '=', static_cast<size_t>(end - entry)));
    if (eq != nullptr &&
        trim_spaces(std::string_view(entry, static_cast<size_t>(eq - entry))) == "token")
      std::memset(eq + 1, '*', static_cast<size_t>(end - eq - 1));
    entry = *end == ',' ? end + 1 : end;
  }
}

}  // namespace

void scrub_secrets_from_proc(int argc, char** argv, size_t own_args) {
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    for (std::string_view name : kSecretVariables) {
      std::string_view text(*entry);
      if (!text.starts_with(name) || text.size() <= name.size() || text[name.size()] != '=')
        continue;
      char* value = *entry + name.size() + 1;
      const std::string copy(value);
      const std::string key(name);
      ::setenv(key.c_str(), copy.c_str(), 1);  // a heap copy replaces this entry in environ
      std::memset(value, 0, copy.size());
      break;
    }
  }
  // The program's own arguments (from argv[1 + own_args] on) are never touched.
  const int last = std::min(argc, 1 + static_cast<int>(own_args));
  for (int i = 1; i < last; ++i) {
    std::string_view arg(argv[i]);
    const size_t eq = arg.find('=');
    if (!names_rdzv_conf(arg.substr(0, eq))) continue;
    if (eq != std::string_view::npos) {
      mask_in_place(argv[i] + eq + 1);
    } else if (i + 1 < last) {
      mask_in_place(argv[++i]);
    }
  }
}

}  // namespace ddp::launcher
