// json_schema.h: bpbench's published JSON Schemas (reports/results.schema.json,
// scenarios/scenario.schema.json, reports/estimate.schema.json, compiled into the binary) and the validator
// that holds a document to them.
//
// The validator takes the part of JSON Schema (draft 2020-12) those two files use, with its meaning: "type"
// (a name or a list; an integer is a number without a fraction), "enum", "const", "minimum",
// "exclusiveMinimum", "properties", "required", "additionalProperties" (false or a schema), "items",
// "minItems", "anyOf", and "$ref" to "#/$defs/NAME". Every other keyword (title, description, $schema, $id,
// default, examples) is documentation to it. A schema using a keyword outside that list that constrains (say
// "pattern") is refused when the schemas are loaded, not ignored: the test suite loads both.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace bpbench {

// The first violation of `schema` by `doc`, as one line naming where: "cells[3].memory.peak_bytes: expected
// integer, got string"; nullopt when `doc` conforms.
std::optional<std::string> schema_violation(const nlohmann::json& schema, const nlohmann::json& doc);

// The published schemas, parsed once (throws std::logic_error when one is malformed or uses a keyword the
// validator does not take).
const nlohmann::json& results_schema();
const nlohmann::json& scenario_schema();
const nlohmann::json& estimate_schema();  // reports/estimate.schema.json: `bpbench estimate --json`

// Throws std::logic_error naming the keyword when `schema` uses one the validator does not take.
void check_schema_keywords(const nlohmann::json& schema);

}  // namespace bpbench
