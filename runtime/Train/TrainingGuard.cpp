// The training guard: spike and divergence detection, and its state.
#include "runtime/Train/TrainingGuard.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

using namespace llmc::runtime;

llvm::StringRef llmc::runtime::stringifyGuardAction(GuardAction action) {
  switch (action) {
  case GuardAction::Off:
    return "off";
  case GuardAction::Warn:
    return "warn";
  case GuardAction::Stop:
    return "stop";
  case GuardAction::Rollback:
    return "rollback";
  }
  return "off";
}

std::string llmc::runtime::formatGuardValue(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof(text),
                std::fabs(value) >= 1e6 ? "%.4e" : "%.4f", value);
  return text;
}

namespace {
/// A setting as written: 6, 2.5.
std::string formatSetting(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}
} // namespace

std::optional<GuardAction>
llmc::runtime::parseGuardAction(llvm::StringRef name) {
  for (GuardAction action : {GuardAction::Off, GuardAction::Warn,
                             GuardAction::Stop, GuardAction::Rollback})
    if (stringifyGuardAction(action) == name)
      return action;
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// The state
//===----------------------------------------------------------------------===//

bool GuardState::isDefault() const {
  return rollbacks == 0 && rollbacksInARow == 0 && lastEventStep == -1 &&
         lrFactor == 1 && cooldownLeft == 0 && skippedBatches == 0 &&
         warnings == 0 && losses.empty() && gradNorms.empty();
}

std::string GuardState::toJson() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream j(os);
  // Doubles print with 17 significant digits: they read back bitwise.
  j.object([&] {
    j.attribute("rollbacks", rollbacks);
    j.attribute("rollbacks_in_a_row", rollbacksInARow);
    j.attribute("last_event_step", lastEventStep);
    j.attribute("lr_factor", lrFactor);
    j.attribute("cooldown_left", cooldownLeft);
    j.attribute("skipped_batches", skippedBatches);
    j.attribute("warnings", warnings);
    j.attributeArray("losses", [&] {
      for (double v : losses)
        j.value(v);
    });
    j.attributeArray("grad_norms", [&] {
      for (double v : gradNorms)
        j.value(v);
    });
  });
  return text;
}

llvm::Expected<GuardState> GuardState::fromJson(llvm::StringRef text) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json)
    return json.takeError();
  const llvm::json::Object *object = json->getAsObject();
  if (!object)
    return llvm::createStringError("the guard state is not a JSON object");
  GuardState s;
  auto integer = [&](llvm::StringRef key, int64_t &field) -> llvm::Error {
    std::optional<int64_t> value = object->getInteger(key);
    if (!value)
      return llvm::createStringError("the guard state has no '" + key + "'");
    field = *value;
    return llvm::Error::success();
  };
  auto numbers = [&](llvm::StringRef key,
                     std::deque<double> &field) -> llvm::Error {
    const llvm::json::Array *array = object->getArray(key);
    if (!array)
      return llvm::createStringError("the guard state has no '" + key + "'");
    for (const llvm::json::Value &v : *array) {
      std::optional<double> number = v.getAsNumber();
      if (!number)
        return llvm::createStringError("the guard state's '" + key +
                                       "' holds a non-number");
      field.push_back(*number);
    }
    return llvm::Error::success();
  };
  for (auto [key, field] : {std::pair<const char *, int64_t *>{
                                "rollbacks", &s.rollbacks},
                            {"rollbacks_in_a_row", &s.rollbacksInARow},
                            {"last_event_step", &s.lastEventStep},
                            {"cooldown_left", &s.cooldownLeft},
                            {"skipped_batches", &s.skippedBatches},
                            {"warnings", &s.warnings}})
    if (llvm::Error err = integer(key, *field))
      return err;
  std::optional<double> factor = object->getNumber("lr_factor");
  if (!factor)
    return llvm::createStringError("the guard state has no 'lr_factor'");
  s.lrFactor = *factor;
  if (llvm::Error err = numbers("losses", s.losses))
    return err;
  if (llvm::Error err = numbers("grad_norms", s.gradNorms))
    return err;
  return s;
}

