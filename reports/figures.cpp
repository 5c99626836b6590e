// figures.cpp: running reports/plot.py on plot_data.json, and finding it (see figures.h).
#include "reports/figures.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <system_error>

#include "reports/report.h"

namespace bpbench {

namespace fs = std::filesystem;

namespace report_detail {

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace

std::string run_plot_script(const std::string& python, const std::string& script, const fs::path& data,
                            const fs::path& out_dir) {
  if (script.empty()) return "reports/plot.py not found";
  if (python.find('/') != std::string::npos && access(python.c_str(), X_OK) != 0)
    return fmt::format("cannot run '{}'", python);
  const std::string cmd = fmt::format("{} {} {} {} 2>&1", shell_quote(python), shell_quote(script),
                                      shell_quote(data.string()), shell_quote(out_dir.string()));
  std::fflush(nullptr);
  FILE* p = popen(cmd.c_str(), "r");  // popen execs a shell: no fork-without-exec of a LibTorch process
  if (!p) return "cannot start python";
  std::string output;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 0) return "";
  if (rc == 127) return fmt::format("'{}' not found", python);
  // The last non-empty line says why (plot.py prints one line; a traceback ends with the exception).
  std::istringstream lines(output);
  std::string last;
  for (std::string line; std::getline(lines, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last.empty() ? fmt::format("plot.py exited with status {}", rc) : last;
}

bool nonempty_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && fs::file_size(p, ec) > 0;
}

}  // namespace report_detail

std::string find_plot_script() {
  std::error_code ec;
  const fs::path source = fs::path(BPBENCH_SOURCE_DIR) / "reports" / "plot.py";
  if (fs::is_regular_file(source, ec)) return source.string();
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path dir = exe.parent_path();
  for (const fs::path& p : {dir / ".." / "reports" / "plot.py", dir / "reports" / "plot.py",
                            dir / ".." / "share" / "bpbench" / "plot.py"})
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  return "";
}

}  // namespace bpbench
