// test_schema.cpp: the published JSON Schemas (reports/results.schema.json, scenarios/scenario.schema.json)
// and the validator that holds files to them (harness/run/json_schema.h).
//
// What keeps the schemas true: every shipped scenario and the committed results fixtures validate; the
// scenario schema lists exactly the keys the parser takes; a result with every optional part filled
// validates, and one more field on it fails naming that field; under ctest every results.json a test makes
// bpbench write is validated as it is written (BPBENCH_VALIDATE_RESULTS=1, tests/discover_test_groups.py).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/validate_command.h"
#include "harness/run/json_schema.h"
#include "harness/run/results.h"
#include "harness/run/scenario.h"
#include "harness/run/train_spec.h"
#include "impls/machinery/dist_common.h"
#include "impls/machinery/offload.h"
#include "reports/compare.h"
#include "reports/report.h"
#include "reports/results_file.h"
#include "tests/support/test_support.h"

namespace bpbench::test_schema {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::json_file;

fs::path source(const std::string& relative) {
  return fs::path(BPBENCH_SOURCE_DIR) / relative;
}

std::set<std::string> property_names(const json& object_schema) {
  std::set<std::string> names;
  for (const auto& [name, _] : object_schema.at("properties").items()) names.insert(name);
  return names;
}

TEST(JsonSchema, BothSchemasLoadAndUseOnlyKeywordsTheValidatorTakes) {
  EXPECT_NO_THROW(results_schema());
  EXPECT_NO_THROW(scenario_schema());
  EXPECT_THROW(check_schema_keywords(json::parse(R"({"type": "string", "pattern": "^a"})")),
               std::logic_error);
}

TEST(JsonSchema, ViolationsNameThePathAndTheProblem) {
  const json schema = json::parse(R"({
    "type": "object", "required": ["cells"], "additionalProperties": false,
    "properties": {"cells": {"type": "array", "items": {"$ref": "#/$defs/cell"}}},
    "$defs": {"cell": {"type": "object", "additionalProperties": false,
                       "properties": {"peak": {"type": "integer", "minimum": 0},
                                      "status": {"enum": ["ok", "oom"]},
                                      "loss": {"anyOf": [{"type": "null"}, {"type": "number"}]}}}}})");
  EXPECT_EQ(schema_violation(schema, json::parse(R"({"cells": [{"peak": 1.0, "loss": null}]})")),
            std::nullopt);
  EXPECT_EQ(*schema_violation(schema, json::parse(R"({"cells": [{}, {"peak": "12"}]})")),
            R"(cells[1].peak: expected integer, got string "12")");
  EXPECT_EQ(*schema_violation(schema, json::parse(R"({"cells": [{"peak": 1.5}]})")),
            "cells[0].peak: expected integer, got number 1.5");
  EXPECT_EQ(*schema_violation(schema, json::parse(R"({"cells": [{"peak": -1}]})")),
            "cells[0].peak: -1 is below the minimum 0");
  EXPECT_EQ(*schema_violation(schema, json::parse(R"({"cells": [{"status": "fine"}]})")),
            R"(cells[0].status: "fine" is not one of ["ok","oom"])");
  EXPECT_EQ(*schema_violation(schema, json::parse(R"({"cells": [{"loss": "x"}]})")),
            R"(cells[0].loss: expected null or number, got string "x")");
  EXPECT_EQ(*schema_violation(schema, json::parse(R"({"cells": [{"peek": 3}]})")),
            R"(cells[0]: unknown field "peek" (valid: loss, peak, status))");
  EXPECT_EQ(*schema_violation(schema, json::parse(R"({})")), R"((top level): missing "cells")");
}

TEST(Schemas, EveryShippedScenarioValidates) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(source("scenarios"))) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name.find(".schema.") != std::string::npos) continue;
    ++files;
    const auto why = schema_violation(scenario_schema(), json_file(entry.path()));
    EXPECT_FALSE(why) << name << ": " << *why;
  }
  EXPECT_GE(files, 20);
}

