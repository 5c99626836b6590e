// comm_messages.cpp: the pieces of the Communicator's one-line error messages (comm_messages.h).
#include "impls/machinery/comm_messages.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

namespace bpbench::dist {

std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::string error_text(const std::exception& e) {
  if (auto* c10 = dynamic_cast<const c10::Error*>(&e)) return first_line(c10->what_without_backtrace());
  return first_line(e.what());
}

std::string hint_for(const std::string& message, std::chrono::milliseconds timeout) {
  auto has = [&](const char* s) { return message.find(s) != std::string::npos; };
  if (has("closed by peer") || has("Connection reset") || has("Broken pipe") || has("Connection refused"))
    return "; a peer rank exited or crashed";
  if (has("imed out") || has("imeout"))
    return fmt::format("; a peer rank did not respond within the timeout of {} s (BPBENCH_DIST_TIMEOUT_S)",
                       timeout.count() / 1000.0);
  return "";
}

std::string format_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", bytes / double(1 << 20));
  if (bytes >= (int64_t{1} << 10)) return fmt::format("{:.1f} KiB", bytes / double(1 << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace bpbench::dist
