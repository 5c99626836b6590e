// main.cpp: the bpbench command-line entry point (see harness/cli.h).
#include "harness/cli/cli.h"

int main(int argc, char** argv) {
  return bpbench::cli_main(argc, argv);
}
