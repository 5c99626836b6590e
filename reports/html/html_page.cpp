// html_page.cpp: the document around a page's body (html_page.h).
#include "reports/html/html_page.h"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

#include "harness/run/results.h"
#include "reports/html/html_assets.h"
#include "reports/html/markdown_html.h"

namespace bpbench::report_detail {

namespace {

// The data as a script element's text: "<" only ever occurs inside JSON strings, where \u003c is the same
// character, so no "</script>" or "<!--" in a cell's reason can end the element early.
std::string embedded_json(const nlohmann::json& data) {
  const std::string dumped = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(dumped.size());
  for (char ch : dumped) {
    if (ch == '<')
      out += "\\u003c";
    else
      out += ch;
  }
  return out;
}

}  // namespace

std::string html_document(const HtmlPage& page) {
  nlohmann::json data = page.data.is_object() ? page.data : nlohmann::json::object();
  if (!data.contains("figures")) data["figures"] = nlohmann::json::object();  // report.js reads it always
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
      "script-src 'unsafe-inline'; img-src data:\">\n"
      "<meta name=\"generator\" content=\"bpbench {}\">\n<title>{}</title>\n<style>\n{}</style>\n</head>\n"
      "<body>\n{}<footer class=\"bp-muted\"><p>Written by bpbench {}. One file: its style, script and data "
      "are "
      "inline; it fetches nothing.</p></footer>\n"
      "<script type=\"application/json\" "
      "id=\"bp-data\">{}</script>\n<script>\n{}</script>\n</body>\n</html>\n",
      html_escape(kBpbenchVersion), html_escape(page.title), html_assets::kStyle, page.body_html,
      html_escape(kBpbenchVersion), embedded_json(data), html_assets::kScript);
}

void write_html(const std::filesystem::path& path, const HtmlPage& page) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << html_document(page);
  out.close();
  if (!out) throw std::runtime_error(fmt::format("cannot write '{}'", path.string()));
}

}  // namespace bpbench::report_detail
