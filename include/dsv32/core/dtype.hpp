/// \file
/// \brief Element types of tensors in files and in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief Element type of a tensor, named as safetensors names them.
enum class DType : std::uint8_t { F32, BF16, F8_E4M3, F16, F64, I64, I32, I16, I8, U8, BOOL };

/// \brief The safetensors spelling of a dtype ("F32", "BF16", "F8_E4M3", ...).
constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F16: return "F16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

/// \brief Bytes per element.
constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: case DType::I16: return 2;
    case DType::F8_E4M3: case DType::I8: case DType::U8: case DType::BOOL: return 1;
  }
  return 0;
}

/// \brief Parses a safetensors dtype name; std::nullopt for names dsv32 does not know.
constexpr std::optional<DType> parse_dtype(std::string_view s) noexcept {
  for (DType t : {DType::F32, DType::BF16, DType::F8_E4M3, DType::F16, DType::F64, DType::I64, DType::I32,
                  DType::I16, DType::I8, DType::U8, DType::BOOL}) {
    if (dtype_name(t) == s) return t;
  }
  return std::nullopt;
}

/// @}

}  // namespace dsv32
