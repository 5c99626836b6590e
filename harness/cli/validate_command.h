// validate_command.h: `bpbench validate FILE...`, a results.json or a scenario against its published schema
// (reports/results.schema.json, scenarios/scenario.schema.json).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace bpbench {

// Prints "FILE: ok (WHICH)" per file to `out`; throws InputError naming the file and the first field that
// does not match. A file with a "schema" key is a results file, any other a scenario.
int validate_command(const std::vector<std::string>& args, std::ostream& out);
extern const char* kValidateHelp;

}  // namespace bpbench
