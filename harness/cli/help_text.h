// help_text.h: help texts that name what the registries hold: a fixed text with @TOKEN@ placeholders, each
// replaced by a list read from a registry when the help is printed, so no help lists names by hand.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bpbench {

// The description column of a help line: after its option and the first run of two spaces, else where its
// text starts.
inline size_t description_column(const std::string& line) {
  const size_t first = line.find_first_not_of(' ');
  if (first == std::string::npos) return 0;
  const size_t gap = line.find("  ", first);
  const size_t text = gap == std::string::npos ? std::string::npos : line.find_first_not_of(' ', gap);
  return text == std::string::npos ? first : text;
}

// One help item, its lines joined, broken again at spaces within `width`, continued under its description.
inline std::string rewrap(const std::string& item, size_t width = 110) {
  std::string line = item, out;
  const size_t indent = description_column(item);
  while (line.size() > width && indent < width / 2) {
    const size_t cut = line.rfind(' ', width);
    if (cut == std::string::npos || cut <= indent) break;
    out += line.substr(0, cut) + "\n";
    line = std::string(indent, ' ') + line.substr(line.find_first_not_of(' ', cut));
  }
  return out + line;
}

// `text` with the first occurrence of each token replaced by its value, and the help item it lies in (its
// line and the continuation lines under its description) wrapped again: a list from a registry grows as it
// does, and the text around it follows.
inline std::string with_names(std::string text,
                              const std::vector<std::pair<std::string, std::string>>& names) {
  for (const auto& [token, value] : names) {
    const auto at = text.find(token);
    if (at == std::string::npos) continue;
    text.replace(at, token.size(), value);
    const size_t begin = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
    size_t end = text.find('\n', at);
    std::string item = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    const size_t indent = description_column(item);
    // Continuation lines: as indented as the description, and not a new item.
    while (end != std::string::npos && indent > 0) {
      const size_t next_end = text.find('\n', end + 1);
      const std::string next =
          text.substr(end + 1, next_end == std::string::npos ? std::string::npos : next_end - end - 1);
      if (next.find_first_not_of(' ') != indent) break;
      item += " " + next.substr(indent);
      end = next_end;
    }
    text.replace(begin, (end == std::string::npos ? text.size() : end) - begin, rewrap(item));
  }
  return text;
}

}  // namespace bpbench
