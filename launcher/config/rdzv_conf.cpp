// SPDX-License-Identifier: MIT
#include "launcher/config/rdzv_conf.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/exit_codes.hpp"
#include "launcher/common/value_parsers.hpp"

namespace ddp::launcher {

namespace {

using Ms = std::chrono::milliseconds;

Error usage(std::string message) { return Error{exit_codes::kUsage, std::move(message)}; }

/// The first line of a secret's file (the token, etcd's password), trailing whitespace removed;
/// at most 4 KiB. The secret then appears in no argv and no environment.
Result<std::string> read_secret_file(std::string_view label, const std::string& path) {
  constexpr size_t kMaxSecretBytes = 4096;
  std::ifstream in(path, std::ios::binary);
  if (!in) return usage(fmt::format("{}: cannot read '{}': {}", label, path, std::strerror(errno)));
  std::string secret(kMaxSecretBytes + 1, '\0');
  in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
  secret.resize(static_cast<size_t>(in.gcount()));
  if (secret.size() > kMaxSecretBytes) {
    return usage(fmt::format("{}: '{}' is larger than 4 KiB", label, path));
  }
  secret = secret.substr(0, secret.find('\n'));
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
    secret.pop_back();
  if (secret.empty()) return usage(fmt::format("{}: '{}' is empty", label, path));
  return secret;
}

/// A positive number of seconds (fractions allowed), kept in milliseconds.
Result<Ms> positive_seconds(std::string_view label, const std::string& value) {
  auto seconds = parse_seconds(label, value);
  if (!seconds) return seconds.error();
  if (*seconds <= 0) return usage(fmt::format("{}: must be positive", label));
  return Ms(static_cast<long long>(*seconds * 1000.0));
}

template <Ms MultiNodeSettings::*Field>
Result<Ok> set_seconds(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  auto ms = positive_seconds(label, value);
  if (!ms) return ms.error();
  s.*Field = *ms;
  return Ok{};
}

template <int MultiNodeSettings::*Field>
Result<Ok> set_count(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  auto n = parse_integer(label, value, 0, 1'000'000);
  if (!n) return n.error();
  s.*Field = static_cast<int>(*n);
  return Ok{};
}

template <std::string EtcdBackend::*Field>
Result<Ok> set_etcd_text(std::string_view, const std::string& value, MultiNodeSettings& s) {
  s.etcd.*Field = value;
  return Ok{};
}

Result<Ok> check_seconds(std::string_view label, const std::string& value, MultiNodeSettings&) {
  auto ms = positive_seconds(label, value);
  if (!ms) return ms.error();
  return Ok{};
}

Result<Ok> accept(std::string_view, const std::string&, MultiNodeSettings&) { return Ok{}; }

Result<Ok> set_token(std::string_view, const std::string& value, MultiNodeSettings& s) {
  s.token = value;
  return Ok{};
}

Result<Ok> set_token_file(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  auto token = read_secret_file(label, value);
  if (!token) return token.error();
  s.token = *token;
  return Ok{};
}

Result<Ok> set_admit(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  if (value != "now" && value != "restart")
    return usage(fmt::format("{}: '{}' is not one of now, restart", label, value));
  s.admit_at_once = value == "now";
  return Ok{};
}

Result<Ok> set_spares(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  auto n = parse_integer(label, value, 0, 1);
  if (!n) return n.error();
  s.spares = *n == 1;
  return Ok{};
}

Result<Ok> set_etcd_prefix(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  if (value.empty() || value.front() != '/')
    return usage(fmt::format("{}: '{}' must start with '/'", label, value));
  s.etcd.prefix = value;
  return Ok{};
}

Result<Ok> set_etcd_user(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  if (value.empty()) return usage(fmt::format("{}: empty", label));
  s.etcd.user = value;
  return Ok{};
}

Result<Ok> set_etcd_password_file(std::string_view label, const std::string& value,
                                  MultiNodeSettings& s) {
  auto password = read_secret_file(label, value);
  if (!password) return password.error();
  s.etcd.password = *password;
  return Ok{};
}

Result<Ok> refuse_etcd_password(std::string_view label, const std::string&, MultiNodeSettings&) {
  return usage(fmt::format(
      "{}: a password on the command line is readable by every local user; put it in a file "
      "only you can read and pass etcd_password_file=PATH",
      label));
}

Result<Ok> set_protocol(std::string_view label, const std::string& value, MultiNodeSettings& s) {
  if (value != "http" && value != "https")
    return usage(fmt::format("{}: '{}' is not one of http, https", label, value));
  s.etcd.tls = s.etcd.tls || value == "https";
  return Ok{};
}

using S = MultiNodeSettings;
using E = EtcdBackend;

const RdzvConfKey kKeys[] = {
    {"join_timeout", "seconds all nodes have to meet (default 600)", set_seconds<&S::join_timeout>},
    {"timeout", "the same as join_timeout (torchrun's etcd name)", set_seconds<&S::join_timeout>},
    {"last_call_timeout", "seconds a MIN:MAX round waits for more nodes after MIN (default 30)",
     set_seconds<&S::last_call_timeout>},
    {"close_timeout", "accepted (torchrun's); the round closes when node 0 publishes it",
     check_seconds},
    {"read_timeout", "seconds one store call may take (default 60)", set_seconds<&S::read_timeout>},
    {"heartbeat_interval", "seconds between an agent's heartbeats (default 1)",
     set_seconds<&S::heartbeat_interval>},
    {"heartbeat_timeout", "seconds without a heartbeat before a node is lost (default 5)",
     set_seconds<&S::heartbeat_timeout>},
    {"refused_timeout",
     "seconds a joining node waits while the store's address refuses connections (default 15)",
     set_seconds<&S::refused_timeout>},
    {"token", "the job's token (DDPRUN_RDZV_TOKEN keeps it off the command line)", set_token},
    {"token_file", "a file whose first line is the job's token", set_token_file},
    {"is_host", "accepted (torchrun's hint); ddprun binds the endpoint to decide", accept},
    {"store_bind", "the address the store's host listens on (default: the endpoint's)",
     [](std::string_view, const std::string& value, MultiNodeSettings& s) -> Result<Ok> {
       s.etcd.store_bind = value;  // c10d and static: plan_store() reads the key itself
       return Ok{};
     }},
    {"max_rescales", "c10d MIN:MAX: membership changes allowed in the job (default 100)",
     set_count<&S::max_rescales>},
    {"node_failure_limit",
     "failed attempts in a row that take a node out of the job (default 0: off)",
     set_count<&S::node_failure_limit>},
    {"admit", "when a pending node joins: now (a re-form, default) or restart", set_admit},
    {"spares", "1: a static job takes late nodes as spares (default 0)", set_spares},
    {"etcd_prefix", "etcd: the keys' prefix, starting with / (default /ddprun)", set_etcd_prefix},
    {"etcd_user", "etcd: the user of etcd's own authentication", set_etcd_user},
    {"etcd_password_file", "etcd: a file whose first line is etcd_user's password",
     set_etcd_password_file},
    {"etcd_password", "refused (exit 2): use etcd_password_file", refuse_etcd_password},
    {"etcd_cacert", "etcd TLS: the CA file (default: the system's)", set_etcd_text<&E::tls_ca>},
    {"etcd_cert", "etcd TLS: this client's certificate (with etcd_key)",
     set_etcd_text<&E::tls_cert>},
    {"etcd_key", "etcd TLS: the certificate's private key", set_etcd_text<&E::tls_key>},
    {"protocol", "etcd: http or https (torchrun's name)", set_protocol},
    {"cacert", "= etcd_cacert (torchrun's name)", set_etcd_text<&E::tls_ca>},
    {"cert", "= etcd_cert (torchrun's name)", set_etcd_text<&E::tls_cert>},
    {"key", "= etcd_key (torchrun's name)", set_etcd_text<&E::tls_key>},
};

}  // namespace

std::span<const RdzvConfKey> rdzv_conf_keys() { return kKeys; }

const RdzvConfKey* find_rdzv_conf_key(std::string_view key) {
  const auto* found = std::find_if(std::begin(kKeys), std::end(kKeys),
                                   [&](const RdzvConfKey& k) { return k.key == key; });
  return found == std::end(kKeys) ? nullptr : found;
}

std::string rdzv_conf_key_names() {
  std::string names;
  for (const auto& k : kKeys) names += (names.empty() ? "" : ", ") + std::string(k.key);
  return names;
}

}  // namespace ddp::launcher