TEST(Schemas, TheScenarioSchemaListsExactlyTheKeysTheParserTakes) {
  const json& schema = scenario_schema();
  const std::vector<std::string> top = scenario_keys(), grid = grid_keys(), measure = measure_keys(),
                                 train = TrainSpec::keys();
  EXPECT_EQ(property_names(schema), std::set<std::string>(top.begin(), top.end()));
  EXPECT_EQ(property_names(schema.at("$defs").at("grid")), std::set<std::string>(grid.begin(), grid.end()));
  const json& measure_schema = schema.at("$defs").at("measure");
  EXPECT_EQ(property_names(measure_schema), std::set<std::string>(measure.begin(), measure.end()));
  EXPECT_EQ(property_names(measure_schema.at("properties").at("train")),
            std::set<std::string>(train.begin(), train.end()));
  // The results' axes are the grid's keys.
  EXPECT_EQ(property_names(results_schema().at("$defs").at("axes")),
            std::set<std::string>(grid.begin(), grid.end()));
  // The sharding values both schemas list are the registry's, and the offload values.
  const json shardings = dist::sharding_names();
  EXPECT_EQ(schema.at("$defs").at("grid").at("properties").at("sharding").at("anyOf")[0].at("enum"),
            shardings);
  EXPECT_EQ(results_schema().at("$defs").at("axes").at("properties").at("sharding").at("enum"), shardings);
  const json offloads = offload_names();
  EXPECT_EQ(schema.at("$defs").at("offload").at("enum"), offloads);
  EXPECT_EQ(results_schema().at("$defs").at("axes").at("properties").at("offload").at("enum"), offloads);
  EXPECT_EQ(estimate_schema().at("properties").at("setting").at("properties").at("offload").at("enum"),
            offloads);
}

TEST(Schemas, TheCommittedResultsFixturesValidate) {
  // results_small.json was written by an older bpbench (inline timelines, probes without reasons): the
  // schema still reads what the readers read.
  for (const char* file : {"tests/fixtures/results_small.json", "tests/fixtures/results_small_first.json",
                           "tests/fixtures/compare_time_a.json", "tests/fixtures/compare_time_b.json",
                           "tests/fixtures/compare_time_c.json"}) {
    const auto why = schema_violation(results_schema(), json_file(source(file)));
    EXPECT_FALSE(why) << file << ": " << *why;
  }
}

// Each table that drives CellResult's to_json and from_json (harness/run/result_fields.cpp) names exactly the
// fields its object has in the schema, but for what only older files or a peer write.
TEST(Schemas, TheResultsTablesAndTheSchemaNameTheSameFields) {
  const std::map<std::string, std::set<std::string>> not_written_by_bpbench = {
      {"cell", {"case"}},        // streambp-official's exactness check (a peer)
      {"memory", {"timeline"}},  // older files: the timeline inline
  };
  const json& defs = results_schema().at("$defs");
  for (const auto& [record, names] : result_field_names()) {
    SCOPED_TRACE(record);
    std::set<std::string> in_schema = property_names(defs.at(record));
    if (not_written_by_bpbench.count(record)) {
      for (const auto& name : not_written_by_bpbench.at(record)) {
        EXPECT_EQ(in_schema.erase(name), 1u) << name;
      }
    }
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), in_schema);
    EXPECT_EQ(names.size(), in_schema.size()) << "a field twice in the table";
  }
}

// A result with every optional part the writer knows filled in: what CellResult::to_json can write.
CellResult everything() {
  CellResult r;
  r.cell.model = "tiny";
  r.cell.impl = "streambp";
  r.cell.seq_len = 64;
  r.threads = 2;
  r.loss = 4.5;
  r.wall_s = 1.25;
  r.rope = json::object({{"rope_type", "default"}, {"rope_theta", 10000.0}});
  r.sliding_window = json{{"window", 24}, {"layers", {0, 2}}, {"of", 3}, {"rope", nullptr}};
  r.train = json{{"steps", {{{"step", 1}, {"loss", 4.5}, {"lr", 1e-3}, {"grad_norm", 1.0}, {"time_s", 0.1}}}},
                 {"eval", {{{"step", 1}, {"loss", 4.4}}}}};
  MemoryResult m;
  m.base_bytes = 100;
  m.peak_bytes = 300;
  m.peak_by_category = {{"params", 50}, {"grads", 50}};
  m.estimate_bytes = 290;
  m.timeline_file = "timelines/cell-000.json";
  m.trace_file = "timelines/cell-000.trace.json";
  m.reserved_peak_bytes = 512;
  m.alloc_retries = 0;
  m.snapshot_file = "timelines/cell-000.pickle";
  m.device_activity = json{{"kernels", 3}, {"memcpys", 1}, {"memsets", 0}, {"dropped", 0}, {"incomplete", 0}};
  m.host_peak_bytes = 64;
  m.estimate_host_bytes = 64;
  r.memory = m;
  r.time = TimeResult{0.5, 0.4, 0.6, 1, {0.4, 0.5, 0.6}, 0.1, 0.2, 2048.0};
  GradErrorResult g;
  g.reference = "float64";
  g.reference_device = "cpu";
  g.groups["all"] = ErrorStats{};
  r.grad_error = g;
  ComputeResult c;
  c.tflops_per_s = 1.5;
  c.mfu = 0.3;
  c.hfu = 0.4;
  c.peak = json{{"gpu", "H100"}, {"precision", "bf16"}, {"tflops", 989.0}, {"source", "datasheet"}};
  r.compute = c;
  r.data = json{{"file", "data.json"}, {"sha256", "ab"}, {"sequences", 4}};
  MaxLenRecord ml;
  ml.max_seq_len = 512;
  ml.probes = {Probe{512, "ok", 290, ""}};
  ml.host_budget_bytes = 1 << 20;
  r.max_len = ml;
  r.world_size = 2;
  r.comm = json{{"all_reduce", 1}};
  r.ranks = json::array({{{"rank", 0},
                          {"status", "ok"},
                          {"peak_bytes", 300},
                          {"base_bytes", 100},
                          {"time_median_s", 0.5},
                          {"comm", nullptr}}});
  return r;
}

