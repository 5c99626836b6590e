// comm_messages.h: the pieces of the Communicator's one-line CommError messages (comm.h): the engine's own
// message cut to its first line, a hint at the likely cause, and sizes in readable units.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>

namespace bpbench::dist {

// The first line of an engine's message, trimmed (c10 errors append backtraces; Gloo prefixes a source file).
std::string first_line(const std::string& text);
// An exception's message as first_line (c10::Error without its backtrace).
std::string error_text(const std::exception& e);
// "; a peer rank exited or crashed" or "; ... did not respond within the timeout ..." where the message says
// so, else empty.
std::string hint_for(const std::string& message, std::chrono::milliseconds timeout);
// 1.2 MiB, 3.0 KiB, 17 B.
std::string format_bytes(int64_t bytes);

}  // namespace bpbench::dist
