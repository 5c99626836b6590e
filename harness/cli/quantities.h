// quantities.h: the command line's numbers with units: token counts ("32k" = 32768) and byte sizes
// ("80GB" = 80e9, "80GiB" = 80 x 2^30), each refused in one line naming the flag and the forms it takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bpbench {

// "4096", "8k" / "8K" (x 1024), "1M" / "1m" (x 2^20), "1.5k" (1536; the product must be a whole number).
// Throws std::invalid_argument naming `flag` for anything else, a fraction of a token, or a count < 1.
int64_t parse_token_count(const std::string& flag, const std::string& text);

// A comma-separated list of token counts: "8k,32k,128k" = {8192, 32768, 131072}, in the order given.
std::vector<int64_t> parse_token_counts(const std::string& flag, const std::string& text);

// Bytes: a plain integer, or a number with a unit, case-insensitive: B; kB, MB, GB, TB (powers of 1000, as
// vendors state device memory); KiB, MiB, GiB, TiB (powers of 1024). "80GB" = 80000000000, "79.5GiB".
// Throws std::invalid_argument naming `flag` for anything else or a negative size.
int64_t parse_byte_size(const std::string& flag, const std::string& text);

// "85.52 GB (79.65 GiB)": bytes for people, both ways vendors and tools print them.
std::string format_gb(int64_t bytes);

}  // namespace bpbench