json document_with(const json& cell) {
  return {{"schema", kResultsSchema},
          {"complete", true},
          {"cells_total", 1},
          {"meta", {{"argv", {"bpbench"}}, {"device", {{"kind", "cpu"}}}, {"threads", 2}}},
          {"cells", {cell}}};
}

TEST(Schemas, EveryFieldTheWriterWritesIsInTheSchemaAndOneMoreFails) {
  const json cell = everything().to_json();
  const auto why = schema_violation(results_schema(), document_with(cell));
  EXPECT_FALSE(why) << *why;
  json extra = cell;
  extra["memory"]["peak_bytes_per_token"] = 12;
  EXPECT_EQ(schema_violation(results_schema(), document_with(extra))
                .value_or("")
                .rfind("cells[0].memory: unknown field \"peak_bytes_per_token\"", 0),
            0u);
  extra = cell;
  extra["tokens_per_s"] = 1000.0;
  EXPECT_NE(schema_violation(results_schema(), document_with(extra)).value_or("").find("\"tokens_per_s\""),
            std::string::npos);
}

TEST(Schemas, ValidateCommandSaysOkOrNamesTheFieldInOneLine) {
  testing::TempDir tmp;
  const fs::path good = tmp.dir() / "results.json", bad = tmp.dir() / "broken.json";
  json doc = document_with(everything().to_json());
  std::ofstream(good) << doc.dump();
  doc["cells"][0]["memory"]["peak_bytes"] = "a lot";
  std::ofstream(bad) << doc.dump();
  std::ostringstream out;
  EXPECT_EQ(validate_command({good.string(), source("scenarios/quickstart.json").string()}, out), 0);
  EXPECT_EQ(out.str(), fmt::format("{}: ok (bpbench.results/1)\n{}: ok (scenario)\n", good.string(),
                                   source("scenarios/quickstart.json").string()));
  try {
    validate_command({bad.string()}, out);
    ADD_FAILURE() << "a broken file validated";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("validate: {}: cells[0].memory.peak_bytes: expected integer, got string \"a lot\" "
                          "(valid: what reports/results.schema.json describes)",
                          bad.string()));
  }
}

// Every results file an earlier bpbench wrote stays readable (results.h). results_small_first.json is the
// first results.json bpbench wrote (commit 88bddcc, before the schema was published): each reader takes it
// as the current version, and it compares cell for cell with a file written later.
TEST(ResultsVersions, TheFirstFileBpbenchWroteIsReadByEveryReader) {
  const fs::path first = source("tests/fixtures/results_small_first.json");
  const json doc = load_results(first);
  EXPECT_EQ(doc.at("schema"), kResultsSchema);
  ASSERT_EQ(doc.at("cells").size(), 26u);
  const std::string report = render_report_markdown(doc, first.parent_path());
  EXPECT_NE(report.find("checkpoint-chunked-head"), std::string::npos);
  const CompareReport same = compare_results(doc, load_results(testing::results_fixture()), CompareOptions{});
  EXPECT_EQ(same.count(Verdict::missing) + same.count(Verdict::added), 0) << same.markdown();
  std::ostringstream out;
  EXPECT_EQ(validate_command({first.string()}, out), 0);
  EXPECT_EQ(out.str(), first.string() + ": ok (bpbench.results/1)\n");
}

TEST(ResultsVersions, AnUnknownVersionIsRefusedNamingTheOnesThisBuildReads) {
  EXPECT_EQ(readable_results_schemas().back(), kResultsSchema);
  testing::TempDir tmp;
  const fs::path future = tmp.dir() / "results.json";
  json doc = json_file(source("tests/fixtures/results_small.json"));
  doc["schema"] = "bpbench.results/99";
  std::ofstream(future) << doc.dump();
  for (const auto& read : std::vector<std::function<void()>>{[&] { load_results(future); },
                                                             [&] {
                                                               std::ostringstream out;
                                                               validate_command({future.string()}, out);
                                                             }}) {
    try {
      read();
      ADD_FAILURE() << "a file of an unknown version was read";
    } catch (const InputError& e) {
      EXPECT_EQ(
          std::string(e.what()),
          fmt::format("'{}' has schema 'bpbench.results/99', which this bpbench cannot read (valid: {})",
                      future.string(), kResultsSchema));
    }
  }
}

}  // namespace
}  // namespace bpbench::test_schema
