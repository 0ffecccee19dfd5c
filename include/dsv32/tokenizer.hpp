/// \file
/// \brief Umbrella header of the optional tokenizer component (CMake target `dsv32::tokenizer`,
///        which links PCRE2): dsv32::Tokenizer, dsv32::StreamDecoder, dsv32::ChatTemplate,
///        DeepSeek-V3.2's encoding (dsv32::deepseek_v3_2), dsv32::ChatOutputParser.
///
/// \code
/// #include <dsv32/tokenizer.hpp>
///
/// const auto tok = dsv32::Tokenizer::from_directory("/models/DeepSeek-V3.2-Exp");
/// const std::vector<dsv32::ChatMessage> chat = {{"user", "Hello!"}};
/// const std::string prompt = tok.apply_chat_template(chat, {.add_generation_prompt = true, .thinking = true});
/// std::vector<int32_t> ids = tok.encode(prompt);
/// dsv32::ChatOutputParser reply(tok, dsv32::ChatOutputParser::start_state(prompt));
/// for (int32_t id : generated) {
///   const dsv32::ChatOutputDelta d = reply.push(id);
///   std::cout << d.reasoning << d.content << std::flush;   // and d.tool_calls as they complete
/// }
/// reply.finish();
/// const dsv32::ChatMessage answer = reply.output().message();   // for the next turn
/// \endcode
#pragma once

/// \defgroup tokenizer Tokenizer
/// \brief Hugging Face byte-level BPE (tokenizer.json), DeepSeek's chat templates, streaming
///        decoding and the parsing of replies (reasoning, answer, tool calls). Optional: needs PCRE2.

#include "dsv32/tokenizer/added_vocabulary.hpp"
#include "dsv32/tokenizer/bpe_model.hpp"
#include "dsv32/tokenizer/byte_level.hpp"
#include "dsv32/tokenizer/chat_format.hpp"
#include "dsv32/tokenizer/chat_output.hpp"
#include "dsv32/tokenizer/chat_reply.hpp"
#include "dsv32/tokenizer/chat_template.hpp"
#include "dsv32/tokenizer/deepseek_v3_2_completion.hpp"
#include "dsv32/tokenizer/deepseek_v3_2_encoding.hpp"
#include "dsv32/tokenizer/hf_json.hpp"
#include "dsv32/tokenizer/pre_tokenizer.hpp"
#include "dsv32/tokenizer/python_json.hpp"
#include "dsv32/tokenizer/regex.hpp"
#include "dsv32/tokenizer/tokenizer.hpp"
#include "dsv32/tokenizer/utf8.hpp"
