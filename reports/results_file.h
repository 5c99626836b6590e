// results_file.h: loading and checking a results.json, and the formatters the report and compare share, so
// that both render bytes, times and cells the same way (the report's tables, compare's gate).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bpbench {

// Reads and checks a results.json (schema "bpbench.results/1": an object with a "cells" list whose entries
// have an "axes" object and a "status" string). `path` may also name the directory that holds results.json.
// Throws InputError with a one-line message for a missing file, malformed JSON or the wrong schema.
nlohmann::json load_results(const std::filesystem::path& path);
// results.json itself when `path` names the directory that holds it, else `path`: how RESULTS is resolved.
std::filesystem::path results_file(const std::filesystem::path& path);
// Several results files as one document, to report side by side (bpbench's cells beside a peer's, written by
// impls/peers/hf_checkpoint.py): the first file's meta, every file's cells in order, each cell's file
// references (timeline, trace, snapshot) rewritten relative to the first file's directory, and
// meta.merged_from naming every file with its own meta. One file: that file, unchanged.
nlohmann::json load_merged_results(const std::vector<std::filesystem::path>& paths);
// The same checks on an already parsed document; `origin` names it in messages.
void check_results(const nlohmann::json& doc, const std::string& origin);

// Bytes as rendered text with GiB = 2^30 and MiB = 2^20: "1.23 GiB", "412.6 MiB", "3.42 MiB", "0.366 MiB",
// "<0.001 MiB".
std::string format_bytes(int64_t bytes);
// Seconds with three significant figures or so: "123", "12.3", "1.23", "0.123", "0.00123".
std::string format_time(double seconds);
// FLOPs with SI prefixes and up to three significant figures: "999 FLOP", "6.7 MFLOP", "1.23 PFLOP".
std::string format_flops(int64_t flops);
// A grid value as text: integral numbers without ".0", strings bare, booleans true/false.
std::string axis_value_text(const nlohmann::json& v);
// Axis keys in display order: the scenario's grid_keys() order first, then any others alphabetically.
std::vector<std::string> ordered_axis_keys(const std::vector<nlohmann::json>& axes_list);
// Keys (in display order) with two or more distinct values among the given axes objects (absence is no
// value).
std::vector<std::string> varying_axis_keys(const std::vector<nlohmann::json>& axes_list);
// "impl=plain seq_len=512" for the given keys, skipping keys the axes lack.
std::string axes_label(const nlohmann::json& axes, const std::vector<std::string>& keys);

}  // namespace bpbench
