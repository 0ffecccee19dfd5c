/// \file
/// \brief Tensor sources (where a model's weights come from, under dsv32's names) and the checked
///        load that walks the model's parameter list. Checkpoint directories: <dsv32/io/checkpoint.hpp>.
#pragma once

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
#include "dsv32/layers/parameter.hpp"

namespace dsv32 {

/// \addtogroup io
/// @{

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
        const bool aligned = reinterpret_cast<std::uintptr_t>(t.data) % dtype_size(t.dtype) == 0;
        if (!opts.borrow || t.dtype != p.dtype() || !aligned || t.bytes() == 0) return nullptr;
        owner = source.owner_of(t);
        return t.data;
      },
      [&](const Parameter<Backend>& p, WeightUploader<Backend>& uploader, void* dst) {
        const TensorInfo& t = *source.find(p.name());
        uploader.copy(dst, t.data, t.dtype, p.dtype(), static_cast<std::size_t>(p.numel()));
      },
      opts.staging_bytes);
}

/// \brief The reference's file name of a model-parallel shard: `model{rank}-mp{world}.safetensors`.
inline std::string shard_file_name(int rank, int world) {
  return "model" + std::to_string(rank) + "-mp" + std::to_string(world) + ".safetensors";
}

/// @}

}  // namespace dsv32
