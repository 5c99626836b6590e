// process_exit.h: a bpbench process ends without running the static destructors of what it linked.
//
// LibTorch registers every operator in static constructors and unregisters them in static destructors: on
// this project's machines that teardown is about 0.26 s of the 0.8 s a `bpbench --version` costs, paid again
// by every cell's child process, every rank and every test process (about 300 processes per ctest run).
// Nothing bpbench writes depends on it: each command has closed its files and joined its threads when it
// returns, and the operating system releases memory, descriptors and (on a GPU) the device context.
// Built with sanitizers (BPBENCH_SANITIZE) the process exits normally, so that LeakSanitizer still runs.
#pragma once

namespace bpbench::profiles {

// Flushes std::cout, std::cerr and C's stdio, then ends the process with `status` (std::_Exit).
[[noreturn]] void exit_without_teardown(int status);

}  // namespace bpbench::profiles
