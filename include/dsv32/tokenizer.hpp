/// \file
/// \brief Umbrella header of the optional tokenizer component (CMake target `dsv32::tokenizer`,
///        which links PCRE2): dsv32::Tokenizer, dsv32::StreamDecoder, dsv32::ChatTemplate.
///
/// \code
/// #include <dsv32/tokenizer.hpp>
///
/// const auto tok = dsv32::Tokenizer::from_directory("/models/DeepSeek-V3.2-Exp");
/// const std::vector<dsv32::ChatMessage> chat = {{"user", "Hello!"}};
/// std::vector<int32_t> ids = tok.encode_chat(chat, /*add_generation_prompt=*/true);
/// auto stream = tok.stream_decoder(/*skip_special_tokens=*/true);
/// for (int32_t id : generated) std::cout << stream.push(id) << std::flush;
/// std::cout << stream.finish();
/// \endcode
#pragma once

/// \defgroup tokenizer Tokenizer
/// \brief Hugging Face byte-level BPE (tokenizer.json), the DeepSeek-V3 chat template, and
///        streaming decoding. Optional: needs PCRE2.

#include "dsv32/tokenizer/added_vocabulary.hpp"
#include "dsv32/tokenizer/bpe_model.hpp"
#include "dsv32/tokenizer/byte_level.hpp"
#include "dsv32/tokenizer/chat_template.hpp"
#include "dsv32/tokenizer/hf_json.hpp"
#include "dsv32/tokenizer/pre_tokenizer.hpp"
#include "dsv32/tokenizer/regex.hpp"
#include "dsv32/tokenizer/tokenizer.hpp"
#include "dsv32/tokenizer/utf8.hpp"
