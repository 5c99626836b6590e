// allocation_failure.cpp: allocation_failure.h.
#include "harness/run/allocation_failure.h"

#include <cmath>
#include <cstdlib>
#include <regex>

namespace bpbench {

bool is_allocation_failure(const std::string& message) {
  for (const char* said : {"can't allocate memory", "not enough memory", "out of memory"})
    if (message.find(said) != std::string::npos) return true;
  return false;
}

std::optional<int64_t> requested_bytes(const std::string& message) {
  static const std::regex cpu("tried to allocate ([0-9]+) bytes");
  static const std::regex cuda("Tried to allocate ([0-9]+(?:\\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB)");
  std::smatch m;
  if (std::regex_search(message, m, cpu)) return std::strtoll(m[1].str().c_str(), nullptr, 10);
  if (std::regex_search(message, m, cuda)) {
    const std::string unit = m[2].str();
    const double scale = unit == "KiB"   ? 1024.0
                         : unit == "MiB" ? 1024.0 * 1024
                         : unit == "GiB" ? 1024.0 * 1024 * 1024
                         : unit == "TiB" ? 1024.0 * 1024 * 1024 * 1024
                                         : 1.0;
    return static_cast<int64_t>(std::llround(std::strtod(m[1].str().c_str(), nullptr) * scale));
  }
  return std::nullopt;
}

}  // namespace bpbench
