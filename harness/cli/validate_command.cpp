// validate_command.cpp: validate_command.h.
#include "harness/cli/validate_command.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "harness/run/json_schema.h"
#include "harness/run/results.h"
#include "harness/run/scenario.h"

namespace bpbench {

const char* kValidateHelp = R"(usage: bpbench validate FILE...

Checks each file against its published JSON Schema: a results.json (it has a "schema" key; an older version
translated as bpbench's readers translate it) against reports/results.schema.json, the output of `bpbench
estimate --json` (a "bpbench_estimate" key) against reports/estimate.schema.json, any other file against
scenarios/scenario.schema.json. Prints "FILE: ok" per file; the first mismatch is one line naming the file and
the field, exit status 2. A scenario that matches its schema
can still be refused by `bpbench run` for what a schema cannot say (a seq_len beside a max-length search).
)";

int validate_command(const std::vector<std::string>& args, std::ostream& out) {
  if (args.empty()) input_error("validate: no file given", "one or more results.json or scenario files");
  for (const auto& path : args) {
    std::ifstream in(path);
    if (!in) input_error(fmt::format("validate: cannot read '{}'", path), "a readable JSON file");
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      input_error(fmt::format("validate: '{}' is not valid JSON: {}", path, e.what()), "a JSON file");
    }
    const bool results = doc.is_object() && doc.contains("schema");
    const bool estimate = doc.is_object() && doc.contains("bpbench_estimate");
    // An older results version is checked as the reader sees it: translated to the current one.
    const std::string written = results ? upgrade_results(doc, path) : estimate ? "estimate" : "scenario";
    const auto why = schema_violation(results    ? results_schema()
                                      : estimate ? estimate_schema()
                                                 : scenario_schema(),
                                      doc);
    const char* which = results    ? "reports/results.schema.json"
                        : estimate ? "reports/estimate.schema.json"
                                   : "scenarios/scenario.schema.json";
    if (why)
      input_error(fmt::format("validate: {}: {}", path, *why), fmt::format("what {} describes", which));
    out << fmt::format("{}: ok ({})\n", path, written);
  }
  return 0;
}

}  // namespace bpbench
