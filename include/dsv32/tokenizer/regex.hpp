/// \file
/// \brief PCRE2 regular expressions with the semantics of the Oniguruma patterns in
///        `tokenizer.json`, and the `Split(behavior = Isolated)` iteration built on them.
///
/// The Hugging Face `tokenizers` library compiles `Split` and `ByteLevel` patterns with Oniguruma
/// (Ruby syntax, UTF-8). PCRE2 compiled with `PCRE2_UTF | PCRE2_UCP` agrees with it on literal
/// characters, classes, `\p{..}` general categories, quantifiers and look-around, but not on every
/// escape. translate_oniguruma_pattern() rewrites the escapes whose meaning differs and rejects
/// the ones that cannot be expressed, so a pattern either behaves identically or fails to load:
///
/// | Oniguruma            | meaning                                    | PCRE2 written as            |
/// |----------------------|--------------------------------------------|-----------------------------|
/// | `\s`, `\S`           | Unicode White_Space (U+180E is not one)    | `\p{White_Space}`, `\P{..}` |
/// | `\d`, `\D`           | `\p{Nd}`                                   | unchanged (same under UCP)  |
/// | `\h`, `\H`           | hexadecimal digit                          | rejected                    |
/// | `\w`, `\W`, `\b`, `\B` | Oniguruma's word set                     | rejected                    |
/// | `\uHHHH`             | a code point                               | `\x{HHHH}`                  |
/// | `^`, `$`             | line anchors (Ruby)                        | `PCRE2_MULTILINE`           |
/// | `[a[b]]`, `[a&&b]`   | nested / intersected classes               | rejected                    |
///
/// PCRE2_UCP's own `\s` also matches U+180E MONGOLIAN VOWEL SEPARATOR, which stopped being
/// White_Space in Unicode 6.3; that is why `\s` is rewritten. Differences that remain are those of
/// the Unicode tables each library was built with (characters assigned after the older version).
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
/// \cond
#define PCRE2_CODE_UNIT_WIDTH 8  // pcre2.h requires it; only the explicit *_8 API is used below
/// \endcond
#endif
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "dsv32/core/error.hpp"
#include "dsv32/tokenizer/utf8.hpp"

#if PCRE2_MAJOR < 10 || (PCRE2_MAJOR == 10 && PCRE2_MINOR < 40)
#error "dsv32 tokenizer needs PCRE2 >= 10.40 (Unicode binary properties such as \\p{White_Space})"
#endif

namespace dsv32::bpe {

/// \addtogroup tokenizer
/// @{

/// \brief Rewrites an Oniguruma (Ruby syntax) pattern from `tokenizer.json` into a PCRE2 pattern
///        with the same matches, or throws Error(unsupported) naming `where` for a construct whose
///        meaning would differ (see the table in this file's description).
inline std::string translate_oniguruma_pattern(std::string_view pattern, std::string_view where) {
  auto reject = [&](std::string_view construct, std::string_view why) {
    fail(ErrorKind::unsupported, where, ": regex ", construct, " is not supported (", why,
         "); pattern: ", pattern);
  };
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      if (i + 1 >= pattern.size()) {
        fail(ErrorKind::invalid_file, where, ": regex ends with a lone backslash; pattern: ", pattern);
      }
      const char e = pattern[++i];
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'h': case 'H': reject("\\h/\\H", "hexadecimal digit in Oniguruma, horizontal space in PCRE2"); break;
        case 'w': case 'W': reject("\\w/\\W", "the word sets of Oniguruma and PCRE2 differ"); break;
        case 'b': case 'B':
          if (in_class) {
            out += "\\x08";  // backspace inside a class, in both dialects
          } else {
            reject("\\b/\\B", "the word sets of Oniguruma and PCRE2 differ");
          }
          break;
        case 'u': {  // Ruby's \uHHHH; PCRE2 spells it \x{HHHH}
          const std::string_view hex = pattern.substr(i + 1, 4);
          if (hex.size() != 4 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
            fail(ErrorKind::invalid_file, where, ": regex escape \\u must be followed by 4 hex digits; pattern: ",
                 pattern);
          }
          out += "\\x{";
          out += hex;
          out += '}';
          i += 4;
          break;
        }
        default: out.push_back('\\'); out.push_back(e); break;
      }
      continue;
    }
    if (c == '[') {
      if (in_class) {
        if (i + 1 < pattern.size() && pattern[i + 1] == ':') {  // POSIX class such as [:alpha:]
          const std::size_t close = pattern.find(":]", i + 2);
          if (close == std::string_view::npos) reject("'[' inside a character class", "nested classes");
          out.append(pattern.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
        reject("'[' inside a character class", "nested classes have no PCRE2 equivalent");
      }
      in_class = true;
      out.push_back('[');
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);  // literal ']'
      continue;
    }
    if (in_class && c == ']') in_class = false;
    if (in_class && c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') {
      reject("'&&' (class intersection)", "no PCRE2 equivalent");
    }
    out.push_back(c);
  }
  return out;
}

