// estimate_output.h: `bpbench estimate`'s three ways of showing its answers (estimate_request.h): text
// tables, the JSON document of reports/estimate.schema.json, and a PNG drawn by reports/plot.py.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>

#include "harness/cli/estimate_request.h"

namespace bpbench {

// The setting in one line, the estimate at each (impl, T) with its FLOPs, and the longest lengths: one table
// per budget, or one row per GPU with --gpu all.
void print_estimate_text(const EstimateRequest& request, const EstimateAnswers& answers, std::ostream& out);

// Every number the text shows, and every phase and term (reports/estimate.schema.json, version 1).
nlohmann::json estimate_json(const EstimateRequest& request, const EstimateAnswers& answers);
constexpr int kEstimateJsonVersion = 1;

// Peak against T for each impl (the estimate at lengths spanning the request's), every budget as a line, the
// longest lengths marked; written to request.plot_file by reports/plot.py. Throws std::runtime_error in one
// line when it cannot be drawn (no python3 or matplotlib, a directory that cannot be written).
void draw_estimate_plot(const EstimateRequest& request, const EstimateAnswers& answers);

}  // namespace bpbench
