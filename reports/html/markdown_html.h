// markdown_html.h: the markdown that bpbench's reports write, as HTML (internal to reports/, in
// bpbench::report_detail). The report, the history and compare render their tables once, as markdown; the
// HTML pages are that markdown converted, so a table can never say one thing in report.md and another in
// report.html.
//
// The subset is what reports/ writes, and no more: "#"-"###" headings, paragraphs (a line ending in two
// spaces breaks), "- " lists (nested by two spaces), pipe tables with an alignment row ("\|" is a pipe inside
// a cell), fenced code, `code`, **bold**, [text](url), bare http(s) links, and a line that is only an image,
// ![caption](name.png), which becomes <figure class="bp-figure" data-figure="name"> for the page's script to
// draw into (the PNG is report.md's). Everything else is text, escaped.
#pragma once

#include <string>

namespace bpbench::report_detail {

// Text for HTML: & < > " ' escaped.
std::string html_escape(const std::string& s);

// The markdown as a fragment of HTML. Every table carries class "bp-table" (the page's script makes it
// sortable), every heading an id made of its words ("peak-bp-memory"), for links.
std::string markdown_to_html(const std::string& markdown);

}  // namespace bpbench::report_detail
