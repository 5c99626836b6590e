// option_reader.h: the command line of `bpbench report`, `compare` and `history`, read one argument at a
// time:
// "--name value" and "--name=value" alike, and a missing value as the one-line input error every command
// gives.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "harness/run/scenario.h"

namespace bpbench {

class OptionReader {
 public:
  // `command` prefixes the errors ("compare: --out needs a value"); `valid` is what they list as valid.
  OptionReader(const std::vector<std::string>& args, std::string command, std::string valid, size_t first = 0)
      : args_(args), command_(std::move(command)), valid_(std::move(valid)), next_(first) {}

  // Moves to the next argument; false after the last.
  bool next() {
    if (next_ >= args_.size()) return false;
    at_ = next_++;
    return true;
  }
  const std::string& arg() const { return args_[at_]; }
  // The argument is option `name`, with its value after '=' or not.
  bool is(const std::string& name) const {
    const std::string& a = arg();
    return a == name || a.rfind(name + "=", 0) == 0;
  }
  bool is_help() const { return arg() == "-h" || arg() == "--help"; }
  // Any other "-x" or "--x": an option this command does not know.
  bool is_option() const { return arg().size() > 1 && arg()[0] == '-'; }
  // Option `name`'s value: after its '=', else the next argument (consumed).
  std::string value(const std::string& name) {
    const std::string& a = arg();
    if (a.size() > name.size() && a.compare(0, name.size() + 1, name + "=") == 0)
      return a.substr(name.size() + 1);
    if (next_ >= args_.size()) input_error(fmt::format("{}: {} needs a value", command_, name), valid_);
    return args_[next_++];
  }

 private:
  const std::vector<std::string>& args_;
  std::string command_, valid_;
  size_t next_, at_ = 0;
};

}  // namespace bpbench
