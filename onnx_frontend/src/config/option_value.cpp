// SPDX-License-Identifier: MIT
// option_value: accessors, equality and compact text; option_cast helpers.
#include <cmath>
#include <sstream>
#include <string>

#include <quark/onnx/options.hpp>

namespace quark::onnx {

namespace {

[[noreturn]] void throw_kind(std::string_view expected, const option_value& got) {
  throw config_error("quark.config.type", "expected " + std::string(expected) + ", got " +
                                              std::string(describe(got.type())));
}

void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += c;
    }
  }
  out += '"';
}

void append(std::string& out, const option_value& v) {
  switch (v.type()) {
    case option_value::kind::null:
      out += "null";
      break;
    case option_value::kind::boolean:
      out += v.as_bool() ? "true" : "false";
      break;
    case option_value::kind::integer:
      out += std::to_string(v.as_int());
      break;
    case option_value::kind::number: {
      // The shortest of 15..17 significant digits that reads back to the same double.
      std::string t;
      for (int digits = 15; digits <= 17; ++digits) {
        std::ostringstream os;
        os.precision(digits);
        os << v.as_number();
        t = os.str();
        if (std::stod(t) == v.as_number())
          break;
      }
      if (t.find_first_of(".eEn") == std::string::npos)
        t += ".0";
      out += t;
      break;
    }
    case option_value::kind::string:
      append_escaped(out, v.as_string());
      break;
    case option_value::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.as_array()) {
        if (!first)
          out += ", ";
        first = false;
        append(out, item);
      }
      out += ']';
      break;
    }
    case option_value::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& m : v.as_object()) {
        if (!first)
          out += ", ";
        first = false;
        append_escaped(out, m.key);
        out += ": ";
        append(out, m.value);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

bool option_value::as_bool() const {
  if (!is_bool())
    throw_kind("a boolean", *this);
  return std::get<bool>(v_);
}

std::int64_t option_value::as_int() const {
  if (!is_int())
    throw_kind("an integer", *this);
  return std::get<std::int64_t>(v_);
}

double option_value::as_number() const {
  if (is_int())
    return static_cast<double>(std::get<std::int64_t>(v_));
  if (type() != kind::number)
    throw_kind("a number", *this);
  return std::get<double>(v_);
}

const std::string& option_value::as_string() const {
  if (!is_string())
    throw_kind("a string", *this);
  return std::get<std::string>(v_);
}

const option_value::array_type& option_value::as_array() const {
  if (!is_array())
    throw_kind("an array", *this);
  return std::get<array_type>(v_);
}

const option_value::object_type& option_value::as_object() const {
  if (!is_object())
    throw_kind("an object", *this);
  return std::get<object_type>(v_);
}

const option_value* option_value::find(std::string_view key) const noexcept {
  if (!is_object())
    return nullptr;
  for (const auto& m : std::get<object_type>(v_)) {
    if (m.key == key)
      return &m.value;
  }
  return nullptr;
}

option_value& option_value::set(std::string_view key, option_value value) {
  if (is_null())
    v_ = object_type{};
  if (!is_object())
    throw_kind("an object", *this);
  auto& members = std::get<object_type>(v_);
  for (auto& m : members) {
    if (m.key == key) {
      m.value = std::move(value);
      return *this;
    }
  }
  members.push_back(option_member{std::string(key), std::move(value)});
  return *this;
}

bool operator==(const option_value& a, const option_value& b) {
  return a.v_ == b.v_;
}

std::string_view describe(option_value::kind k) noexcept {
  switch (k) {
    case option_value::kind::null:
      return "null";
    case option_value::kind::boolean:
      return "a boolean";
    case option_value::kind::integer:
      return "an integer";
    case option_value::kind::number:
      return "a number";
    case option_value::kind::string:
      return "a string";
    case option_value::kind::array:
      return "an array";
    case option_value::kind::object:
      return "an object";
  }
  return "?";
}

std::string to_string(const option_value& v) {
  std::string out;
  append(out, v);
  return out;
}

namespace detail {

void throw_option_type(std::string_view where, std::string_view expected, const option_value& got) {
  std::string shown = to_string(got);
  if (shown.size() > 60)
    shown = shown.substr(0, 57) + "...";
  throw config_error("quark.config.type",
                     std::string(where) + ": expected " + std::string(expected) + ", got " + shown);
}

}  // namespace detail

}  // namespace quark::onnx
