// Helpers shared by dsv32's test suites: expecting a dsv32::Error, temporary directories (temp_dir.hpp).
#pragma once

#include <doctest/doctest.h>

#include <dsv32/core/error.hpp>

#include "support/temp_dir.hpp"

#include <string>

namespace dsv32::test {

/// Runs f(), which must throw dsv32::Error of `kind`; returns its message (a failed CHECK otherwise).
template <class F>
std::string error_of(F&& f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  FAIL("expected a dsv32::Error");
  return {};
}

/// Whether `s` contains `part`.
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace dsv32::test
