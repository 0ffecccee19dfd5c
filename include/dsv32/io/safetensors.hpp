/// \file
/// \brief Reading and writing safetensors files: a validating memory-mapped reader and a
///        streaming writer.
///
/// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian u64 `N`, then
/// `N` bytes of UTF-8 JSON (possibly padded with trailing spaces), then the data section. The
/// JSON object maps each tensor name to `{"dtype": "BF16", "shape": [..], "data_offsets":
/// [begin, end]}` (offsets relative to the data section, which starts at byte `8 + N`) and may
/// hold `"__metadata__": {string: string}`.
///
/// SafetensorsFile::open() checks everything before handing out a single pointer, so that no
/// byte pattern can make the reader (or a loader trusting its TensorInfo) read out of bounds.
/// What it accepts, exactly:
///  - the length field fits the file and is at most SafetensorsFile::kMaxHeaderBytes;
///  - the header is valid UTF-8 JSON, an object, nested at most kMaxJsonDepth deep, with no
///    key repeated in any object (nlohmann::json would silently keep one of two duplicates);
///  - `__metadata__`, if present, is an object whose values are strings;
///  - every other entry is an object with exactly the fields dtype (a name parse_dtype()
///    knows), shape (non-negative integers; any rank, including 0) and data_offsets (two
///    integers 0 <= begin <= end), with end - begin == numel * dtype_size computed without
///    overflow, and end within the data section;
///  - the tensors' byte ranges tile the data section exactly: no overlap, **no hole between
///    tensors and no trailing byte after the last one**. The specification requires the buffer to
///    be entirely indexed and the reference implementation rejects both; a hole or a tail is what
///    a writer bug or a concatenation accident leaves behind, and accepting it would hide bytes
///    no tensor accounts for.
/// Every violation throws Error(ErrorKind::invalid_file) naming the file, the tensor where one is
/// involved, what was expected and what was found.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsv32/core/dtype.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/io/mmap.hpp"

namespace Eigen {
// Declared (as Eigen itself forward-declares them) so that TensorInfo::as<Eigen::bfloat16>()
// is recognised without making every includer of this header parse Eigen.
struct bfloat16;
struct half;
}  // namespace Eigen

namespace dsv32 {

/// \defgroup io File formats
/// \brief Memory-mapped files and the safetensors checkpoint format.
/// @{

/// \brief Whether a tensor of dtype `d` may be viewed as an array of T by TensorInfo::as<T>().
///
/// Value types: `float` = F32, `double` = F64, `std::int64_t` = I64, `std::int32_t` = I32,
/// `std::int16_t` = I16, `std::int8_t` = I8, `Eigen::bfloat16` = BF16, `Eigen::half` = F16.
/// Raw storage: `std::uint16_t` for the bits of BF16 or F16, `std::uint8_t` for U8, BOOL and
/// F8_E4M3 codes (decode these with dsv32::decode_e4m3), `std::byte` for the bytes of any dtype.
template <class T>
constexpr bool viewable_as(DType d) noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, std::byte>) return true;
  else if constexpr (std::is_same_v<U, float>) return d == DType::F32;
  else if constexpr (std::is_same_v<U, double>) return d == DType::F64;
  else if constexpr (std::is_same_v<U, std::int64_t>) return d == DType::I64;
  else if constexpr (std::is_same_v<U, std::int32_t>) return d == DType::I32;
  else if constexpr (std::is_same_v<U, std::int16_t>) return d == DType::I16;
  else if constexpr (std::is_same_v<U, std::int8_t>) return d == DType::I8;
  else if constexpr (std::is_same_v<U, std::uint16_t>) return d == DType::BF16 || d == DType::F16;
  else if constexpr (std::is_same_v<U, std::uint8_t>) return d == DType::U8 || d == DType::BOOL || d == DType::F8_E4M3;
  else if constexpr (std::is_same_v<U, Eigen::bfloat16>) return d == DType::BF16;
  else if constexpr (std::is_same_v<U, Eigen::half>) return d == DType::F16;
  else return false;
}

