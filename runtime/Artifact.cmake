# The artifact library: flatc turns llmc_artifact.fbs into
# runtime/llmc_artifact_generated.h under the build tree, and
# LlmcRuntimeArtifact reads and writes kir::Program artifacts with it.
# A fragment so any directory can include() it; it defines its targets once.
include_guard(GLOBAL)

find_program(LLMC_FLATC flatc)
if(NOT LLMC_FLATC)
  message(FATAL_ERROR "llmc needs the FlatBuffers compiler flatc for its "
                      "artifact format; run scripts/setup.sh")
endif()
find_path(LLMC_FLATBUFFERS_INCLUDE_DIR flatbuffers/flatbuffers.h)
if(NOT LLMC_FLATBUFFERS_INCLUDE_DIR)
  message(FATAL_ERROR "llmc needs the FlatBuffers headers "
                      "(flatbuffers/flatbuffers.h); run scripts/setup.sh")
endif()

set(LLMC_ARTIFACT_SCHEMA ${CMAKE_CURRENT_LIST_DIR}/llmc_artifact.fbs)
set(LLMC_ARTIFACT_HEADER
    ${PROJECT_BINARY_DIR}/runtime/llmc_artifact_generated.h)
# --scoped-enums: enum classes like kir's; --gen-mutable: the writer patches
# the checksum into the finished buffer.
add_custom_command(
  OUTPUT ${LLMC_ARTIFACT_HEADER}
  COMMAND ${LLMC_FLATC} --cpp --scoped-enums --gen-mutable --cpp-std c++17
          -o ${PROJECT_BINARY_DIR}/runtime ${LLMC_ARTIFACT_SCHEMA}
  DEPENDS ${LLMC_ARTIFACT_SCHEMA} ${LLMC_FLATC}
  COMMENT "Generating the llmc artifact schema header with flatc"
  VERBATIM)
# Targets in other directories (tests) include the generated header, so its
# generation is a target of its own that LlmcRuntimeArtifact depends on.
add_custom_target(LlmcArtifactSchema DEPENDS ${LLMC_ARTIFACT_HEADER})

add_library(LlmcRuntimeArtifact STATIC
  ${CMAKE_CURRENT_LIST_DIR}/Artifact.cpp
  ${LLMC_ARTIFACT_HEADER})
add_dependencies(LlmcRuntimeArtifact LlmcArtifactSchema)
target_include_directories(LlmcRuntimeArtifact SYSTEM PUBLIC
  ${LLMC_FLATBUFFERS_INCLUDE_DIR})
target_include_directories(LlmcRuntimeArtifact PUBLIC ${PROJECT_BINARY_DIR})
target_link_libraries(LlmcRuntimeArtifact PUBLIC LlmcKernelIR LLVM)
