// process_exit.cpp: see process_exit.h.
#include "profiles/process_exit.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define BPBENCH_EXIT_WITH_TEARDOWN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define BPBENCH_EXIT_WITH_TEARDOWN 1
#endif

namespace bpbench::profiles {

void exit_without_teardown(int status) {
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
#ifdef BPBENCH_EXIT_WITH_TEARDOWN
  std::exit(status);
#else
  std::_Exit(status);
#endif
}

}  // namespace bpbench::profiles