namespace detail {

/// Per-thread match state. Compiled patterns are immutable and shared between threads; the
/// match data and the JIT stack are not, so each thread gets its own.
class MatchScratch {
 public:
  MatchScratch()
      : data_(pcre2_match_data_create_8(1, nullptr)),
        context_(pcre2_match_context_create_8(nullptr)),
        // The JIT stack grows on demand up to 8 MiB; the default 32 KiB machine stack is too small
        // for long runs of look-ahead backtracking.
        stack_(pcre2_jit_stack_create_8(32 * 1024, 8 * 1024 * 1024, nullptr)) {
    if (data_ == nullptr || context_ == nullptr || stack_ == nullptr) {
      release();
      fail(ErrorKind::state, "PCRE2: cannot allocate match data (out of memory)");
    }
    pcre2_jit_stack_assign_8(context_, nullptr, stack_);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
  ~MatchScratch() { release(); }

  pcre2_match_data_8* data() const noexcept { return data_; }
  pcre2_match_context_8* context() const noexcept { return context_; }

 private:
  void release() noexcept {
    if (stack_ != nullptr) pcre2_jit_stack_free_8(stack_);
    if (context_ != nullptr) pcre2_match_context_free_8(context_);
    if (data_ != nullptr) pcre2_match_data_free_8(data_);
    stack_ = nullptr, context_ = nullptr, data_ = nullptr;
  }
  pcre2_match_data_8* data_;
  pcre2_match_context_8* context_;
  pcre2_jit_stack_8* stack_;
};

inline MatchScratch& match_scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

inline std::string pcre2_message(int code) {
  PCRE2_UCHAR8 buffer[256];
  const int n = pcre2_get_error_message_8(code, buffer, sizeof buffer);
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buffer));
}

struct CodeDeleter {
  void operator()(pcre2_code_8* code) const noexcept { pcre2_code_free_8(code); }
};

}  // namespace detail

/// \brief A compiled PCRE2 pattern (UTF, UCP, JIT when available). Cheap to copy; thread-safe
///        for concurrent matching.
class Regex {
 public:
  /// \brief How the pattern text is to be read.
  enum class Syntax {
    oniguruma,  ///< a `{"Regex": ...}` pattern of tokenizer.json (see translate_oniguruma_pattern())
    literal,    ///< a `{"String": ...}` pattern: matched literally
    pcre2,      ///< a pattern written for PCRE2 itself (used internally), compiled as is
  };