namespace detail {

template <class T>
inline constexpr bool is_tensor_element_v =
    std::is_same_v<std::remove_cv_t<T>, std::byte> || std::is_same_v<std::remove_cv_t<T>, float> ||
    std::is_same_v<std::remove_cv_t<T>, double> || std::is_same_v<std::remove_cv_t<T>, std::int64_t> ||
    std::is_same_v<std::remove_cv_t<T>, std::int32_t> || std::is_same_v<std::remove_cv_t<T>, std::int16_t> ||
    std::is_same_v<std::remove_cv_t<T>, std::int8_t> || std::is_same_v<std::remove_cv_t<T>, std::uint16_t> ||
    std::is_same_v<std::remove_cv_t<T>, std::uint8_t> || std::is_same_v<std::remove_cv_t<T>, Eigen::bfloat16> ||
    std::is_same_v<std::remove_cv_t<T>, Eigen::half>;

/// Every dtype dsv32 knows, in the order messages list them.
inline constexpr std::array<DType, 11> kAllDTypes = {DType::F32, DType::BF16, DType::F8_E4M3, DType::F16,
                                                     DType::F64, DType::I64,  DType::I32,     DType::I16,
                                                     DType::I8,  DType::U8,   DType::BOOL};

/// A name or value quoted for a message: control bytes escaped, long strings shortened (a
/// corrupt header can hold a 100 MB "name").
inline std::string quoted(std::string_view s, std::size_t max_chars = 200) {
  std::string out = "'";
  const std::size_t n = std::min(s.size(), max_chars);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (n < s.size()) out += "...";
  out += '\'';
  return out;
}

/// A JSON value rendered for a message, shortened.
inline std::string json_excerpt(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

/// `a * b` unless it exceeds `limit`.
constexpr bool mul_within(std::uint64_t a, std::uint64_t b, std::uint64_t limit, std::uint64_t& out) noexcept {
  if (a != 0 && b > limit / a) return false;
  out = a * b;
  return out <= limit;
}

/// "[a, b, c]", as Shape::str() prints.
inline std::string shape_string(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

/// Number of elements of `shape` and its size in bytes for `dtype`; false if a dimension is
/// negative or either count exceeds int64 (the element count of a shape with a zero
/// dimension is 0, however large the others).
inline bool shape_extent(std::span<const std::int64_t> shape, DType dtype, std::uint64_t& numel,
                         std::uint64_t& bytes) noexcept {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  numel = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0) numel = 0;
  }
  if (numel != 0) {
    for (std::int64_t d : shape)
      if (!mul_within(numel, static_cast<std::uint64_t>(d), kMax, numel)) return false;
  }
  return mul_within(numel, dtype_size(dtype), kMax, bytes);
}

/// Whether `s` is valid UTF-8 (what a JSON string must hold).
inline bool valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr std::uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

}  // namespace detail

/// \brief One tensor of a SafetensorsFile: its name, dtype, shape and where its bytes lie.
///
/// Validated by SafetensorsFile::open(): `end - begin == numel() * dtype_size(dtype)` and
/// [begin, end) lies inside the data section. `data` points into the file's mapping, so a
/// TensorInfo is valid only while its SafetensorsFile is alive (hold SafetensorsFile::keep_alive()).
///
/// Alignment: the format does not align tensors, so `data` may be misaligned for the element
/// type. as<T>() refuses a misaligned view (a typed read through it would be undefined
/// behaviour); copy_to() and read_as_f32() always work because they go through memcpy.
struct TensorInfo {
  std::string name;                  ///< tensor name as written in the header
  DType dtype = DType::F32;          ///< element type
  std::vector<std::int64_t> shape;   ///< dimensions, outermost first; empty for a scalar
  std::uint64_t begin = 0;           ///< first byte, relative to the start of the data section
  std::uint64_t end = 0;             ///< one past the last byte, relative to the data section
  const std::byte* data = nullptr;   ///< first byte in the mapping (`begin` bytes into the data section)
  const std::filesystem::path* file = nullptr;  ///< the file it belongs to (for messages); may be null

