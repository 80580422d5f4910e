// SPDX-License-Identifier: MIT
// The exception hierarchy for bad runtime input. Every message starts with a stable id such as
// "quark.calib.empty_input: " so that callers and tests can match on it.
#pragma once

#include <stdexcept>
#include <string>

namespace quark {

/// Base of every exception the library throws.
class error : public std::runtime_error {
 public:
  error(const std::string& id, const std::string& what)
      : std::runtime_error(id + ": " + what), id_(id) {}
  /// The stable identifier, e.g. "quark.qparams.nan_range".
  const std::string& id() const noexcept { return id_; }
  /// what() without the leading "id: ", for wrapping the error in more context.
  std::string message() const { return std::string(what()).substr(id_.size() + 2); }

 private:
  std::string id_;
};

/// A value outside what the operation accepts (NaN range, empty data, bad shape, ...).
class invalid_argument : public error {
 public:
  using error::error;
};

/// A configuration or option that is unknown, mistyped or inconsistent.
class config_error : public error {
 public:
  using error::error;
};

/// A feature that is recognised but not implemented yet.
class not_implemented : public error {
 public:
  using error::error;
};

}  // namespace quark
