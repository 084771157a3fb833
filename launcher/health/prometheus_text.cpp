// SPDX-License-Identifier: MIT
#include "launcher/health/prometheus_text.hpp"

#include <fmt/format.h>
#include <cmath>

namespace ddp::launcher::health {

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

PrometheusText::Family& PrometheusText::Family::sample(const Labels& labels, double value) {
  samples_ += name_;
  if (!labels.empty()) {
    samples_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) samples_ += ',';
      samples_ += fmt::format("{}=\"{}\"", labels[i].first, escape_label_value(labels[i].second));
    }
    samples_ += '}';
  }
  if (std::isnan(value))
    samples_ += " NaN\n";
  else if (std::isinf(value))
    samples_ += value > 0 ? " +Inf\n" : " -Inf\n";
  else
    samples_ += fmt::format(" {}\n", value);
  return *this;
}

PrometheusText::Family& PrometheusText::family(const std::string& name, const std::string& type,
                                               const std::string& help) {
  for (auto& f : families_) {
    if (f.name_ == name) return f;
  }
  Family& f = families_.emplace_back();
  f.name_ = name;
  f.type_ = type;
  f.help_ = help;
  return f;
}

std::string PrometheusText::str() const {
  std::string out;
  for (const auto& f : families_) {
    std::string help;
    for (char c : f.help_) {
      if (c == '\\')
        help += "\\\\";
      else if (c == '\n')
        help += "\\n";
      else
        help += c;
    }
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name_, help, f.name_, f.type_);
    out += f.samples_;
  }
  return out;
}

}  // namespace ddp::launcher::health
