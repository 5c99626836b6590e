// test_main.cpp: the test binaries' main: GoogleTest's, ending as bpbench's processes do.
//
// A test process (a shard, a case of its own, a rank this binary launches) skips LibTorch's static teardown
// (profiles/process_exit.h): about a quarter of each process's start-up cost. What a test leaves behind is
// removed in its fixture or in a GoogleTest environment's TearDown, both inside RUN_ALL_TESTS.
//
// `--bpbench-make-python-outputs` runs no test: it makes the Python scripts' outputs the tests read
// (test_support.h, made_at_build_time), all at once, as the build does after linking this binary.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <thread>

#include "profiles/process_exit.h"
#include "tests/support/test_support.h"

namespace {

int make_python_outputs() {
  using bpbench::testing::PythonOutput;
  std::vector<std::thread> makers;
  std::vector<const PythonOutput*> outputs(bpbench::testing::python_output_makers().size());
  for (size_t i = 0; i < outputs.size(); ++i)
    makers.emplace_back([i, &outputs] { outputs[i] = &bpbench::testing::python_output_makers()[i](); });
  for (auto& maker : makers) maker.join();
  // Never a failed build: the tests that read an output report its skip or its error, with the script's log.
  for (const PythonOutput* out : outputs) {
    if (!out->error.empty())
      std::cout << "a Python oracle failed; its tests will run it again and show why:\n"
                << out->error.substr(0, 2000) << "\n";
    else if (!out->skip.empty())
      std::cout << "a Python oracle was not run: " << out->skip << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--bpbench-make-python-outputs") == 0)
    bpbench::profiles::exit_without_teardown(make_python_outputs());
  ::testing::InitGoogleTest(&argc, argv);
  bpbench::profiles::exit_without_teardown(RUN_ALL_TESTS());
}
