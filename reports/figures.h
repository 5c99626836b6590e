// figures.h: the figures: plot_data.json -> reports/plot.py -> PNGs (internal to reports/, in
// bpbench::report_detail). Drawing is optional: without python or matplotlib the report keeps its tables.
#pragma once

#include <filesystem>
#include <string>

namespace bpbench::report_detail {

// Which PNGs plot.py wrote, so that report.md links only figures that exist.
struct PlotsDrawn {
  bool peak = false, partition = false, timeline = false, train = false;
};

// Runs `python script args...`; returns "" on success, else a one-line reason.
std::string run_plot_script(const std::string& python, const std::string& script,
                            const std::filesystem::path& data, const std::filesystem::path& out_dir);

// A file plot.py wrote, and wrote something into: a PNG that is missing or empty is not linked.
bool nonempty_file(const std::filesystem::path& p);

}  // namespace bpbench::report_detail
