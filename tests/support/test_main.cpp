// test_main.cpp: the test binaries' main: GoogleTest's, ending as bpbench's processes do.
//
// A test process (a shard, a case of its own, a rank this binary launches) skips LibTorch's static teardown
// (profiles/process_exit.h): about a quarter of each process's start-up cost. What a test leaves behind is
// removed in its fixture or in a GoogleTest environment's TearDown, both inside RUN_ALL_TESTS.
#include <gtest/gtest.h>

#include "profiles/process_exit.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bpbench::profiles::exit_without_teardown(RUN_ALL_TESTS());
}