  /// \brief Size of the tensor's data in bytes (`end - begin`).
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(end - begin); }
  /// \brief Number of elements (1 for a scalar, 0 if any dimension is 0).
  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;  // cannot overflow: checked when the file was opened
    return n;
  }
  /// \brief Rank (number of dimensions).
  std::size_t rank() const noexcept { return shape.size(); }
  /// \brief The shape as "[a, b, c]" ("[]" for a scalar).
  std::string shape_str() const { return detail::shape_string(shape); }
  /// \brief The tensor's bytes; always safe, whatever the alignment.
  std::span<const std::byte> raw() const noexcept { return {data, bytes()}; }

  /// \brief "file: tensor 'name'", the prefix of messages about this tensor.
  std::string where() const {
    std::string s = file ? file->string() + ": " : std::string();
    return s + "tensor " + detail::quoted(name);
  }

  /// \brief The data viewed as `numel()` elements of T, borrowed from the mapping.
  /// \tparam T an element type accepted by viewable_as() (std::byte gives the raw bytes)
  /// \throws Error(ErrorKind::invalid_file) if the dtype does not match T;
  ///         Error(ErrorKind::unsupported) if the data is not aligned for T in memory
  ///         (the file's offsets decide this; use copy_to() or read_as_f32() instead).
  template <class T>
  std::span<const T> as() const {
    static_assert(detail::is_tensor_element_v<T>,
                  "TensorInfo::as<T>: T must be float, double, std::int64_t/int32_t/int16_t/int8_t, "
                  "std::uint16_t (BF16/F16 bits), std::uint8_t (U8/BOOL/F8_E4M3 codes), Eigen::bfloat16, "
                  "Eigen::half or std::byte");
    if constexpr (std::is_same_v<std::remove_cv_t<T>, std::byte>) {
      return raw();
    } else {
      if (!viewable_as<T>(dtype))
        fail(ErrorKind::invalid_file, where(), " has dtype ", dtype_name(dtype), " and cannot be viewed as ",
             sizeof(T), "-byte elements of another type");
      if (bytes() == 0) return {};
      if (reinterpret_cast<std::uintptr_t>(data) % alignof(T) != 0)
        fail(ErrorKind::unsupported, where(), " (", dtype_name(dtype), ") starts at data-section offset ", begin,
             ", which leaves it misaligned for ", alignof(T), "-byte-aligned elements in memory; read it with copy_to() or "
             "read_as_f32() instead of as<T>()");
      return {reinterpret_cast<const T*>(data), static_cast<std::size_t>(numel())};
    }
  }

  /// \brief Copies the tensor's `bytes()` bytes to `dst` (any alignment).
  void copy_to(void* dst) const noexcept {
    if (bytes()) std::memcpy(dst, data, bytes());
  }

  /// \brief Writes the tensor's `numel()` values to `dst` as float: F32 copied, BF16 widened
  ///        exactly (a BF16 is the top half of the float with the same value).
  /// \throws Error(ErrorKind::invalid_file) for any other dtype.
  void read_as_f32(float* dst) const {
    const auto n = static_cast<std::size_t>(numel());
    if (dtype == DType::F32) {
      copy_to(dst);
    } else if (dtype == DType::BF16) {
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t half_bits;
        std::memcpy(&half_bits, data + 2 * i, 2);  // safetensors data is little-endian, like every host dsv32 targets
        const std::uint32_t bits = static_cast<std::uint32_t>(half_bits) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
    } else {
      fail(ErrorKind::invalid_file, where(), " has dtype ", dtype_name(dtype), "; read_as_f32 reads F32 or BF16 tensors");
    }
  }
  /// \brief read_as_f32() into `dst`, which must hold exactly `numel()` floats.
  /// \throws Error(ErrorKind::invalid_argument) if the sizes differ.
  void read_as_f32(std::span<float> dst) const {
    if (dst.size() != static_cast<std::size_t>(numel()))
      fail(ErrorKind::invalid_argument, where(), " has ", numel(), " elements but the destination holds ", dst.size());
    read_as_f32(dst.data());
  }

  /// \brief Checks that the tensor has `dtype` and `shape`.
  /// \throws Error(ErrorKind::invalid_file) naming the file, the tensor, and both dtypes and shapes.
  void expect(DType expected_dtype, std::span<const std::int64_t> expected_shape) const {
    if (dtype != expected_dtype || !std::equal(shape.begin(), shape.end(), expected_shape.begin(), expected_shape.end()))
      fail(ErrorKind::invalid_file, where(), " is ", dtype_name(dtype), ' ', shape_str(), ", expected ",
           dtype_name(expected_dtype), ' ', detail::shape_string(expected_shape));
  }
  /// \brief expect() with a braced shape: `t.expect(DType::BF16, {rows, cols})`.
  void expect(DType expected_dtype, std::initializer_list<std::int64_t> expected_shape) const {
    expect(expected_dtype, std::span<const std::int64_t>(expected_shape.begin(), expected_shape.size()));
  }
};

