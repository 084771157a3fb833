// SPDX-License-Identifier: MIT
#include "ddprun/worker/error_file.hpp"

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <typeinfo>
#include <utility>

namespace ddp::worker {
namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

/// Length of the valid UTF-8 sequence starting at text[i], or 0 when the byte there starts none
/// (overlong forms, surrogates and code points above U+10FFFF count as invalid, as in JSON).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  std::uint32_t code = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    code = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    code = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr std::uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kMinimum[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

std::string printable_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      static constexpr char kHex[] = "0123456789abcdef";
      const auto b = static_cast<unsigned char>(text[i]);
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string error_file_json(std::string_view message, std::string_view callstack,
                            long long unix_seconds) {
  nlohmann::json data = {{"message",
                          {{"message", printable_utf8(message)},
                           {"extraInfo",
                            {{"py_callstack", printable_utf8(callstack)},
                             {"timestamp", std::to_string(unix_seconds)}}}}}};
  return data.dump();
}

bool write_error_file(const std::string& path, std::string_view message,
                      std::string_view callstack) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  const std::string tmp = path + ".tmp";
  try {
    const std::string text = error_file_json(message, callstack, seconds);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::fprintf(stderr, "worker: cannot write error file %s: %s\n", tmp.c_str(),
                   std::strerror(errno));
      return false;
    }
    std::size_t done = 0;
    int write_errno = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        write_errno = n < 0 ? errno : EIO;
        break;
      }
      done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 && write_errno == 0) write_errno = errno;
    if (write_errno == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) write_errno = errno;
    if (write_errno != 0) {
      ::unlink(tmp.c_str());
      std::fprintf(stderr, "worker: cannot write error file %s: %s\n", path.c_str(),
                   std::strerror(write_errno));
      return false;
    }
    return true;
  } catch (const std::exception& e) {  // only allocation can throw here
    ::unlink(tmp.c_str());
    std::fprintf(stderr, "worker: cannot write error file %s: %s\n", path.c_str(), e.what());
    return false;
  }
}

DescribedException describe_exception(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& e) {
    std::string what = e.what();
    // c10::Error's what() appends a C++ backtrace after the first line; the summary line keeps
    // the message only, the callstack field gets everything.
    std::string first_line = what.substr(0, what.find('\n'));
    return {demangle(typeid(e).name()) + ": " + first_line, what};
  } catch (...) {
    const auto* type = abi::__cxa_current_exception_type();
    std::string name = type ? demangle(type->name()) : "unknown exception";
    return {name + ": (not derived from std::exception)", name};
  }
}

int run_reporting_errors(const std::string& error_file, const std::function<int()>& body) {
  try {
    return body();
  } catch (...) {
    // Reporting must not throw: a second exception here would abort without a word.
    try {
      const DescribedException described = describe_exception(std::current_exception());
      std::fprintf(stderr, "worker: error: %s\n", described.message.c_str());
      if (!error_file.empty()) write_error_file(error_file, described.message, described.callstack);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "worker: error: (while reporting an error: %s)\n", e.what());
    }
    return 1;
  }
}

}  // namespace ddp::worker
