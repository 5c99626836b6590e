// main.cpp: the bpbench command-line entry point (see harness/cli/cli.h).
#include "harness/cli/cli.h"
#include "profiles/heap_policy.h"
#include "profiles/process_exit.h"

int main(int argc, char** argv) {
  bpbench::profiles::keep_freed_heap_memory();  // before any allocation that could be trimmed
  bpbench::profiles::exit_without_teardown(bpbench::cli_main(argc, argv));  // why: profiles/process_exit.h
}
