// SPDX-License-Identifier: MIT
#pragma once
/// PrometheusText: builds the text exposition format (version 0.0.4): one HELP and TYPE line per
/// family, then its samples, label values escaped. Pure.

#include <list>
#include <string>
#include <utility>
#include <vector>

namespace ddp::launcher::health {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  class Family {
   public:
    Family& sample(const Labels& labels, double value);

   private:
    friend class PrometheusText;
    std::string name_, type_, help_;
    std::string samples_;
  };

  /// Families appear in the order they are first asked for.
  Family& family(const std::string& name, const std::string& type, const std::string& help);
  std::string str() const;

 private:
  std::list<Family> families_;  // stable references
};

/// A label value with \, " and newline escaped.
std::string escape_label_value(const std::string& value);

}  // namespace ddp::launcher::health
