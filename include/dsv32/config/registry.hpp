/// \file
/// \brief Choosing a compiled config at run time: the presets dsv32 ships, found by name or by
///        matching a config.json.
///
/// Shapes are compile-time, so a program that reads a config.json at run time dispatches to one of
/// the configs compiled into it. Programs for their own models pass their own list:
/// \code
/// dsv32::dispatch_config<dsv32::ConfigList<MyConfig, dsv32::Config671B>>(args, [&]<class C>() {
///   dsv32::Transformer<C> model(args.runtime);
///   ...
/// });
/// \endcode
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "dsv32/config/model_args.hpp"
#include "dsv32/config/presets.hpp"
#include "dsv32/core/error.hpp"

namespace dsv32 {

/// \addtogroup config
/// @{

/// \brief A list of compile-time configs to choose from at run time.
template <class... Configs>
struct ConfigList {
  /// \brief Calls `f.template operator()<C>()` with the first config whose name is `name`; false if none.
  template <class F>
  static bool by_name(std::string_view name, F&& f) {
    return ((Configs::name == name ? (f.template operator()<Configs>(), true) : false) || ...);
  }
  /// \brief Calls `f.template operator()<C>()` with the first config whose shape fields all equal `args`'.
  template <class F>
  static bool matching(const ModelArgs& args, F&& f) {
    return ((args.mismatches<Configs>().empty() ? (f.template operator()<Configs>(), true) : false) || ...);
  }
  /// \brief The configs' names, comma-separated.
  static std::string names() {
    std::string out;
    ((out += (out.empty() ? "" : ", ") + std::string(Configs::name)), ...);
    return out;
  }
};

/// \brief The presets dsv32 ships: the released 671B model and the golden scenarios' tiny configs.
using Presets = ConfigList<Config671B, TinyBf16, TinyBf16RopeInterleaved, TinyFp8Ue8m0Yarn, TinyFp8PlainScale>;

/// \brief Runs `f.template operator()<C>()` with the config of `List` matching `args`; throws
///        Error(invalid_config) naming the compiled configs when none matches.
template <class List = Presets, class F>
void dispatch_config(const ModelArgs& args, F&& f, const std::string& source = "config.json") {
  if (!List::matching(args, f))
    fail(ErrorKind::invalid_config, source, " matches none of the configs compiled into this program (", List::names(),
         "); shapes are compile-time: define a config struct for this model (see ConfigDefaults) and build with it");
}

/// @}

}  // namespace dsv32