/// \brief A validated, memory-mapped safetensors file. Immutable; shared by the model and its loaders.
///
/// Lifetime: open() returns a `std::shared_ptr<const SafetensorsFile>`, and every TensorInfo,
/// every `data` pointer and every span from TensorInfo::as() borrow the mapping it owns. To keep
/// weight memory borrowed from the file (e.g. `Buffer::borrow(ptr, n, owner)`), pass
/// keep_alive() — or the shared_ptr itself, which converts to `std::shared_ptr<const void>` —
/// as the owner: the file stays mapped until the last such pointer is released.
///
/// The mapping is read-only (PROT_READ): writing through a borrowed pointer faults.
class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  /// \brief Largest header open() accepts (the reference implementation's limit).
  static constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
  /// \brief Deepest JSON nesting open() accepts (a valid header nests 3 deep). Bounds the work
  ///        a corrupt header like "[[[[..." can cause.
  static constexpr int kMaxJsonDepth = 16;

  /// \brief Maps and validates `path`.
  /// \throws Error(ErrorKind::io) if the file cannot be opened or mapped;
  ///         Error(ErrorKind::invalid_file) if it is not a valid safetensors file (the rules are listed in
  ///         this header's file comment).
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path) {
    std::shared_ptr<SafetensorsFile> file(new SafetensorsFile(MappedFile(path)));
    file->parse();
    return file;
  }

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  /// \brief The path the file was opened with.
  const std::filesystem::path& path() const noexcept { return map_.path(); }
  /// \brief All tensors, in data-offset order.
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  /// \brief The tensor called `name`, or nullptr. O(log n).
  const TensorInfo* find(std::string_view name) const noexcept {
    auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                               [&](std::size_t i, std::string_view n) { return tensors_[i].name < n; });
    return it != by_name_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
  }
  /// \brief The tensor called `name`.
  /// \throws Error(ErrorKind::invalid_file) naming the file and the tensor if there is none.
  const TensorInfo& at(std::string_view name) const {
    if (const TensorInfo* t = find(name)) return *t;
    fail(ErrorKind::invalid_file, path().string(), ": no tensor ", detail::quoted(name), " (the file holds ",
         tensors_.size(), " tensors)");
  }
  /// \brief The `__metadata__` entries (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// \brief An owner that keeps the mapping (and so every TensorInfo::data) alive.
  std::shared_ptr<const void> keep_alive() const { return shared_from_this(); }
  /// \brief The underlying mapping (e.g. to MappedFile::advise() before reading a range).
  const MappedFile& mapping() const noexcept { return map_; }
  /// \brief The header length N from the first 8 bytes.
  std::uint64_t header_size() const noexcept { return header_size_; }
  /// \brief Where the data section starts in the file (8 + N).
  std::uint64_t data_offset() const noexcept { return 8 + header_size_; }
  /// \brief Size of the data section in bytes.
  std::uint64_t data_size() const noexcept { return map_.size() - data_offset(); }

 private:
  explicit SafetensorsFile(MappedFile map) : map_(std::move(map)) {}

  template <class... Args>
  [[noreturn]] void invalid(Args&&... pieces) const {
    fail(ErrorKind::invalid_file, path().string(), ": ", std::forward<Args>(pieces)...);
  }

  void parse() {
    using nlohmann::json;
    const std::uint64_t size = map_.size();
    if (size < 8)
      invalid("the file is ", size, " bytes, too short for the 8-byte header length of a safetensors file");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint64_t>(map_.data()[i]);
    if (n > kMaxHeaderBytes)
      invalid("the header length field says ", n, " bytes, more than the ", kMaxHeaderBytes,
              " a safetensors header may have (not a safetensors file?)");
    if (n > size - 8)
      invalid("the header length field says ", n, " bytes but only ", size - 8,
              " bytes follow it (truncated file, or not a safetensors file?)");
    header_size_ = n;
    const std::uint64_t data_bytes = size - 8 - n;

    const json header = parse_header(reinterpret_cast<const char*>(map_.data()) + 8, static_cast<std::size_t>(n));
    if (!header.is_object())
      invalid("the header is a JSON ", header.type_name(), ", expected an object mapping tensor names to entries");

    tensors_.reserve(header.size());
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        read_metadata(it.value());
      } else {
        tensors_.push_back(read_entry(it.key(), it.value(), data_bytes));
      }
    }
    check_layout(data_bytes);

    by_name_.resize(tensors_.size());
    for (std::size_t i = 0; i < by_name_.size(); ++i) by_name_[i] = i;
    std::sort(by_name_.begin(), by_name_.end(),
              [&](std::size_t a, std::size_t b) { return tensors_[a].name < tensors_[b].name; });
  }

  // Parses the header, rejecting duplicate keys (at any depth) and nesting deeper than
  // kMaxJsonDepth as the parser meets them.
  nlohmann::json parse_header(const char* text, std::size_t n) const {
    using nlohmann::json;
    std::vector<std::set<std::string>> keys_of_open_objects;
    std::string entry;  // current top-level key, for messages about nested duplicates
    const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
      switch (event) {
        case json::parse_event_t::object_start:
        case json::parse_event_t::array_start:
          if (depth >= kMaxJsonDepth)
            invalid("the header nests JSON deeper than ", kMaxJsonDepth, " levels (a valid header nests 3)");
          if (event == json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
          break;
        case json::parse_event_t::key: {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (depth == 1) entry = key;
          if (!keys_of_open_objects.back().insert(key).second) {
            if (depth == 1 && key == "__metadata__") invalid("the header holds two \"__metadata__\" entries");
            if (depth == 1) invalid("tensor ", detail::quoted(key), " appears twice in the header");
            invalid("key ", detail::quoted(key), " appears twice inside the header entry ", detail::quoted(entry));
          }
          break;
        }
        case json::parse_event_t::object_end: keys_of_open_objects.pop_back(); break;
        default: break;
      }
      return true;
    };
    // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows; a
    // raw NUL is never valid JSON (inside strings it must be escaped), so refuse it up front.
    if (const void* nul = std::memchr(text, 0, n))
      invalid("the header holds a NUL byte at offset ", static_cast<const char*>(nul) - text,
              " (JSON may be padded only with spaces)");
    try {
      return json::parse(text, text + n, check, /*allow_exceptions=*/true, /*ignore_comments=*/false);
    } catch (const json::exception& e) {
      invalid("the ", n, "-byte header is not valid UTF-8 JSON: ", e.what());
    }
  }

  void read_metadata(const nlohmann::json& m) {
    if (!m.is_object())
      invalid("\"__metadata__\" is a JSON ", m.type_name(), ", expected an object of string values");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string())
        invalid("\"__metadata__\" entry ", detail::quoted(it.key()), " is a JSON ", it.value().type_name(), " (",
                detail::json_excerpt(it.value()), "), expected a string");
      metadata_.emplace(it.key(), it.value().get<std::string>());
    }
  }

  // A JSON integer in [0, 2^64) or nothing.
  static bool read_uint(const nlohmann::json& j, std::uint64_t& out) {
    if (j.is_number_unsigned()) {
      out = j.get<std::uint64_t>();
      return true;
    }
    if (j.is_number_integer() && j.get<std::int64_t>() >= 0) {
      out = static_cast<std::uint64_t>(j.get<std::int64_t>());
      return true;
    }
    return false;
  }

  TensorInfo read_entry(const std::string& name, const nlohmann::json& e, std::uint64_t data_bytes) const {
    TensorInfo t;
    t.name = name;
    t.file = &map_.path();
    const std::string tensor = "tensor " + detail::quoted(name);
    if (!e.is_object())
      invalid(tensor, ": the entry is a JSON ", e.type_name(), " (", detail::json_excerpt(e),
              "), expected an object with dtype, shape and data_offsets");
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
        invalid(tensor, ": unexpected field ", detail::quoted(it.key()), " (an entry has only dtype, shape and data_offsets)");
    }

    const auto dtype = e.find("dtype");
    if (dtype == e.end()) invalid(tensor, ": the entry has no \"dtype\"");
    if (!dtype->is_string())
      invalid(tensor, ": dtype is a JSON ", dtype->type_name(), " (", detail::json_excerpt(*dtype),
              "), expected a string such as \"BF16\"");
    const std::string& dtype_text = dtype->get_ref<const std::string&>();
    const auto parsed = parse_dtype(dtype_text);
    if (!parsed) {
      std::string known;
      for (DType d : detail::kAllDTypes) known += (known.empty() ? "" : ", ") + std::string(dtype_name(d));
      invalid(tensor, ": unknown dtype ", detail::quoted(dtype_text), " (dsv32 reads ", known, ")");
    }
    t.dtype = *parsed;

    const auto shape = e.find("shape");
    if (shape == e.end()) invalid(tensor, ": the entry has no \"shape\"");
    if (!shape->is_array())
      invalid(tensor, ": shape is a JSON ", shape->type_name(), " (", detail::json_excerpt(*shape),
              "), expected an array of non-negative integers");
    t.shape.reserve(shape->size());
    for (std::size_t i = 0; i < shape->size(); ++i) {
      const nlohmann::json& d = (*shape)[i];
      std::uint64_t v = 0;
      if (!read_uint(d, v) || v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        invalid(tensor, ": shape[", i, "] is ", detail::json_excerpt(d), ", expected a non-negative integer below 2^63");
      t.shape.push_back(static_cast<std::int64_t>(v));
    }

    const auto offsets = e.find("data_offsets");
    if (offsets == e.end()) invalid(tensor, ": the entry has no \"data_offsets\"");
    if (!offsets->is_array() || offsets->size() != 2 || !read_uint((*offsets)[0], t.begin) ||
        !read_uint((*offsets)[1], t.end))
      invalid(tensor, ": data_offsets is ", detail::json_excerpt(*offsets),
              ", expected two non-negative integers [begin, end]");
    if (t.begin > t.end)
      invalid(tensor, ": data_offsets [", t.begin, ", ", t.end, "] end before they begin");

    std::uint64_t numel = 0, bytes = 0;
    if (!detail::shape_extent(t.shape, t.dtype, numel, bytes))
      invalid(tensor, ": shape ", t.shape_str(), " of ", dtype_name(t.dtype),
              " elements overflows: its element count or byte size exceeds 2^63 - 1");
    if (t.end - t.begin != bytes)
      invalid(tensor, ": ", dtype_name(t.dtype), ' ', t.shape_str(), " needs ", bytes, " bytes but data_offsets [",
              t.begin, ", ", t.end, "] span ", t.end - t.begin);
    if (t.end > data_bytes)
      invalid(tensor, ": data_offsets [", t.begin, ", ", t.end, "] reach past the data section, which holds ", data_bytes,
              " bytes: the header promises at least ", data_offset() + t.end, " bytes of file but it has ",
              map_.size(), " (truncated file?)");
    t.data = map_.data() + data_offset() + t.begin;
    return t;
  }

  // Orders the tensors by offset and checks that their ranges tile [0, data_bytes) exactly.
  void check_layout(std::uint64_t data_bytes) {
    std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
      if (a.begin != b.begin) return a.begin < b.begin;
      if (a.end != b.end) return a.end < b.end;
      return a.name < b.name;
    });
    std::uint64_t covered = 0;  // [0, covered) is tiled by the tensors seen so far
    const TensorInfo* last = nullptr;
    for (const TensorInfo& t : tensors_) {
      if (t.begin < covered)
        invalid("tensors ", detail::quoted(last->name), " (data_offsets [", last->begin, ", ", last->end, "]) and ",
                detail::quoted(t.name), " (data_offsets [", t.begin, ", ", t.end, "]) overlap");
      if (t.begin > covered)
        invalid("bytes [", covered, ", ", t.begin, ") of the data section belong to no tensor (a hole ",
                last ? "between " + detail::quoted(last->name) + " and " : std::string("before "), detail::quoted(t.name),
                "); the data section must be entirely covered by tensors");
      covered = t.end;
      last = &t;
    }
    if (covered != data_bytes)
      invalid("the data section holds ", data_bytes, " bytes but the tensors cover only the first ", covered, " (",
              data_bytes - covered, " trailing bytes", last ? " after " + detail::quoted(last->name) : std::string(),
              "); the data section must be entirely covered by tensors");
  }

  MappedFile map_;
  std::uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;     // data-offset order
  std::vector<std::size_t> by_name_;    // indices into tensors_, sorted by name
  std::map<std::string, std::string> metadata_;
};

