// The interfaces' shared methods: reading a stored tensor, writing a
// parameter or state through a staging tensor, the parameters and states,
// the step scalars.
#include "runtime/Exec/Executor.h"

namespace llmc::runtime {

llvm::Error TensorStore::read(
    llvm::StringRef name,
    llvm::function_ref<llvm::Error(const TensorView &)> consume) const {
  llvm::Expected<HostTensor> tensor = get(name);
  if (!tensor)
    return tensor.takeError();
  return consume({tensor->dtype, tensor->shape, tensor->bytes});
}

llvm::Error Executor::writeTensor(
    llvm::StringRef name,
    llvm::function_ref<void(llvm::MutableArrayRef<char>)> fill) {
  for (const std::vector<kir::Binding> *list :
       {&program().params, &program().states})
    for (const kir::Binding &binding : *list)
      if (binding.name == name) {
        const kir::Buffer &buffer = program().buffers[binding.buffer];
        HostTensor staged = HostTensor::zeros(buffer.dtype, buffer.shape);
        fill(staged.bytes);
        return setTensor(name, staged);
      }
  return llvm::createStringError(
      "the model has no parameter or state '" + name + "'");
}

bool Executor::hasInput(kir::StepScalar scalar) const {
  return kir::findStepScalar(program().inputs, scalar) != nullptr;
}

bool Executor::hasOutput(kir::StepScalar scalar) const {
  return kir::findStepScalar(program().outputs, scalar) != nullptr;
}

llvm::Error Executor::setScalar(kir::StepScalar scalar, double value) {
  const kir::Binding *input = kir::findStepScalar(program().inputs, scalar);
  if (!input)
    return llvm::Error::success();
  return setTensor(input->name, HostTensor::fromF32({float(value)}, {}));
}

llvm::Error Executor::setBiasCorrections(int64_t t) {
  for (kir::StepScalar scalar :
       {kir::StepScalar::BiasCorrection1, kir::StepScalar::BiasCorrection2}) {
    if (!hasInput(scalar))
      continue;
    llvm::Expected<double> value = kir::biasCorrection(program(), scalar, t);
    if (!value)
      return value.takeError();
    if (llvm::Error err = setScalar(scalar, *value))
      return err;
  }
  return llvm::Error::success();
}

llvm::Expected<double> Executor::scalarOutput(kir::StepScalar scalar) const {
  const kir::Binding *out = kir::findStepScalar(program().outputs, scalar);
  if (!out)
    return llvm::createStringError("program '" + program().function +
                                   "' has no output " +
                                   kir::stepScalarName(scalar).str());
  llvm::Expected<HostTensor> tensor = output(out->name);
  if (!tensor)
    return tensor.takeError();
  return double(tensor->toF32()[0]);
}

llvm::Error Executor::setParams(const TensorMap &tensors,
                                llvm::StringRef source) {
  for (const kir::Binding &param : program().params) {
    auto it = tensors.find(param.name);
    if (it == tensors.end())
      return llvm::createStringError(source + ": no tensor '" + param.name +
                                     "', a parameter of the model");
    if (llvm::Error error = setTensor(param.name, it->second))
      return llvm::createStringError(source + ": " +
                                     llvm::toString(std::move(error)));
  }
  return llvm::Error::success();
}

/// The named tensors of `bindings`, read through `executor.output`; a
/// tensor that cannot be read is left out.
static TensorMap readBindings(const Executor &executor,
                              const std::vector<kir::Binding> &bindings) {
  TensorMap result;
  for (const kir::Binding &binding : bindings) {
    llvm::Expected<HostTensor> tensor = executor.output(binding.name);
    if (!tensor) {
      llvm::consumeError(tensor.takeError());
      continue;
    }
    result[binding.name] = std::move(*tensor);
  }
  return result;
}

TensorMap Executor::params() const {
  return readBindings(*this, program().params);
}

TensorMap Executor::states() const {
  return readBindings(*this, program().states);
}

} // namespace llmc::runtime
