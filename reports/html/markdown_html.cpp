// markdown_html.cpp: reports/' markdown as HTML, block by block, then inline (markdown_html.h).
#include "reports/html/markdown_html.h"

#include <cctype>
#include <map>
#include <sstream>
#include <vector>

namespace bpbench::report_detail {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

size_t indent_of(const std::string& line) {
  size_t n = 0;
  while (n < line.size() && line[n] == ' ') ++n;
  return n;
}

// A link's target, kept only when it cannot run script: a relative path, an anchor or http(s).
std::string safe_href(const std::string& url) {
  const auto colon = url.find(':');
  const auto slash = url.find('/');
  const bool has_scheme = colon != std::string::npos && (slash == std::string::npos || colon < slash);
  if (has_scheme && !starts_with(url, "http://") && !starts_with(url, "https://")) return "#";
  return html_escape(url);
}

// `code`, **bold**, [text](url) and bare http(s) URLs; the rest escaped.
std::string inline_html(const std::string& s) {
  std::string out;
  bool bold = false;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '`') {
      const auto end = s.find('`', i + 1);
      if (end != std::string::npos) {
        out += "<code>" + html_escape(s.substr(i + 1, end - i - 1)) + "</code>";
        i = end + 1;
        continue;
      }
    }
    if (s.compare(i, 2, "**") == 0) {
      out += bold ? "</strong>" : "<strong>";
      bold = !bold;
      i += 2;
      continue;
    }
    if (s[i] == '[') {
      const auto close = s.find("](", i);
      const auto end = close == std::string::npos ? close : s.find(')', close + 2);
      if (end != std::string::npos && s.find('[', i + 1) > close) {
        out += "<a href=\"" + safe_href(s.substr(close + 2, end - close - 2)) + "\">" +
               inline_html(s.substr(i + 1, close - i - 1)) + "</a>";
        i = end + 1;
        continue;
      }
    }
    if (s.compare(i, 7, "http://") == 0 || s.compare(i, 8, "https://") == 0) {
      size_t end = i;
      while (end < s.size() && !std::isspace(static_cast<unsigned char>(s[end])) && s[end] != ')' &&
             s[end] != '"')
        ++end;
      while (end > i && (s[end - 1] == '.' || s[end - 1] == ',' || s[end - 1] == ';')) --end;
      const std::string url = s.substr(i, end - i);
      out += "<a href=\"" + html_escape(url) + "\">" + html_escape(url) + "</a>";
      i = end;
      continue;
    }
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '|' || s[i + 1] == '*' || s[i + 1] == '`')) {
      out += s[i + 1];
      i += 2;
      continue;
    }
    out += html_escape(std::string(1, s[i]));
    ++i;
  }
  if (bold) out += "</strong>";
  return out;
}

// A table row's cells: split on unescaped pipes, the outer ones dropped.
std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  const std::string t = trim(line);
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i] == '\\' && i + 1 < t.size() && t[i + 1] == '|') {
      cur += "\\|";
      ++i;
    } else if (t[i] == '|') {
      cells.push_back(trim(cur));
      cur.clear();
    } else {
      cur += t[i];
    }
  }
  if (!trim(cur).empty()) cells.push_back(trim(cur));
  return cells;
}

bool is_alignment_row(const std::string& line) {
  const std::string t = trim(line);
  if (t.size() < 3 || t[0] != '|') return false;
  return t.find_first_not_of("|-: ") == std::string::npos && t.find('-') != std::string::npos;
}