namespace detail {

/// Writes a file under a temporary name next to `target` and renames it over `target` on
/// commit(); if destroyed before commit(), removes the temporary file. Buffered: small writes
/// are gathered, large ones go straight to the kernel.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path target) : target_(std::move(target)) {
    if (!target_.has_filename())
      fail(ErrorKind::invalid_argument, "cannot write '", target_.string(), "': the path names no file");
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; fd_ < 0; ++attempt) {
      temp_ = target_;
      std::string name = ".";  // built by appends: GCC 12 warns falsely (-Wrestrict) on "." + string
      name += target_.filename().string();
      name += ".tmp-";
      name += std::to_string(::getpid());
      name += '-';
      name += std::to_string(counter.fetch_add(1));
      temp_.replace_filename(name);
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && (errno != EEXIST || attempt > 100)) fail_errno("cannot create");
    }
    buffer_.reserve(kBufferBytes);
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }

  void write(const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    if (buffer_.size() + n <= kBufferBytes) {
      buffer_.insert(buffer_.end(), p, p + n);
      return;
    }
    flush();
    if (n < kBufferBytes) buffer_.insert(buffer_.end(), p, p + n);
    else write_all(p, n);
  }

  /// Flushes, fsyncs, closes and renames over the target (then fsyncs the directory, best effort).
  void commit() {
    flush();
    if (::fsync(fd_) != 0) fail_errno("cannot sync");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail_errno("cannot close");
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      fail(ErrorKind::io, "cannot rename '", temp_.string(), "' to '", target_.string(),
           "': ", std::generic_category().message(err));
    }
    committed_ = true;
    const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  static constexpr std::size_t kBufferBytes = std::size_t{4} << 20;

  void flush() {
    write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  void write_all(const char* p, std::size_t n) {
    while (n > 0) {
      const ::ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_errno("cannot write");
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  [[noreturn]] void fail_errno(const char* what) const {
    const int err = errno;
    fail(ErrorKind::io, what, " '", temp_.string(), "' (temporary file for '", target_.string(),
         "'): ", std::generic_category().message(err));
  }

  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<char> buffer_;
};

}  // namespace detail

/// \brief Builds a safetensors file from tensors that are read only when write() runs.
///
/// The writer never copies tensor data: add() with a pointer records the pointer, and the
/// caller's memory must stay valid and unchanged until write() returns; add() with a Producer
/// records a callback that write() calls once, in file order, to stream the tensor's bytes
/// (a converter can dequantize or slice one tensor at a time, so writing a many-GB shard needs
/// no more memory than its largest tensor, or less).
///
/// The file written: header keys sorted (nlohmann::json's order), the header padded with spaces
/// so the data section starts at a multiple of 8, the tensors stored contiguously in name order
/// with no gaps. It is written to a temporary file in the target's directory, synced and renamed
/// over the target, so a failure (an error, a throwing producer, a crash) never leaves a partial
/// file under the target's name.
class SafetensorsWriter {
 public:
  /// \brief Appends `bytes` bytes at `data` to the tensor being written.
  using Sink = std::function<void(const void* data, std::size_t bytes)>;
  /// \brief Streams a tensor's bytes: must pass exactly the tensor's byte size to the sink, in
  ///        one or more calls, and may throw to abandon the write.
  using Producer = std::function<void(const Sink& sink)>;

  /// \brief Adds a tensor whose `bytes` bytes lie at `data` (borrowed until write() returns).
  /// \throws Error(ErrorKind::invalid_argument) if `bytes` is not numel * dtype_size, the shape
  ///         has a negative dimension or overflows, the name is taken, "__metadata__" or not UTF-8.
  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, const void* data, std::size_t bytes) {
    Entry e = make_entry(name, dtype, std::move(shape));
    if (bytes != e.bytes)
      fail(ErrorKind::invalid_argument, "tensor ", detail::quoted(name), ": ", dtype_name(dtype), ' ',
           detail::shape_string(e.shape), " needs ", e.bytes, " bytes but ", bytes, " were given");
    if (bytes && !data) fail(ErrorKind::invalid_argument, "tensor ", detail::quoted(name), ": null data for ", bytes, " bytes");
    e.data = data;
    entries_.emplace(std::move(name), std::move(e));
  }

  /// \brief Adds a tensor whose bytes `produce` streams when write() reaches it.
  /// \throws Error(ErrorKind::invalid_argument) as the other add().
  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, Producer produce) {
    Entry e = make_entry(name, dtype, std::move(shape));
    if (!produce) fail(ErrorKind::invalid_argument, "tensor ", detail::quoted(name), ": empty producer");
    e.produce = std::move(produce);
    entries_.emplace(std::move(name), std::move(e));
  }

  /// \brief Adds a `__metadata__` entry.
  /// \throws Error(ErrorKind::invalid_argument) if `key` is already set or either string is not UTF-8.
  void add_metadata(std::string key, std::string value) {
    if (!detail::valid_utf8(key) || !detail::valid_utf8(value))
      fail(ErrorKind::invalid_argument, "metadata ", detail::quoted(key), ": key and value must be valid UTF-8");
    if (metadata_.count(key)) fail(ErrorKind::invalid_argument, "metadata key ", detail::quoted(key), " is already set");
    metadata_.emplace(std::move(key), std::move(value));
  }

  /// \brief Number of tensors added.
  std::size_t size() const noexcept { return entries_.size(); }
  /// \brief Total bytes of tensor data the file will hold.
  std::uint64_t data_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& [name, e] : entries_) n += e.bytes;
    return n;
  }

  /// \brief Writes the file (replacing `path` atomically if it exists).
  /// \throws Error(ErrorKind::io) with the reason if the file cannot be created, written, synced
  ///         or renamed; Error(ErrorKind::invalid_argument) if a producer passes the wrong number
  ///         of bytes; whatever a producer throws. In every case `path` is left as it was.
  void write(const std::filesystem::path& path) const {
    nlohmann::json header = nlohmann::json::object();
    std::uint64_t offset = 0;
    for (const auto& [name, e] : entries_) {
      header[name] = {{"dtype", std::string(dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", nlohmann::json::array({offset, offset + e.bytes})}};
      offset += e.bytes;
    }
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-aligned
    if (text.size() > SafetensorsFile::kMaxHeaderBytes)
      fail(ErrorKind::invalid_argument, "cannot write '", path.string(), "': its header would be ", text.size(),
           " bytes, more than the ", SafetensorsFile::kMaxHeaderBytes, " readers accept (too many tensors)");

    detail::AtomicFileWriter out(path);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
    out.write(length, 8);
    out.write(text.data(), text.size());
    for (const auto& [name, e] : entries_) {
      if (!e.produce) {
        out.write(e.data, e.bytes);
        continue;
      }
      std::uint64_t written = 0;
      const Sink sink = [&, &name = name, &e = e](const void* data, std::size_t n) {
        if (n > e.bytes - written)
          fail(ErrorKind::invalid_argument, "the producer of tensor ", detail::quoted(name), " passed more than its ",
               e.bytes, " bytes");
        if (n && !data) fail(ErrorKind::invalid_argument, "the producer of tensor ", detail::quoted(name), " passed null data");
        out.write(data, n);
        written += n;
      };
      e.produce(sink);
      if (written != e.bytes)
        fail(ErrorKind::invalid_argument, "the producer of tensor ", detail::quoted(name), " passed ", written,
             " bytes, expected ", e.bytes);
    }
    out.commit();
  }

 private:
  struct Entry {
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::uint64_t bytes = 0;
    const void* data = nullptr;
    Producer produce;
  };

  // A validated entry for a new tensor (not yet inserted).
  Entry make_entry(const std::string& name, DType dtype, std::vector<std::int64_t> shape) const {
    if (name == "__metadata__")
      fail(ErrorKind::invalid_argument, "\"__metadata__\" is reserved and cannot name a tensor");
    if (!detail::valid_utf8(name)) fail(ErrorKind::invalid_argument, "tensor name ", detail::quoted(name), " is not valid UTF-8");
    if (entries_.count(name)) fail(ErrorKind::invalid_argument, "tensor ", detail::quoted(name), " was already added");
    Entry e;
    std::uint64_t numel = 0;
    if (!detail::shape_extent(shape, dtype, numel, e.bytes))
      fail(ErrorKind::invalid_argument, "tensor ", detail::quoted(name), ": shape ", detail::shape_string(shape),
           " has a negative dimension or more than 2^63 - 1 elements or bytes");
    e.dtype = dtype;
    e.shape = std::move(shape);
    return e;
  }

  std::map<std::string, Entry> entries_;  // name order = file order
  std::map<std::string, std::string> metadata_;
};

/// @}

}  // namespace dsv32
