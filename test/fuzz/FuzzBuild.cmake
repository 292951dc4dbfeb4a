# The fuzz build (LLMC_FUZZ=ON, included from the top-level CMakeLists.txt):
# LLVM Support without MLIR, the libraries that read user input compiled
# with -fsanitize=fuzzer-no-link,address,undefined, and the libFuzzer
# targets in this directory. scripts/fuzz.sh configures, builds and runs it.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "LLMC_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++-22 -DCMAKE_C_COMPILER=clang-22")
endif()
find_package(LLVM REQUIRED CONFIG HINTS /usr/lib/llvm-22/lib/cmake/llvm)
if(NOT LLVM_VERSION_MAJOR EQUAL 22)
  message(FATAL_ERROR "llmc needs LLVM 22, found ${LLVM_PACKAGE_VERSION} "
                      "in ${LLVM_DIR}; run scripts/setup.sh")
endif()
include_directories(SYSTEM ${LLVM_INCLUDE_DIRS})
include_directories(${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_definitions(${LLVM_DEFINITIONS})

# Everything below is instrumented; UB aborts (no recovery) so libFuzzer
# records it as a crash. FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION (the
# libFuzzer convention) makes the readers accept a wrong checksum, so that
# mutated inputs get past it to the parsing behind it.
set(LLMC_SANITIZERS "-fsanitize=address,undefined -fno-sanitize-recover=undefined")
set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -fno-rtti -fno-exceptions -Wall -Wextra \
-Wno-unused-parameter -Wno-c++20-extensions -g -fno-omit-frame-pointer ${LLMC_SANITIZERS} \
-fsanitize=fuzzer-no-link -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION")

set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
set(CMAKE_ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)

find_package(Threads REQUIRED)
# Each directory stops after its MLIR-free readers when LLMC_FUZZ is on.
add_subdirectory(ir/kernel)
add_subdirectory(runtime)
add_subdirectory(frontend)
add_subdirectory(test/fuzz)