class Converter {
 public:
  explicit Converter(const std::string& md) {
    std::istringstream in(md);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines_.push_back(line);
    }
  }

  std::string run() {
    while (at_ < lines_.size()) block();
    return out_;
  }

 private:
  void block() {
    const std::string& line = lines_[at_];
    const std::string t = trim(line);
    if (t.empty()) {
      ++at_;
    } else if (starts_with(t, "```")) {
      code_block();
    } else if (line[0] == '#') {
      heading(line);
    } else if (t[0] == '|' && at_ + 1 < lines_.size() && is_alignment_row(lines_[at_ + 1])) {
      table();
    } else if (starts_with(t, "- ")) {
      list(indent_of(line));
    } else if (starts_with(t, "![") && t.back() == ')') {
      figure(t);
    } else {
      paragraph();
    }
  }

  void heading(const std::string& line) {
    size_t level = 0;
    while (level < line.size() && line[level] == '#') ++level;
    const std::string title = trim(line.substr(level));
    const int h = static_cast<int>(std::min<size_t>(level, 6));
    out_ += "<h" + std::to_string(h) + " id=\"" + unique_id(title) + "\">" + inline_html(title) + "</h" +
            std::to_string(h) + ">\n";
    ++at_;
  }

  // A heading's id: its letters and digits, lower case, words joined by '-', numbered when repeated.
  std::string unique_id(const std::string& title) {
    std::string id;
    for (char ch : title) {
      if (std::isalnum(static_cast<unsigned char>(ch)))
        id += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      else if (!id.empty() && id.back() != '-')
        id += '-';
    }
    while (!id.empty() && id.back() == '-') id.pop_back();
    if (id.empty()) id = "section";
    const int n = ++ids_[id];
    return n == 1 ? id : id + "-" + std::to_string(n);
  }

  void table() {
    const auto header = table_cells(lines_[at_]);
    std::vector<std::string> align;
    for (const auto& a : table_cells(lines_[at_ + 1]))
      align.push_back(!a.empty() && a.back() == ':' ? (a.front() == ':' ? "center" : "num") : "");
    at_ += 2;
    auto cls = [&](size_t i) {
      return i < align.size() && !align[i].empty() ? " class=\"" + align[i] + "\"" : std::string();
    };
    out_ += "<div class=\"bp-table-wrap\"><table class=\"bp-table\">\n<thead><tr>";
    for (size_t i = 0; i < header.size(); ++i)
      out_ += "<th" + cls(i) + ">" + inline_html(header[i]) + "</th>";
    out_ += "</tr></thead>\n<tbody>\n";
    while (at_ < lines_.size() && !trim(lines_[at_]).empty() && trim(lines_[at_])[0] == '|') {
      const auto cells = table_cells(lines_[at_]);
      out_ += "<tr>";
      for (size_t i = 0; i < header.size(); ++i)
        out_ += "<td" + cls(i) + ">" + (i < cells.size() ? inline_html(cells[i]) : "") + "</td>";
      out_ += "</tr>\n";
      ++at_;
    }
    out_ += "</tbody></table></div>\n";
  }

  void list(size_t indent) {
    out_ += "<ul>\n";
    while (at_ < lines_.size()) {
      const std::string& line = lines_[at_];
      const std::string t = trim(line);
      const size_t in = indent_of(line);
      if (!starts_with(t, "- ") || in < indent) break;
      if (in > indent) {
        list(in);  // a nested list belongs to the item above: reopened here for simplicity
        continue;
      }
      std::string item = t.substr(2);
      ++at_;
      // Continuation lines: indented text that is not a new item.
      while (at_ < lines_.size() && indent_of(lines_[at_]) > indent && !trim(lines_[at_]).empty() &&
             !starts_with(trim(lines_[at_]), "- "))
        item += " " + trim(lines_[at_++]);
      out_ += "<li>" + inline_html(item) + "</li>\n";
    }
    out_ += "</ul>\n";
  }

  void figure(const std::string& t) {
    const auto close = t.find("](");
    const std::string caption = t.substr(2, close == std::string::npos ? 0 : close - 2);
    std::string src = close == std::string::npos ? "" : t.substr(close + 2, t.size() - close - 3);
    const auto dot = src.rfind('.');
    if (dot != std::string::npos) src = src.substr(0, dot);
    out_ += "<figure class=\"bp-figure\" data-figure=\"" + html_escape(src) + "\"><figcaption>" +
            inline_html(caption) + "</figcaption></figure>\n";
    ++at_;
  }

  void code_block() {
    ++at_;
    out_ += "<pre><code>";
    while (at_ < lines_.size() && !starts_with(trim(lines_[at_]), "```"))
      out_ += html_escape(lines_[at_++]) + "\n";
    ++at_;
    out_ += "</code></pre>\n";
  }

  void paragraph() {
    out_ += "<p>";
    bool first = true;
    while (at_ < lines_.size()) {
      const std::string& line = lines_[at_];
      const std::string t = trim(line);
      if (t.empty() || line[0] == '#' || starts_with(t, "- ") || starts_with(t, "```") ||
          (t[0] == '|' && at_ + 1 < lines_.size() && is_alignment_row(lines_[at_ + 1])))
        break;
      if (!first) out_ += "\n";
      out_ += inline_html(t);
      if (line.size() >= 2 && line.compare(line.size() - 2, 2, "  ") == 0) out_ += "<br>";
      first = false;
      ++at_;
    }
    out_ += "</p>\n";
  }

  std::vector<std::string> lines_;
  size_t at_ = 0;
  std::string out_;
  std::map<std::string, int> ids_;
};

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string markdown_to_html(const std::string& markdown) {
  return Converter(markdown).run();
}

}  // namespace bpbench::report_detail
