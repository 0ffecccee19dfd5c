/// \file
/// \brief WeightView: a weight matrix as every backend's kernels take it.
#pragma once

#include <cstdint>

#include "dsv32/config/model_config.hpp"
#include "dsv32/core/dtype.hpp"

namespace dsv32 {

/// \addtogroup backend
/// @{

/// \brief A weight matrix in its stored dtype: [out, in] row-major in the backend's memory.
struct WeightView {
  DType dtype = DType::BF16;     ///< BF16, F32 or F8_E4M3
  const void* data = nullptr;    ///< [out, in]
  std::int64_t out = 0;          ///< rows: output features
  std::int64_t in = 0;           ///< columns: input features
  const float* scale = nullptr;  ///< F8_E4M3 only: [ceil(out / 128), ceil(in / 128)] block scales

  /// \brief Columns of the scale matrix.
  std::int64_t scale_cols() const noexcept { return (in + kBlockSize - 1) / kBlockSize; }
};

/// @}

}  // namespace dsv32
