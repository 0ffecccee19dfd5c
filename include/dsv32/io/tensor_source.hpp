/// \file
/// \brief Tensor sources (where a model's weights come from, under dsv32's names) and the checked
///        load that walks the model's parameter list. Checkpoint directories: <dsv32/io/checkpoint.hpp>.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dsv32/backend/backend.hpp"
#include "dsv32/core/error.hpp"
#include "dsv32/io/safetensors.hpp"
#include "dsv32/weights/parameter.hpp"

namespace dsv32 {

/// \addtogroup io
/// @{

/// \brief Where a tensor's bytes lie in memory: `runs` runs of `run_bytes` bytes each, `stride` bytes
///        apart, the first at `data`. A tensor stored whole is one run; a slice of a larger tensor
///        along an inner dimension (a column-parallel rank's part) is one run per outer index.
struct TensorBytes {
  const std::byte* data = nullptr;  ///< the first byte
  std::uint64_t runs = 1;           ///< how many runs
  std::uint64_t run_bytes = 0;      ///< bytes of each run
  std::uint64_t stride = 0;         ///< bytes from the start of one run to the next

  /// \brief `bytes` contiguous bytes at `data` (a tensor stored whole).
  static TensorBytes whole(const std::byte* data, std::uint64_t bytes) noexcept { return {data, 1, bytes, bytes}; }
  /// \brief Part `part` of `parts` equal parts of a tensor of shape `shape` (elements of `element_bytes`)
  ///        along dimension `dim` — rank `part`'s slice of a tensor split over `parts` ranks.
  static TensorBytes slice(const std::byte* data, const std::vector<std::int64_t>& shape, std::size_t element_bytes,
                           std::size_t dim, std::int64_t part, std::int64_t parts) noexcept {
    std::uint64_t outer = 1, inner = element_bytes;
    for (std::size_t i = 0; i < dim; ++i) outer *= static_cast<std::uint64_t>(shape[i]);
    for (std::size_t i = dim + 1; i < shape.size(); ++i) inner *= static_cast<std::uint64_t>(shape[i]);
    const auto full = static_cast<std::uint64_t>(shape[dim]), local = full / static_cast<std::uint64_t>(parts);
    const std::byte* first = data + static_cast<std::uint64_t>(part) * local * inner;
    if (outer == 1) return whole(first, local * inner);
    return {first, outer, local * inner, full * inner};
  }
  /// \brief Whether the runs follow each other without gaps (the bytes can be used in place).
  bool contiguous() const noexcept { return runs <= 1 || stride == run_bytes; }
  /// \brief Bytes in all.
  std::uint64_t bytes() const noexcept { return runs * run_bytes; }
};

/// \brief Where a model's tensors come from, under dsv32's names (the reference's converted naming:
///        `embed.weight`, `layers.0.attn.wq_a.weight`, `layers.0.attn.wq_a.scale`, ...).
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// \brief The tensor called `name`, or nullptr. The pointer stays valid while the source lives.
  virtual const TensorInfo* find(const std::string& name) const = 0;
  /// \brief An owner that keeps `t`'s bytes alive (to borrow weights from a mapping).
  virtual std::shared_ptr<const void> owner_of(const TensorInfo& t) const = 0;
  /// \brief Every tensor name the source offers (to report tensors the model does not expect).
  virtual std::vector<std::string> names() const = 0;
  /// \brief What the source is, for messages ("file x.safetensors", "checkpoint directory d").
  virtual std::string describe() const = 0;
  /// \brief Where tensor `name` comes from when that is not plain from describe() (e.g. its
  ///        Hugging Face name and shard file), for messages; empty by default.
  virtual std::string origin(const std::string& name) const {
    (void)name;
    return {};
  }
  /// \brief Where `t`'s bytes lie: by default `t.bytes()` contiguous bytes at `t.data`; a source that
  ///        serves slices of larger tensors (HfShardSource) says where its runs are.
  virtual TensorBytes bytes_of(const TensorInfo& t) const { return TensorBytes::whole(t.data, t.bytes()); }
};

/// \brief The tensors of one safetensors file, names as stored.
class SafetensorsSource : public TensorSource {
 public:
  /// \brief Opens and maps the file (see SafetensorsFile::open() for its errors).
  explicit SafetensorsSource(const std::filesystem::path& path) : file_(SafetensorsFile::open(path)) {}
  /// \brief Shares a file already open; it stays mapped while any source or borrowed tensor uses it.
  explicit SafetensorsSource(std::shared_ptr<const SafetensorsFile> file) : file_(std::move(file)) {}

  const TensorInfo* find(const std::string& name) const override { return file_->find(name); }
  std::shared_ptr<const void> owner_of(const TensorInfo&) const override { return file_->keep_alive(); }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& t : file_->tensors()) out.push_back(t.name);
    return out;
  }
  std::string describe() const override { return "file " + file_->path().string(); }
  /// \brief The underlying file.
  const SafetensorsFile& file() const noexcept { return *file_; }

 private:
  std::shared_ptr<const SafetensorsFile> file_;
};

