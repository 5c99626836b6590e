# Writes OUT (a C++ include) with the commit the source tree is at and whether it has uncommitted changes.
# Run at every build (the target bpbench_build_commit); OUT changes only when the commit or the dirty flag
# does, so only harness/cli/version.cpp recompiles then. Usage: cmake -DSOURCE_DIR=... -DOUT=... -P this
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no OUTPUT_VARIABLE changes
                ERROR_QUIET RESULT_VARIABLE rc)
set(dirty false)
if(rc EQUAL 0 AND NOT changes STREQUAL "")
  set(dirty true)
endif()
file(WRITE "${OUT}.tmp" "// Written by scripts/cmake/build_commit.cmake at build time.\n"
                        "#define BPBENCH_BUILD_COMMIT \"${commit}\"\n#define BPBENCH_BUILD_DIRTY ${dirty}\n")
configure_file("${OUT}.tmp" "${OUT}" COPYONLY)  # touched only when it differs
file(REMOVE "${OUT}.tmp")