//===----------------------------------------------------------------------===//
// Detection
//===----------------------------------------------------------------------===//

std::optional<GuardEvent> TrainingGuard::check(double loss, double gradNorm,
                                               bool overflowSkipped) const {
  using Kind = GuardEvent::Kind;
  if (!std::isfinite(loss))
    return GuardEvent{Kind::NonFinite, "loss " + formatGuardValue(loss)};
  // An overflow's inf norm is what the loss scaler skips the update for.
  if (!std::isfinite(gradNorm) && !overflowSkipped)
    return GuardEvent{Kind::NonFinite,
                      "gradient norm " + formatGuardValue(gradNorm) +
                          " (loss " + formatGuardValue(loss) + ")"};
  if (options.action == GuardAction::Off)
    return std::nullopt;
  const size_t full = size_t(options.window);
  if (current.losses.size() >= full) {
    double sum = 0;
    for (double v : current.losses)
      sum += v;
    double mean = sum / double(current.losses.size());
    double squares = 0;
    for (double v : current.losses)
      squares += (v - mean) * (v - mean);
    double sd = std::sqrt(squares / double(current.losses.size()));
    // A flat window's sd is near zero: deviations under 0.1% of the mean
    // are noise, never a spike.
    double floor = 1e-3 * std::fabs(mean);
    if (options.zscore > 0 &&
        loss > mean + options.zscore * std::max(sd, floor))
      return GuardEvent{
          Kind::LossSpike,
          llvm::formatv("loss {0} > mean {1} + {2} sd ({3}) of the last {4} "
                        "steps",
                        formatGuardValue(loss), formatGuardValue(mean),
                        formatSetting(options.zscore), formatGuardValue(sd), options.window)};
    if (options.ratio > 0 && loss > options.ratio * mean)
      return GuardEvent{Kind::LossSpike,
                        llvm::formatv("loss {0} > {1} x mean {2} of the "
                                      "last {3} steps",
                                      formatGuardValue(loss), formatSetting(options.ratio),
                                      formatGuardValue(mean), options.window)};
  }
  if (options.maxGradNormRatio > 0 && !overflowSkipped &&
      current.gradNorms.size() >= full) {
    std::vector<double> sorted(current.gradNorms.begin(),
                               current.gradNorms.end());
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    double median = n % 2 ? sorted[n / 2]
                          : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    if (gradNorm > options.maxGradNormRatio * median)
      return GuardEvent{Kind::GradSpike,
                        llvm::formatv("gradient norm {0} > {1} x median "
                                      "{2} of the last {3} steps",
                                      formatGuardValue(gradNorm),
                                      formatSetting(options.maxGradNormRatio),
                                      formatGuardValue(median),
                                      options.window)};
  }
  return std::nullopt;
}

void TrainingGuard::recordClean(int64_t step, double loss, double gradNorm,
                                bool overflowSkipped) {
  auto push = [&](std::deque<double> &window, double value) {
    window.push_back(value);
    while (window.size() > size_t(options.window))
      window.pop_front();
  };
  push(current.losses, loss);
  if (!overflowSkipped && std::isfinite(gradNorm))
    push(current.gradNorms, gradNorm);
  if (current.cooldownLeft > 0 && --current.cooldownLeft == 0)
    current.lrFactor = 1;
  // The window that spiked was trained again without an event.
  if (step >= current.lastEventStep)
    current.rollbacksInARow = 0;
}

void TrainingGuard::recordRollback(int64_t eventStep, int64_t batches,
                                   const GuardState &windows) {
  current.losses = windows.losses;
  current.gradNorms = windows.gradNorms;
  ++current.rollbacks;
  ++current.rollbacksInARow;
  current.lastEventStep = eventStep;
  current.skippedBatches += batches;
  current.lrFactor *= options.lrFactor;
  // cooldown 0: the lower rate stays for the rest of the run (the factor
  // only ever shrinks, with each rollback).
  current.cooldownLeft = options.cooldown;
}
