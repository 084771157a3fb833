// SPDX-License-Identifier: MIT
#include "worker/error_file.hpp"

#include <cxxabi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <typeinfo>

namespace ddp::worker {
namespace {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

}  // namespace

std::string error_file_json(std::string_view message, std::string_view callstack,
                            long long unix_seconds) {
  nlohmann::json data = {
      {"message",
       {{"message", std::string(message)},
        {"extraInfo",
         {{"py_callstack", std::string(callstack)}, {"timestamp", std::to_string(unix_seconds)}}}}}};
  return data.dump();
}

bool write_error_file(const std::string& path, std::string_view message,
                      std::string_view callstack) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << error_file_json(message, callstack, seconds);
    if (!out.flush()) {
      std::fprintf(stderr, "worker: cannot write error file %s\n", tmp.c_str());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::fprintf(stderr, "worker: cannot rename %s to %s: %s\n", tmp.c_str(), path.c_str(),
                 ec.message().c_str());
    return false;
  }
  return true;
}

DescribedException describe_exception(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
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
    const DescribedException described = describe_exception(std::current_exception());
    std::fprintf(stderr, "worker: error: %s\n", described.message.c_str());
    if (!error_file.empty()) write_error_file(error_file, described.message, described.callstack);
    return 1;
  }
}

}  // namespace ddp::worker
