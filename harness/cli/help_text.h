// help_text.h: help texts that name what the registries hold: a fixed text with @TOKEN@ placeholders, each
// replaced by a list read from a registry when the help is printed, so no help lists names by hand.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bpbench {

// `text` with the first occurrence of each token replaced by its value.
inline std::string with_names(std::string text,
                              const std::vector<std::pair<std::string, std::string>>& names) {
  for (const auto& [token, value] : names)
    if (const auto at = text.find(token); at != std::string::npos) text.replace(at, token.size(), value);
  return text;
}

}  // namespace bpbench
