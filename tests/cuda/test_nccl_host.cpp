// Host-only tests of the NCCL component (compiled by the host compiler, no GPU needed): the text and
// kind of DSV32_NCCL_CHECK's error for each NCCL result, NcclBootstrap's checks, and unique ids
// (ncclGetUniqueId needs no GPU). Built where dsv32::nccl exists (tests/cuda/tests.cmake).
#include <doctest/doctest.h>

#include <dsv32/parallel/nccl_bootstrap.hpp>
#include <dsv32/parallel/nccl_check.hpp>

#include <cstring>
#include <string>

namespace {

std::string message_of(ncclResult_t r) {
  try {
    DSV32_NCCL_CHECK(r);
  } catch (const dsv32::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("DSV32_NCCL_CHECK: the statement, file and line, the result's name and NCCL's string") {
  CHECK_NOTHROW(DSV32_NCCL_CHECK(ncclSuccess));
  const int line = __LINE__ + 2;
  try {
    DSV32_NCCL_CHECK(static_cast<ncclResult_t>(ncclInvalidArgument));
    FAIL("no error thrown");
  } catch (const dsv32::Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(e.kind() == dsv32::ErrorKind::invalid_argument);
    CHECK(what.find("static_cast<ncclResult_t>(ncclInvalidArgument) failed at ") != std::string::npos);
    CHECK(what.find("test_nccl_host.cpp:" + std::to_string(line)) != std::string::npos);
    CHECK(what.find("ncclInvalidArgument (") != std::string::npos);
    CHECK(what.find(ncclGetErrorString(ncclInvalidArgument)) != std::string::npos);
  }
  // Every result: its name, NCCL's string, and the kind the header gives it.
  const struct {
    ncclResult_t result;
    const char* name;
    dsv32::ErrorKind kind;
  } cases[] = {
      {ncclUnhandledCudaError, "ncclUnhandledCudaError", dsv32::ErrorKind::state},
      {ncclSystemError, "ncclSystemError", dsv32::ErrorKind::io},
      {ncclInternalError, "ncclInternalError", dsv32::ErrorKind::state},
      {ncclInvalidArgument, "ncclInvalidArgument", dsv32::ErrorKind::invalid_argument},
      {ncclInvalidUsage, "ncclInvalidUsage", dsv32::ErrorKind::invalid_argument},
      {ncclRemoteError, "ncclRemoteError", dsv32::ErrorKind::io},
      {ncclInProgress, "ncclInProgress", dsv32::ErrorKind::state},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const std::string what = message_of(c.result);
    CHECK(what.find(std::string(c.name) + " (" + ncclGetErrorString(c.result) + ")") != std::string::npos);
    CHECK(dsv32::nccl::error_kind(c.result) == c.kind);
    CHECK(std::string(dsv32::nccl::result_name(c.result)) == c.name);
  }
  CHECK(std::string(dsv32::nccl::result_name(static_cast<ncclResult_t>(99))) == "ncclResult_t(?)");
  const std::string unknown = dsv32::nccl::nccl_error_message(static_cast<ncclResult_t>(99), "ncclFoo(x)", "f.cu", 7);
  CHECK(unknown.rfind("ncclFoo(x) failed at f.cu:7: ncclResult_t(?) (", 0) == 0);
}

TEST_CASE("NcclBootstrap: ranks and world sizes out of range are refused; unique ids need no GPU") {
  dsv32::NcclBootstrap b;
  CHECK_NOTHROW(b.validate());
  b.world_size = 2;
  b.rank = 2;
  CHECK_THROWS_WITH_AS(b.validate(), doctest::Contains("rank 2 outside [0, 2)"), dsv32::Error);
  b.world_size = 0;
  b.rank = 0;
  CHECK_THROWS_WITH_AS(b.validate(), doctest::Contains("world size must be >= 1, got 0"), dsv32::Error);

  const dsv32::NcclBootstrap one = dsv32::NcclBootstrap::single();
  CHECK(one.rank == 0);
  CHECK(one.world_size == 1);
  const ncclUniqueId other = dsv32::make_nccl_unique_id();
  CHECK(std::memcmp(&one.id, &other, sizeof other) != 0);  // each id is a new group's
}
