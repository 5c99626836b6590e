// cli.h: the bpbench command line.
#pragma once

namespace bpbench {
int cli_main(int argc, char** argv);
}