  /// \param pattern the pattern text
  /// \param syntax  how to read it
  /// \param where   the file and field it came from, for error messages
  Regex(std::string_view pattern, Syntax syntax, std::string_view where) : source_(pattern) {
    const std::string translated =
        syntax == Syntax::oniguruma ? translate_oniguruma_pattern(pattern, where) : std::string(pattern);
    // PCRE2_LITERAL admits only a few other options; UCP is meaningless for a literal anyway.
    std::uint32_t options = PCRE2_UTF;
    if (syntax == Syntax::literal) options |= PCRE2_LITERAL;
    if (syntax != Syntax::literal) options |= PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
    if (syntax == Syntax::oniguruma) options |= PCRE2_MULTILINE;
    std::unique_ptr<pcre2_compile_context_8, void (*)(pcre2_compile_context_8*)> context(
        pcre2_compile_context_create_8(nullptr), pcre2_compile_context_free_8);
    if (!context) fail(ErrorKind::state, "PCRE2: cannot allocate a compile context (out of memory)");
    pcre2_set_newline_8(context.get(), PCRE2_NEWLINE_LF);  // Ruby's '$' and '.' know only '\n'
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code_8* code = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(translated.data()), translated.size(),
                                         options, &error_code, &error_offset, context.get());
    if (code == nullptr) {
      fail(ErrorKind::invalid_file, where, ": invalid regex ", pattern, " (PCRE2 form ", translated,
           "): ", detail::pcre2_message(error_code), " at offset ", error_offset);
    }
    code_.reset(code, detail::CodeDeleter{});
    // JIT is an optimisation: a PCRE2 built without it, or a platform without executable memory,
    // still matches through the interpreter.
    jit_ = pcre2_jit_compile_8(code, PCRE2_JIT_COMPLETE) == 0;
  }

  /// \brief Finds the leftmost match in `subject` that starts at or after byte `start`.
  ///
  /// `subject` must be valid UTF-8 and `start` a character boundary (not checked again here).
  /// Look-behind and look-ahead see all of `subject`, nothing outside it.
  /// \returns false when there is none; otherwise sets `[begin, end)` to the match.
  bool find(std::string_view subject, std::size_t start, std::size_t& begin, std::size_t& end) const {
    detail::MatchScratch& scratch = detail::match_scratch();
    const auto* text = reinterpret_cast<PCRE2_SPTR8>(subject.data());
    int rc = 0;
    if (jit_) {
      rc = pcre2_jit_match_8(code_.get(), text, subject.size(), start, 0, scratch.data(), scratch.context());
    }
    if (!jit_ || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The interpreter keeps its backtracking frames on the heap, so it still succeeds where
      // the JIT stack ran out.
      rc = pcre2_match_8(code_.get(), text, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                         scratch.data(), scratch.context());
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      fail(ErrorKind::invalid_argument, "regex ", source_, " failed on a ", subject.size(),
           "-byte piece of text: ", detail::pcre2_message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer_8(scratch.data());
    begin = ovector[0];
    end = ovector[1];
    return true;
  }

  /// \brief Whether the pattern was JIT-compiled.
  bool jit() const noexcept { return jit_; }

  /// \brief The pattern as given (before translation).
  const std::string& source() const noexcept { return source_; }

 private:
  std::shared_ptr<pcre2_code_8> code_;
  std::string source_;
  bool jit_ = false;
};

/// \brief Splits `subject` as Hugging Face's `Split(pattern, behavior = "Isolated")` does: every
///        match and every gap between matches becomes a piece, empty pieces are dropped.
///
/// Matches are enumerated like Oniguruma's `find_iter` in the reference implementation: after a
/// match ending at `e` the search resumes at `e`, and an empty match right at the end of the
/// previous match is skipped by advancing one character.
/// \param regex    the Split pattern
/// \param subject  the text to split (valid UTF-8)
/// \param on_piece called as `on_piece(begin, end)` with byte offsets into `subject`, in order
template <class OnPiece>
void split_isolated(const Regex& regex, std::string_view subject, OnPiece&& on_piece) {
  const std::size_t n = subject.size();
  std::size_t search_from = 0;
  std::size_t previous_end = 0;  // end of the last piece emitted
  std::optional<std::size_t> last_match_end;
  while (search_from <= n) {
    std::size_t begin = 0;
    std::size_t end = 0;
    if (!regex.find(subject, search_from, begin, end)) break;
    if (begin == end && last_match_end == end) {
      if (search_from >= n) break;
      search_from += utf8::char_length(subject, search_from);
      continue;
    }
    search_from = end;
    last_match_end = end;
    if (previous_end < begin) on_piece(previous_end, begin);
    if (begin < end) on_piece(begin, end);
    previous_end = end;
  }
  if (previous_end < n) on_piece(previous_end, n);
}

/// @}

}  // namespace dsv32::bpe
