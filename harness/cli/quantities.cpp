// quantities.cpp: quantities.h.
#include "harness/cli/quantities.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace bpbench {

namespace {

// The number in front of a unit, and the unit (lower case): "79.5GiB" -> (79.5, "gib"). Nullopt-like
// failure is a negative `number`.
std::pair<double, std::string> split_number(const std::string& text) {
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
    ++end;
  std::string unit;
  for (size_t i = end; i < text.size(); ++i)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  const std::string digits = text.substr(0, end);
  if (digits.empty() || digits == "." || std::count(digits.begin(), digits.end(), '.') > 1)
    return {-1.0, unit};
  return {std::strtod(digits.c_str(), nullptr), unit};
}

}  // namespace

int64_t parse_token_count(const std::string& flag, const std::string& text) {
  const auto [number, unit] = split_number(text);
  const double scale = unit.empty() ? 1.0 : unit == "k" ? 1024.0 : unit == "m" ? 1048576.0 : -1.0;
  const double tokens = number * scale;
  if (number < 0 || scale < 0 || tokens != std::floor(tokens) || tokens < 1 || tokens > 9.0e15)
    throw std::invalid_argument(fmt::format(
        "estimate: {} expects token counts >= 1 such as 4096, 8k or 1M (k = 1024, M = 1048576), got '{}'",
        flag, text));
  return static_cast<int64_t>(tokens);
}

std::vector<int64_t> parse_token_counts(const std::string& flag, const std::string& text) {
  std::vector<int64_t> counts;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) counts.push_back(parse_token_count(flag, item));
  if (counts.empty() || text.back() == ',')
    throw std::invalid_argument(
        fmt::format("estimate: {} expects a comma-separated list such as 8k,32k,128k, got '{}'", flag, text));
  return counts;
}

int64_t parse_byte_size(const std::string& flag, const std::string& text) {
  const auto [number, unit] = split_number(text);
  static const std::pair<const char*, double> units[] = {
      {"", 1.0},    {"b", 1.0},      {"kb", 1e3},        {"mb", 1e6},           {"gb", 1e9},
      {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  double scale = -1.0;
  for (const auto& [name, value] : units)
    if (unit == name) scale = value;
  const double bytes = std::round(number * scale);
  if (number < 0 || scale < 0 || bytes > 9.0e18)
    throw std::invalid_argument(
        fmt::format("estimate: {} expects bytes: an integer, or a number with a unit (kB, MB, GB, TB: powers "
                    "of 1000; KiB, "
                    "MiB, GiB, TiB: powers of 1024), such as 80GB or 79.5GiB; got '{}'",
                    flag, text));
  return static_cast<int64_t>(bytes);
}

std::string format_gb(int64_t bytes) {
  return fmt::format("{:.2f} GB ({:.2f} GiB)", static_cast<double>(bytes) / 1e9,
                     static_cast<double>(bytes) / 1073741824.0);
}

}  // namespace bpbench
