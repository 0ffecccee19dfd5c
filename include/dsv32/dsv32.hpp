/// \file
/// \brief dsv32: DeepSeek-V3.2-Exp inference as a header-only C++20 library — the umbrella header.
///
/// Includes the core types, configs, the CPU backend, every layer, the Transformer, the checkpoint
/// readers and the generation API. No CUDA header is reachable from here: CUDA builds include
/// <dsv32/cuda.hpp> as well.
#pragma once

#include "dsv32/core/error.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/kernels.hpp"
#include "dsv32/layers/transformer.hpp"
