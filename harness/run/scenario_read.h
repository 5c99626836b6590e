// scenario_read.h: the checked readers behind every scenario key, internal to harness/run/. Each names the
// key (`where`) and the valid values in its one-line InputError, so a message never drifts from a parser.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/run/scenario.h"

namespace bpbench::scenario_detail {

std::string join(const std::vector<std::string>& items);  // "a, b, c"
// A value as the user wrote it, short enough for a one-line message.
std::string show(const nlohmann::json& v);
std::string type_word(const nlohmann::json& v);  // "a number", "a list", ...

// Integers (1e6 included) >= min.
int64_t read_int(const nlohmann::json& v, const std::string& where, int64_t min, const std::string& valid);
// Finite numbers >= min (> min where exclusive).
double read_number(const nlohmann::json& v, const std::string& where, double min, bool exclusive,
                   const std::string& valid);
bool read_bool(const nlohmann::json& v, const std::string& where);
std::string read_string(const nlohmann::json& v, const std::string& where, const std::string& valid);
// A string among `choices`: else "WHERE: unknown WHAT 'x'" with `valid` (default: the choices, joined).
std::string read_choice(const nlohmann::json& v, const std::string& where, const std::string& what,
                        const std::vector<std::string>& choices, const std::string& valid = "");

// The grid object, checked row by row against the grid table (scenario_grid.cpp), one axis per grid key in
// expansion order; absent keys get their default.
std::vector<GridAxis> parse_grid(const nlohmann::json& g);

}  // namespace bpbench::scenario_detail
