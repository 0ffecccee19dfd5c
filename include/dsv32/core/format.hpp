/// \file
/// \brief Human-readable figures for messages and tool output: format_bytes().
#pragma once

#include <ios>
#include <sstream>
#include <string>

namespace dsv32 {

/// \addtogroup core
/// @{

/// \brief "12.3 GiB"-style byte count.
inline std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(u ? 2 : 0);
  os << bytes << ' ' << units[u];
  return os.str();
}

/// @}

}  // namespace dsv32