namespace detail {
// " (from <origin>)" when the source can say where a tensor comes from.
inline std::string origin_note(const TensorSource& source, const std::string& name) {
  const std::string o = source.origin(name);
  return o.empty() ? std::string() : " (from " + o + ")";
}
}  // namespace detail

/// \brief Options of a weight load.
struct LoadOptions {
  /// Use weight bytes in place from the memory-mapped file when their dtype is the parameter's and
  /// they are aligned (backends whose memory is host memory): no copy, and the page cache holds the
  /// weights.
  bool borrow = true;
  /// The pinned host buffer that copies to a device backend's memory are staged through (two halves):
  /// with the mapped files, the most host memory a load holds.
  std::size_t staging_bytes = std::size_t{64} << 20;
};

/// \brief Checks that `source` holds exactly the tensors `model` expects — each present, with a dtype
///        the parameter accepts and its exact shape, and nothing extra — then binds them all.
///
/// Every problem found is listed (up to 20) in one Error(invalid_file) naming the tensors and the
/// source; nothing is loaded unless everything checks, so no model is ever half-loaded. Weights are
/// borrowed from the mapping where LoadOptions::borrow allows and the backend's memory is host memory;
/// the rest go into the model's weight arena, converted (BF16 norms to F32) on the way, through a
/// staging buffer of LoadOptions::staging_bytes on a device backend.
/// \tparam Model a Transformer (anything with visit() and load_weights())
template <class Model>
void load_weights(Model& model, const TensorSource& source, const LoadOptions& opts = {}) {
  using Backend = typename Model::backend_type;
  std::vector<std::string> problems;
  std::set<std::string> expected;
  model.visit([&](const std::string& name, Parameter<Backend>& p) {
    expected.insert(name);
    const TensorInfo* t = source.find(name);
    std::ostringstream os;
    const std::vector<std::int64_t> want = p.shape().dims();
    if (!t) {
      os << "missing tensor '" << name << "' (expected " << dtype_name(p.dtype()) << ' ' << p.shape().str() << ')';
    } else if (!p.accepts(t->dtype)) {
      os << "tensor '" << name << "' has dtype " << dtype_name(t->dtype) << ", expected " << dtype_name(p.dtype())
         << (p.dtype() == DType::F32 ? " or BF16" : "") << detail::origin_note(source, name);
    } else if (t->shape != want) {
      os << "tensor '" << name << "' has shape " << t->shape_str() << ", expected " << p.shape().str()
         << detail::origin_note(source, name);
    } else {
      return;
    }
    problems.push_back(os.str());
  });
  for (const std::string& name : source.names())
    if (!expected.count(name))
      problems.push_back("unexpected tensor '" + name + "'" + detail::origin_note(source, name) +
                         " (the model has no such parameter)");
  if (!problems.empty()) {
    std::ostringstream os;
    os << source.describe() << ": " << problems.size() << " problem(s) with the model's tensors:";
    for (std::size_t i = 0; i < problems.size() && i < 20; ++i) os << "\n  " << problems[i];
    if (problems.size() > 20) os << "\n  ... and " << problems.size() - 20 << " more";
    fail(ErrorKind::invalid_file, os.str());
  }
  model.load_weights(
      [&](const Parameter<Backend>& p, std::shared_ptr<const void>& owner) -> const void* {
        const TensorInfo& t = *source.find(p.name());
        const TensorBytes b = source.bytes_of(t);
        const bool aligned = reinterpret_cast<std::uintptr_t>(b.data) % dtype_size(t.dtype) == 0;
        if (!opts.borrow || t.dtype != p.dtype() || !aligned || !b.contiguous() || b.bytes() == 0) return nullptr;
        owner = source.owner_of(t);
        return b.data;
      },
      [&](const Parameter<Backend>& p, WeightUploader<Backend>& uploader, void* dst) {
        const TensorInfo& t = *source.find(p.name());
        const TensorBytes b = source.bytes_of(t);
        const auto n = static_cast<std::size_t>(p.numel());
        if (b.contiguous()) {
          uploader.copy(dst, b.data, t.dtype, p.dtype(), n);
          return;
        }
        // A slice: elements [first, first + count) gathered run by run, converted on the way.
        const std::size_t from = dtype_size(t.dtype), to = dtype_size(p.dtype()), per_run = b.run_bytes / from;
        uploader.write(dst, p.dtype(), n, [&](std::size_t first, std::size_t count, void* host) {
          auto* out = static_cast<std::byte*>(host);
          for (std::size_t done = 0; done < count;) {
            const std::size_t run = (first + done) / per_run, offset = (first + done) % per_run;
            const std::size_t take = std::min(per_run - offset, count - done);
            Parameter<Backend>::convert_host(b.data + run * b.stride + offset * from, t.dtype, p.dtype(), take,
                                             out + done * to);
            done += take;
          }
        });
      },
      opts.staging_bytes);
}

/// \brief The reference's file name of a model-parallel shard: `model{rank}-mp{world}.safetensors`.
inline std::string shard_file_name(int rank, int world) {
  return "model" + std::to_string(rank) + "-mp" + std::to_string(world) + ".safetensors";
}

/// @}

}  // namespace dsv32
