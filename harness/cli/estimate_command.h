// estimate_command.h: the `bpbench estimate` subcommand over harness/estimate/estimate.h: the estimate at
// given lengths, and the longest length per strategy within a memory budget or on a GPU (estimate_request.h).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace bpbench {

// Prints the answers to `out` as text or (--json) one JSON document; --plot writes a PNG too. Throws
// std::invalid_argument on bad input (one line naming the flag), std::runtime_error when a plot cannot be
// drawn. Returns 0.
int estimate_command(const std::vector<std::string>& args, std::ostream& out);
// `bpbench estimate --help`, naming the strategies and objectives of the registries.
std::string estimate_help();

}  // namespace bpbench
