# The fuzz build (LLMC_FUZZ=ON, included from the top-level CMakeLists.txt
# once it has found LLVM/MLIR 22): the libraries that read user input
# compiled with -fsanitize=fuzzer-no-link,address,undefined, and the
# libFuzzer targets in this directory. LLVM and MLIR are Debian's shared
# libraries, not instrumented: MLIR's parser is exercised but gives the
# fuzzer no coverage of its own; llmc's op verifiers, type and attribute
# parsers, the source checks and the legality pass do. scripts/fuzz.sh and
# test/CMakeLists.txt configure, build and run it.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "LLMC_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_C_COMPILER=clang-22")
endif()

# Everything below is instrumented; UB aborts (no recovery) so libFuzzer
# records it as a crash. FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION (the
# libFuzzer convention) makes the readers accept a wrong checksum, so that
# mutated inputs get past it to the parsing behind it.
# -O1 -gline-tables-only (OSS-Fuzz's flags): reports still name file:line,
# without full debug information to compile and link.
set(LLMC_SANITIZERS "-fsanitize=address,undefined -fno-sanitize-recover=undefined")
set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -Wno-c++20-extensions \
-fno-omit-frame-pointer ${LLMC_SANITIZERS} -fsanitize=fuzzer-no-link \
-DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only")
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only")

find_package(Threads REQUIRED)
# Each directory stops after its readers when LLMC_FUZZ is on.
add_subdirectory(ir)
add_subdirectory(passes)
add_subdirectory(runtime)
add_subdirectory(frontend)
add_subdirectory(training/Data)
add_subdirectory(test/fuzz)
