// html_page.h: one self-contained HTML page of bpbench (report.html, history.html, compare.html): the body
// (markdown_html.h), the data its figures are drawn from, and the style and script inlined (reports/html/
// report.css and report.js). Nothing is fetched from anywhere: the page's Content-Security-Policy allows no
// source but the page itself, so a page that tried would fail in the browser test, not work by accident.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace bpbench::report_detail {

struct HtmlPage {
  std::string title;
  std::string body_html;  // the page's content, a fragment (markdown_to_html)
  // What report.js draws: {"figures": {NAME: data}, "timelines": [...]} (report.js' header lists NAMEs).
  nlohmann::json data = nlohmann::json::object();
};

// The whole document.
std::string html_document(const HtmlPage& page);

// Writes the document to `path`; throws std::runtime_error when it cannot.
void write_html(const std::filesystem::path& path, const HtmlPage& page);

}  // namespace bpbench::report_detail
