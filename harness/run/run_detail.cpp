// run_detail.cpp: the small helpers the run layer's files share (run_detail.h).
#include "harness/run/run_detail.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace bpbench::run_detail {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string host_name() {
  char buf[256] = {0};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : "unknown";
}

}  // namespace bpbench::run_detail
