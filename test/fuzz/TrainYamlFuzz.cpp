// libFuzzer target: training configs (parseTrainingConfig, what `llmc run`
// and `llmc plan` read) and their command-line overrides. The input
// is the YAML text, then optionally a NUL byte and one flag a line
// (`--lr=3e-4`). It is read for both uses (run, plan); a refusal must have a
// message. A config accepted for a run must print (printTrainingConfig, what
// `llmc run` saves as the run's config.yaml) as YAML that reads back and
// prints the same; the planner's reading is not printed.
#include "test/fuzz/FuzzInput.h"

#include "frontend/TrainConfig.h"

#include "llvm/ADT/SmallVector.h"

#include <cstdlib>

using namespace mlir::llmc;

/// Relative paths in a config resolve against this folder, which does not
/// exist: files the fuzzer names are looked up, never found by accident.
static constexpr const char *kBaseDir = "/nonexistent-llmc-fuzz";

static std::string print(const TrainingConfig &config) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printTrainingConfig(config, os);
  return text;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  auto [text, flagText] = input.split('\0');
  llvm::SmallVector<llvm::StringRef> lines;
  flagText.split(lines, '\n', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  std::vector<std::string> flags(lines.begin(), lines.end());

  for (TrainingConfigUse use : {TrainingConfigUse::Run, TrainingConfigUse::Plan}) {
    llvm::Expected<TrainingConfig> config =
        parseTrainingConfig(text, "train.yaml", kBaseDir, flags, use);
    if (!config) {
      llmc::fuzz::expectMessage(config.takeError());
      continue;
    }
    if (use == TrainingConfigUse::Plan)
      continue;
    std::string printed = print(*config);
    llvm::Expected<TrainingConfig> again =
        parseTrainingConfig(printed, "printed.yaml", kBaseDir, {}, use);
    if (!again) {
      llvm::errs() << "fuzz: the printed config does not read back: "
                   << llvm::toString(again.takeError()) << "\n"
                   << printed;
      std::abort();
    }
    if (print(*again) != printed) {
      llvm::errs() << "fuzz: the printed config reads back different:\n"
                   << printed << "\n---\n"
                   << print(*again);
      std::abort();
    }
  }
  return 0;
}
