/// \file
/// \brief dsv32: DeepSeek-V3.2-Exp inference as a header-only C++20 library — the umbrella header.
///
/// Includes the core types, configs, the CPU backend, every layer, the Transformer, the checkpoint
/// readers and the generation API. No CUDA header is reachable from here: a CUDA backend plugs in
/// as specializations of Memory<Cuda> and Kernels<Cuda> (see backend/backend.hpp) in a header of
/// its own. The tokenizer (<dsv32/tokenizer.hpp>) and the golden replay (<dsv32/testing/golden.hpp>)
/// are separate includes: the first needs PCRE2, the second is for tests.
#pragma once

#include "dsv32/core/error.hpp"
#include "dsv32/core/format.hpp"
#include "dsv32/core/dtype.hpp"
#include "dsv32/core/numeric.hpp"
#include "dsv32/core/tensor.hpp"
#include "dsv32/core/parallel.hpp"
#include "dsv32/parallel/thread_communicator.hpp"
#include "dsv32/config/model_config.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/config/runtime_options.hpp"
#include "dsv32/config/model_args.hpp"
#include "dsv32/config/tensor_table.hpp"
#include "dsv32/config/registry.hpp"
#include "dsv32/backend/backend.hpp"
#include "dsv32/backend/cpu/kernels.hpp"
#include "dsv32/backend/kernel_args.hpp"
#include "dsv32/layers/transformer.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/io/checkpoint.hpp"
#include "dsv32/generate/sampling.hpp"
#include "dsv32/generate/generate.hpp"
#include "dsv32/generate/group.hpp"
#include "dsv32/generate/token_ids.hpp"
