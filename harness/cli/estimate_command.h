// estimate_command.h: the `bpbench estimate` subcommand over harness/run/estimate.h.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace bpbench {

// `bpbench estimate --model NAME --seq-len T [--impl I,...] [--batch B] [--group G] [--partition C]
// [--logits-partition CL] [--dtype D] [--objective O] [--lora-rank R] [--threads N] [--offload O]
// [--device cpu|cuda] [--verbose]`: prints one line per impl (or the full breakdown with --verbose) to `out`.
// Throws std::invalid_argument on bad input. Returns 0.
int estimate_command(const std::vector<std::string>& args, std::ostream& out);
extern const char* kEstimateHelp;

}  // namespace bpbench
