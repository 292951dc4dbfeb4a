// Host tensors, safetensors and llm.c checkpoint I/O, GPT-2 initialization.
#include "runtime/Weights/Weights.h"

#include "ir/kernel/AtomicFile.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Exec/ParallelChunks.h"
#include "runtime/Weights/Checkpoint.h"
#include "runtime/Weights/HuggingFace.h"
#include "runtime/Weights/Sparsity.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <optional>

using namespace llvm;

namespace llmc::runtime {

using kir::DType;

//===----------------------------------------------------------------------===//
// Shared helpers: errors
//===----------------------------------------------------------------------===//

static Error fileError(StringRef path, const Twine &message) {
  return createStringError(path + ": " + message);
}

static Error tensorError(StringRef path, StringRef name, const Twine &message) {
  return createStringError(path + ": tensor '" + name + "': " + message);
}


/// The element count of `shape`, or nullopt when a dimension is negative or
/// the count (times `elementBytes`) overflows int64.
static std::optional<int64_t> checkedByteCount(ArrayRef<int64_t> shape,
                                               int64_t elementBytes) {
  int64_t n = elementBytes;
  for (int64_t d : shape) {
    if (d < 0 || MulOverflow(n, d, n))
      return std::nullopt;
  }
  return n;
}

static Expected<std::unique_ptr<MemoryBuffer>> readWholeFile(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFile(
      path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!buffer)
    return fileError(path, "cannot read: " + buffer.getError().message());
  return std::move(*buffer);
}

//===----------------------------------------------------------------------===//
// safetensors
//===----------------------------------------------------------------------===//

namespace {
/// A safetensors element type: a kir::DType, or F64 (which it lacks).
struct FileDType {
  std::optional<DType> dtype; // nullopt: F64
  int64_t bytes;
  StringRef name;
};
} // namespace

static std::optional<FileDType> parseFileDType(StringRef name) {
  if (name == "F32")
    return FileDType{DType::F32, 4, "F32"};
  if (name == "F16")
    return FileDType{DType::F16, 2, "F16"};
  if (name == "BF16")
    return FileDType{DType::BF16, 2, "BF16"};
  if (name == "I32")
    return FileDType{DType::I32, 4, "I32"};
  if (name == "I64")
    return FileDType{DType::I64, 8, "I64"};
  if (name == "F64")
    return FileDType{std::nullopt, 8, "F64"};
  return std::nullopt;
}

/// The safetensors spelling of a tensor type, or nullopt for I1 (which has
/// no agreed byte layout in the format).
static std::optional<StringRef> fileDTypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return StringRef("F32");
  case DType::F16:
    return StringRef("F16");
  case DType::BF16:
    return StringRef("BF16");
  case DType::I32:
    return StringRef("I32");
  case DType::I64:
    return StringRef("I64");
  default:
    return std::nullopt;
  }
}

static Error parseMetadata(StringRef path, const json::Value &value,
                           std::map<std::string, std::string> &metadata) {
  const json::Object *object = value.getAsObject();
  if (!object)
    return fileError(path, "'__metadata__' is not a JSON object of strings");
  for (const auto &[key, entry] : *object) {
    std::optional<StringRef> text = entry.getAsString();
    if (!text)
      return fileError(path, "'__metadata__' entry '" + key.str() +
                                 "' is not a string");
    metadata[key.str()] = text->str();
  }
  return Error::success();
}

namespace {
struct Extent {
  std::string name;
  int64_t begin, end;
};
} // namespace

Expected<SafetensorsFile> readSafetensorsFile(StringRef path) {
  Expected<std::unique_ptr<MemoryBuffer>> buffer = readWholeFile(path);
  if (!buffer)
    return buffer.takeError();
  return parseSafetensors((*buffer)->getBuffer(), path);
}

Expected<SafetensorsFile> parseSafetensors(StringRef contents, StringRef path) {
  uint64_t fileSize = contents.size();
  if (fileSize < 8)
    return fileError(path, "the file is " + Twine(fileSize) +
                               " bytes, too short for a safetensors file "
                               "(an 8-byte header size comes first)");
  uint64_t headerSize = support::endian::read64le(
      reinterpret_cast<const void *>(contents.data()));
  if (headerSize > fileSize - 8)
    return fileError(path, "header size " + Twine(headerSize) +
                               " (the first 8 bytes) is larger than the " +
                               Twine(fileSize - 8) +
                               " bytes after it: truncated, or not a "
                               "safetensors file");
  StringRef headerText = contents.substr(8, headerSize);
  StringRef data = contents.substr(8 + headerSize);

  Expected<json::Value> header = json::parse(headerText);
  if (!header)
    return fileError(path, "invalid JSON in the safetensors header: " +
                               toString(header.takeError()));
  const json::Object *root = header->getAsObject();
  if (!root)
    return fileError(path, "the safetensors header is not a JSON object");

  // json::Object is unordered; visit names sorted so the first error
  // reported does not depend on hashing.
  std::vector<StringRef> names;
  for (const auto &entry : *root)
    names.push_back(entry.first);
  llvm::sort(names);

  SafetensorsFile result;
  std::vector<Extent> extents;
  for (StringRef name : names) {
    const json::Value &value = *root->get(name);
    if (name == "__metadata__") {
      if (Error err = parseMetadata(path, value, result.metadata))
        return err;
      continue;
    }
    const json::Object *entry = value.getAsObject();
    if (!entry)
      return tensorError(path, name, "the header entry is not a JSON object");

    std::optional<StringRef> dtypeName = entry->getString("dtype");
    if (!dtypeName)
      return tensorError(path, name, "missing string field 'dtype'");
    std::optional<FileDType> dtype = parseFileDType(*dtypeName);
    if (!dtype)
      return tensorError(path, name,
                         "unsupported dtype '" + *dtypeName +
                             "' (llmc reads F32, F16, BF16, I32, I64, F64)");

    const json::Array *shapeArray = entry->getArray("shape");
    if (!shapeArray)
      return tensorError(path, name, "missing array field 'shape'");
    std::vector<int64_t> shape;
    for (const json::Value &dim : *shapeArray) {
      std::optional<int64_t> size = dim.getAsInteger();
      if (!size || *size < 0)
        return tensorError(path, name,
                           "'shape' must hold non-negative integers");
      shape.push_back(*size);
    }
    std::optional<int64_t> byteCount = checkedByteCount(shape, dtype->bytes);
    if (!byteCount)
      return tensorError(path, name,
                         "shape " + kir::formatShape(shape) + " is too large");

    const json::Array *offsets = entry->getArray("data_offsets");
    std::optional<int64_t> begin, end;
    if (offsets && offsets->size() == 2) {
      begin = (*offsets)[0].getAsInteger();
      end = (*offsets)[1].getAsInteger();
    }
    if (!begin || !end || *begin < 0 || *end < *begin)
      return tensorError(path, name,
                         "'data_offsets' must be [begin, end] with "
                         "0 <= begin <= end");
    std::string offsetsText = "data_offsets [" + std::to_string(*begin) + ", " +
                              std::to_string(*end) + "]";
    if (*end - *begin != *byteCount)
      return tensorError(path, name,
                         "shape " + kir::formatShape(shape) + " of " + dtype->name +
                             " needs " + Twine(*byteCount) + " bytes, but " +
                             offsetsText + " span " + Twine(*end - *begin));
    if (uint64_t(*end) > data.size())
      return tensorError(path, name,
                         offsetsText + " reach past the end of the data (" +
                             Twine(data.size()) +
                             " bytes after the header): the file is "
                             "truncated or the offsets are wrong");
    extents.push_back({name.str(), *begin, *end});

    StringRef payload = data.slice(*begin, *end);
    if (dtype->dtype) {
      HostTensor tensor;
      tensor.dtype = *dtype->dtype;
      tensor.shape = std::move(shape);
      tensor.bytes.assign(payload.begin(), payload.end());
      result.tensors.emplace(name.str(), std::move(tensor));
    } else {
      F64Tensor tensor;
      tensor.shape = std::move(shape);
      tensor.values.resize(payload.size() / sizeof(double));
      // An empty tensor has no storage: memcpy's pointers must not be null
      // even for zero bytes (found by test/fuzz).
      if (!payload.empty())
        std::memcpy(tensor.values.data(), payload.data(), payload.size());
      result.f64Tensors.emplace(name.str(), std::move(tensor));
    }
  }

  // Like the reference implementation, require the tensors to tile the
  // data exactly: an overlap or a hole means a corrupt or hand-made header.
  llvm::sort(extents, [](const Extent &a, const Extent &b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  int64_t covered = 0;
  const Extent *previous = nullptr;
  for (const Extent &extent : extents) {
    if (extent.begin < covered)
      return tensorError(path, extent.name,
                         "data_offsets [" + Twine(extent.begin) + ", " +
                             Twine(extent.end) + "] overlap tensor '" +
                             previous->name + "' [" + Twine(previous->begin) +
                             ", " + Twine(previous->end) + "]");
    if (extent.begin > covered)
      return tensorError(path, extent.name,
                         "data_offsets start at " + Twine(extent.begin) +
                             ", leaving bytes [" + Twine(covered) + ", " +
                             Twine(extent.begin) +
                             "] of the data to no tensor");
    covered = extent.end;
    previous = &extent;
  }
  if (uint64_t(covered) != data.size())
    return fileError(path, Twine(data.size() - covered) +
                               " bytes after the last tensor's data belong "
                               "to no tensor");
  return result;
}

Expected<TensorMap> readSafetensors(StringRef path) {
  Expected<SafetensorsFile> file = readSafetensorsFile(path);
  if (!file)
    return file.takeError();
  if (!file->f64Tensors.empty())
    return tensorError(path, file->f64Tensors.begin()->first,
                       "is F64, which HostTensor does not hold; read the "
                       "file with readSafetensorsFile");
  return std::move(file->tensors);
}

namespace {
/// One tensor on its way into a safetensors file.
struct OutTensor {
  StringRef name;
  StringRef dtype;
  ArrayRef<int64_t> shape;
  StringRef payload;
};
} // namespace

Error writeSafetensors(StringRef path, const SafetensorsFile &file) {
  std::vector<OutTensor> outs;
  for (const auto &[name, tensor] : file.tensors) {
    std::optional<StringRef> dtype = fileDTypeName(tensor.dtype);
    if (!dtype)
      return tensorError(path, name, "safetensors has no I1 layout");
    std::optional<int64_t> byteCount =
        checkedByteCount(tensor.shape, kir::dtypeBytes(tensor.dtype));
    if (!byteCount || uint64_t(*byteCount) != tensor.bytes.size())
      return tensorError(path, name,
                         "holds " + Twine(tensor.bytes.size()) +
                             " bytes, which do not match shape " +
                             kir::formatShape(tensor.shape) + " of " + *dtype);
    outs.push_back({name, *dtype, tensor.shape,
                    StringRef(tensor.bytes.data(), tensor.bytes.size())});
  }
  for (const auto &[name, tensor] : file.f64Tensors) {
    if (file.tensors.count(name))
      return tensorError(path, name, "is both an F64 tensor and another one");
    std::optional<int64_t> count = checkedByteCount(tensor.shape, 1);
    if (!count || uint64_t(*count) != tensor.values.size())
      return tensorError(path, name,
                         "holds " + Twine(tensor.values.size()) +
                             " values, which do not match shape " +
                             kir::formatShape(tensor.shape));
    outs.push_back(
        {name, "F64", tensor.shape,
         StringRef(reinterpret_cast<const char *>(tensor.values.data()),
                   tensor.values.size() * sizeof(double))});
  }
  llvm::sort(outs, [](const OutTensor &a, const OutTensor &b) {
    return a.name < b.name;
  });

  json::Object header;
  int64_t offset = 0;
  for (const OutTensor &out : outs) {
    if (out.name == "__metadata__")
      return tensorError(path, out.name, "the name is reserved for metadata");
    int64_t end = offset + int64_t(out.payload.size());
    header[out.name] = json::Object{
        {"dtype", out.dtype},
        {"shape", json::Array(out.shape)},
        {"data_offsets", json::Array{offset, end}},
    };
    offset = end;
  }
  if (!file.metadata.empty()) {
    json::Object metadata;
    for (const auto &[key, value] : file.metadata)
      metadata[key] = value;
    header["__metadata__"] = std::move(metadata);
  }
  std::string headerText;
  raw_string_ostream(headerText) << json::Value(std::move(header));
  // Pad with spaces (the format allows trailing whitespace in the header)
  // so the data, and thus every 8-byte-aligned tensor, starts aligned.
  headerText.append((8 - headerText.size() % 8) % 8, ' ');

  return kir::writeFileAtomically(path, [&](raw_ostream &os) {
    char size[8];
    support::endian::write64le(size, headerText.size());
    os.write(size, sizeof(size));
    os << headerText;
    for (const OutTensor &out : outs)
      os << out.payload;
    return Error::success();
  });
}

Error writeSafetensors(StringRef path, const TensorMap &tensors,
                       const std::map<std::string, std::string> &metadata) {
  SafetensorsFile file;
  file.tensors = tensors;
  file.metadata = metadata;
  return writeSafetensors(path, file);
}

//===----------------------------------------------------------------------===//
// llm.c checkpoints
//===----------------------------------------------------------------------===//

// The layout of llm.c's train_gpt2.c: 256 int32 of header, then the
// parameters, each kind stacked over layers, in this order.
static constexpr int32_t kLlmcMagic = 20240326;
static constexpr int64_t kLlmcHeaderInts = 256;
static constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;

int64_t llmcPaddedVocab(int64_t vocabSize) {
  return llvm::alignTo(vocabSize, 128);
}

std::vector<ParamSpec> llmcCheckpointParams(const Gpt2Dims &dims) {
  int64_t c = dims.nEmbd;
  std::vector<ParamSpec> params = {{"wte", {dims.vocabSize, c}},
                                   {"wpe", {dims.seqLen, c}}};
  const std::pair<const char *, std::vector<int64_t>> perLayer[] = {
      {"ln_1.weight", {c}},
      {"ln_1.bias", {c}},
      {"attn.c_attn.weight", {3 * c, c}},
      {"attn.c_attn.bias", {3 * c}},
      {"attn.c_proj.weight", {c, c}},
      {"attn.c_proj.bias", {c}},
      {"ln_2.weight", {c}},
      {"ln_2.bias", {c}},
      {"mlp.c_fc.weight", {4 * c, c}},
      {"mlp.c_fc.bias", {4 * c}},
      {"mlp.c_proj.weight", {c, 4 * c}},
      {"mlp.c_proj.bias", {c}},
  };
  for (const auto &[suffix, shape] : perLayer)
    for (int64_t i = 0; i < dims.nLayer; ++i)
      params.push_back({"h." + std::to_string(i) + "." + suffix, shape});
  params.push_back({"ln_f.weight", {c}});
  params.push_back({"ln_f.bias", {c}});
  return params;
}

/// Checks that the dimensions are positive and small enough for the int32
/// header and the int64 sizes computed from them.
static Error checkDims(StringRef path, const Gpt2Dims &dims) {
  const std::pair<const char *, int64_t> fields[] = {
      {"n_layer", dims.nLayer},
      {"n_head", dims.nHead},
      {"n_embd", dims.nEmbd},
      {"seq_len", dims.seqLen},
      {"vocab_size", dims.vocabSize}};
  for (const auto &[field, value] : fields)
    if (value < 1 || value > INT32_MAX)
      return fileError(path, "model dimension " + Twine(field) + " = " +
                                 Twine(value) +
                                 " is out of range for an llm.c checkpoint");
  if (llmcPaddedVocab(dims.vocabSize) > INT32_MAX || 4 * dims.nEmbd > INT32_MAX)
    return fileError(path, "model dimensions are too large for an llm.c "
                           "checkpoint");
  return Error::success();
}

/// Elements each parameter occupies in the file (wte with its padding rows),
/// in file order; nullopt on overflow.
static std::optional<int64_t> llmcFileElements(ArrayRef<ParamSpec> params,
                                               int64_t paddedVocab,
                                               std::vector<int64_t> &sizes) {
  int64_t total = 0;
  for (const ParamSpec &param : params) {
    std::vector<int64_t> shape = param.shape;
    if (param.name == "wte")
      shape[0] = paddedVocab;
    std::optional<int64_t> n = checkedByteCount(shape, 1);
    if (!n || AddOverflow(total, *n, total))
      return std::nullopt;
    sizes.push_back(*n);
  }
  return total;
}

Expected<TensorMap> readLlmcCheckpoint(StringRef path,
                                       const Gpt2Dims &expected) {
  if (Error err = checkDims(path, expected))
    return err;
  Expected<std::unique_ptr<MemoryBuffer>> buffer = readWholeFile(path);
  if (!buffer)
    return buffer.takeError();
  return parseLlmcCheckpoint((*buffer)->getBuffer(), path, expected);
}

Expected<TensorMap> parseLlmcCheckpoint(StringRef contents, StringRef path,
                                        const Gpt2Dims &expected) {
  if (Error err = checkDims(path, expected))
    return err;
  if (int64_t(contents.size()) < kLlmcHeaderBytes)
    return fileError(path, "the file is " + Twine(contents.size()) +
                               " bytes, shorter than the " +
                               Twine(kLlmcHeaderBytes) +
                               "-byte llm.c checkpoint header");
  auto header = [&](int index) {
    return int32_t(support::endian::read32le(contents.data() + 4 * index));
  };
  int32_t magic = header(0), version = header(1);
  if (magic != kLlmcMagic)
    return fileError(path, "header[0] is " + Twine(magic) +
                               ", not the llm.c checkpoint magic number " +
                               Twine(kLlmcMagic) +
                               ": not an llm.c model checkpoint");
  if (version == 1 || version == 2)
    return fileError(path, "llm.c checkpoint version " + Twine(version) +
                               " (header[1]) predates the padded vocabulary "
                               "size in header[7]; re-export the model with a "
                               "current llm.c (version 3 or 5)");
  if (version != 3 && version != 5)
    return fileError(path, "unsupported llm.c checkpoint version " +
                               Twine(version) +
                               " (header[1]); llmc reads 3 (float32) and 5 "
                               "(bfloat16)");
  int64_t elementBytes = version == 3 ? 4 : 2;

  const std::tuple<const char *, int, int64_t> fields[] = {
      {"max_seq_len", 2, expected.seqLen},
      {"vocab_size", 3, expected.vocabSize},
      {"n_layer", 4, expected.nLayer},
      {"n_head", 5, expected.nHead},
      {"n_embd", 6, expected.nEmbd}};
  for (const auto &[field, index, want] : fields)
    if (header(index) != want)
      return fileError(path, "header field " + Twine(field) + " (header[" +
                                 Twine(index) + "]) is " +
                                 Twine(header(index)) +
                                 ", but the model expects " + Twine(want));
  int64_t paddedVocab = header(7);
  if (paddedVocab < expected.vocabSize)
    return fileError(path, "header field padded_vocab_size (header[7]) is " +
                               Twine(paddedVocab) +
                               ", smaller than vocab_size " +
                               Twine(expected.vocabSize));

  std::vector<ParamSpec> params = llmcCheckpointParams(expected);
  std::vector<int64_t> fileElements;
  std::optional<int64_t> total =
      llmcFileElements(params, paddedVocab, fileElements);
  int64_t expectedSize;
  if (!total || MulOverflow(*total, elementBytes, expectedSize) ||
      AddOverflow(expectedSize, kLlmcHeaderBytes, expectedSize))
    return fileError(path, "the header's dimensions overflow the file size");
  if (int64_t(contents.size()) != expectedSize)
    return fileError(
        path, "the file is " + Twine(contents.size()) +
                  " bytes, but its header describes " + Twine(expectedSize) +
                  " (" + Twine(kLlmcHeaderBytes) + "-byte header + " +
                  Twine(*total) + " parameters of " + Twine(elementBytes) +
                  " bytes): truncated, or written for another "
                  "model");

  TensorMap tensors;
  const char *cursor = contents.data() + kLlmcHeaderBytes;
  for (auto [param, fileCount] : llvm::zip_equal(params, fileElements)) {
    HostTensor tensor = HostTensor::zeros(DType::F32, param.shape);
    MutableArrayRef<float> values = tensor.f32();
    if (version == 3) {
      std::memcpy(values.data(), cursor, values.size() * 4);
    } else {
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = bfloat16ToFloat(support::endian::read16le(cursor + 2 * i));
    }
    // wte's padding rows (fileCount > values.size()) are skipped.
    cursor += fileCount * elementBytes;
    tensors.emplace(param.name, std::move(tensor));
  }
  return tensors;
}

Error writeLlmcCheckpoint(StringRef path, const Gpt2Dims &dims,
                          const TensorMap &tensors,
                          LlmcCheckpointFormat format) {
  if (Error err = checkDims(path, dims))
    return err;
  std::vector<ParamSpec> params = llmcCheckpointParams(dims);
  std::vector<const HostTensor *> ordered;
  for (const ParamSpec &param : params) {
    auto it = tensors.find(param.name);
    if (it == tensors.end())
      return tensorError(path, param.name,
                         "missing; an llm.c checkpoint needs every GPT-2 "
                         "parameter");
    const HostTensor &tensor = it->second;
    if (tensor.shape != param.shape)
      return tensorError(path, param.name,
                         "has shape " + kir::formatShape(tensor.shape) +
                             ", but the model needs " +
                             kir::formatShape(param.shape));
    if (!tensor.isFloat())
      return tensorError(path, param.name,
                         "is not a float tensor (F32, F16 or BF16)");
    if (int64_t(tensor.bytes.size()) !=
        tensor.numElements() * kir::dtypeBytes(tensor.dtype))
      return tensorError(path, param.name,
                         "holds a byte count that does not match its shape");
    ordered.push_back(&tensor);
  }
  if (tensors.size() != params.size())
    for (const auto &entry : tensors)
      if (!llvm::any_of(params, [&](const ParamSpec &param) {
            return param.name == entry.first;
          }))
        return tensorError(path, entry.first,
                           "has no place in an llm.c checkpoint (GPT-2 "
                           "with tied embeddings)");

  int64_t paddedVocab = llmcPaddedVocab(dims.vocabSize);
  std::vector<int64_t> fileElements;
  if (!llmcFileElements(params, paddedVocab, fileElements))
    return fileError(path, "the model dimensions overflow the file size");

  std::vector<char> header(kLlmcHeaderBytes, 0);
  const int64_t fields[] = {kLlmcMagic,     int64_t(format), dims.seqLen,
                            dims.vocabSize, dims.nLayer,     dims.nHead,
                            dims.nEmbd,     paddedVocab};
  for (auto [i, value] : llvm::enumerate(fields))
    support::endian::write32le(header.data() + 4 * i, uint32_t(value));

  return kir::writeFileAtomically(path, [&](raw_ostream &os) {
    os.write(header.data(), header.size());
    for (auto [tensor, fileCount] : llvm::zip_equal(ordered, fileElements)) {
      std::vector<float> values = tensor->toF32();
      int64_t padding = fileCount - int64_t(values.size());
      if (format == LlmcCheckpointFormat::F32) {
        values.resize(values.size() + padding, 0.0f);
        os.write(reinterpret_cast<const char *>(values.data()),
                 values.size() * sizeof(float));
      } else {
        std::vector<uint16_t> bits(fileCount, 0);
        llvm::transform(values, bits.begin(), floatToBFloat16);
        os.write(reinterpret_cast<const char *>(bits.data()),
                 bits.size() * sizeof(uint16_t));
      }
    }
    return Error::success();
  });
}

//===----------------------------------------------------------------------===//
// Initialization
//===----------------------------------------------------------------------===//

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter,
                                   std::array<uint32_t, 2> key) {
  // Multipliers and Weyl key increments of Philox4x32 (Salmon et al.).
  constexpr uint64_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint64_t product0 = kMul0 * counter[0];
    uint64_t product1 = kMul1 * counter[2];
    counter = {
        uint32_t(product1 >> 32) ^ counter[1] ^ key[0], uint32_t(product1),
        uint32_t(product0 >> 32) ^ counter[3] ^ key[1], uint32_t(product0)};
  }
  return counter;
}

static uint64_t splitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t tensorStreamKey(uint64_t seed, StringRef name) {
  uint64_t hash = 0xcbf29ce484222325ull; // FNV-1a-64
  for (unsigned char c : name)
    hash = (hash ^ c) * 0x100000001b3ull;
  return splitMix64(splitMix64(seed) ^ hash);
}

/// Box-Muller on the four words of a Philox block: two standard normals.
static std::pair<double, double> boxMuller(uint32_t w0, uint32_t w1,
                                           uint32_t w2, uint32_t w3) {
  // 53-bit uniforms on the open interval (0, 1): log never sees zero.
  auto uniform = [](uint32_t hi, uint32_t lo) {
    uint64_t bits = ((uint64_t(hi) << 32) | lo) >> 11;
    return (double(bits) + 0.5) * 0x1p-53;
  };
  double radius = std::sqrt(-2.0 * std::log(uniform(w0, w1)));
  double angle = 2.0 * llvm::numbers::pi * uniform(w2, w3);
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

/// The two standard normals of Philox block `block` (elements 2*block and
/// 2*block + 1 of the stream).
static std::pair<double, double> normalPair(uint64_t key, uint64_t block) {
  std::array<uint32_t, 4> words =
      philox4x32({uint32_t(block), uint32_t(block >> 32), 0, 0},
                 {uint32_t(key), uint32_t(key >> 32)});
  return boxMuller(words[0], words[1], words[2], words[3]);
}

/// Philox blocks computed side by side (the seeded initialization draws
/// 62M of them for GPT-2 124M).
constexpr int kPhiloxBatch = 64;

/// philox4x32 of blocks first .. first + kPhiloxBatch - 1 under `key`,
/// word w of block i in words[w][i]: the same rounds as philox4x32 with
/// the blocks as the inner loop, which the compiler vectorizes (32x32->64
/// bit multiplies); integer arithmetic, so every clone gives the same bits.
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
philoxBatch(uint64_t key, uint64_t first,
            uint32_t (&words)[4][kPhiloxBatch]) {
  constexpr uint64_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  uint32_t c0[kPhiloxBatch], c1[kPhiloxBatch], c2[kPhiloxBatch],
      c3[kPhiloxBatch];
  for (int i = 0; i < kPhiloxBatch; ++i) {
    uint64_t block = first + uint64_t(i);
    c0[i] = uint32_t(block);
    c1[i] = uint32_t(block >> 32);
    c2[i] = 0;
    c3[i] = 0;
  }
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    for (int i = 0; i < kPhiloxBatch; ++i) {
      uint64_t product0 = kMul0 * c0[i];
      uint64_t product1 = kMul1 * c2[i];
      uint32_t n0 = uint32_t(product1 >> 32) ^ c1[i] ^ k0;
      uint32_t n2 = uint32_t(product0 >> 32) ^ c3[i] ^ k1;
      c1[i] = uint32_t(product1);
      c3[i] = uint32_t(product0);
      c0[i] = n0;
      c2[i] = n2;
    }
  }
  for (int i = 0; i < kPhiloxBatch; ++i) {
    words[0][i] = c0[i];
    words[1][i] = c1[i];
    words[2][i] = c2[i];
    words[3][i] = c3[i];
  }
}

double philoxNormal(uint64_t key, uint64_t index) {
  std::pair<double, double> pair = normalPair(key, index / 2);
  return index % 2 ? pair.second : pair.first;
}

Expected<InitRule> gpt2InitRule(StringRef name, ArrayRef<int64_t> shape,
                                int64_t nLayer) {
  constexpr double kStd = 0.02;
  if (nLayer < 1)
    return createStringError("GPT-2 init: n_layer must be positive, got " +
                             Twine(nLayer));
  if (name.ends_with(".bias"))
    return InitRule{InitRule::Zeros, 0.0};
  bool embedding = name == "wte" || name == "wpe" || name == "lm_head.weight";
  if ((embedding || name.ends_with(".weight")) && shape.size() == 2) {
    // GPT-2 scales the projections that write into the residual stream, so
    // its variance does not grow with depth (two per layer).
    bool residual = name.ends_with(".attn.c_proj.weight") ||
                    name.ends_with(".mlp.c_proj.weight");
    double scale = residual ? 1.0 / std::sqrt(2.0 * double(nLayer)) : 1.0;
    return InitRule{InitRule::Normal, kStd * scale};
  }
  if (!embedding && name.ends_with(".weight") && shape.size() == 1)
    return InitRule{InitRule::Ones, 0.0};
  return createStringError("GPT-2 init: no rule for tensor '" + name +
                           "' of shape " + kir::formatShape(shape) +
                           " (expected a '.bias', a 1-D or 2-D '.weight', "
                           "wte or wpe)");
}

/// Writes every element of `values` according to `rule`, on all hardware
/// threads for large tensors: each element depends only on (key, index), so
/// the result does not depend on the split.
static void fillValues(MutableArrayRef<float> values, const InitRule &rule,
                       uint64_t key) {
  int64_t n = values.size();
  float *data = values.data();
  if (rule.kind != InitRule::Normal) {
    float value = rule.kind == InitRule::Ones ? 1.0f : 0.0f;
    parallelChunks(n, int64_t(1) << 20, [&](int64_t begin, int64_t end) {
      std::fill(data + begin, data + end, value);
    });
    return;
  }
  parallelChunks((n + 1) / 2, int64_t(1) << 15, [&](int64_t begin,
                                                    int64_t end) {
    uint32_t words[4][kPhiloxBatch];
    for (int64_t batch = begin; batch < end; batch += kPhiloxBatch) {
      philoxBatch(key, uint64_t(batch), words);
      int64_t count = std::min<int64_t>(kPhiloxBatch, end - batch);
      for (int64_t i = 0; i < count; ++i) {
        int64_t block = batch + i;
        auto [first, second] =
            boxMuller(words[0][i], words[1][i], words[2][i], words[3][i]);
        data[2 * block] = float(rule.stddev * first);
        if (2 * block + 1 < n)
          data[2 * block + 1] = float(rule.stddev * second);
      }
    }
  });
}

/// Fills `memory` (a tensor of float `dtype`) according to `rule`: f32 in
/// place, f16/bf16 through f32 values rounded to nearest even after.
static void fillTensorMemory(MutableArrayRef<char> memory, DType dtype,
                             const InitRule &rule, uint64_t key) {
  if (dtype == DType::F32) {
    fillValues({reinterpret_cast<float *>(memory.data()),
                memory.size() / sizeof(float)},
               rule, key);
    return;
  }
  std::vector<float> staged(memory.size() / kir::dtypeBytes(dtype));
  fillValues(staged, rule, key);
  HostTensor narrow =
      HostTensor::fromF32(staged, {int64_t(staged.size())}, dtype);
  std::memcpy(memory.data(), narrow.bytes.data(), memory.size());
}

/// Fills `tensor` (a float dtype, bytes sized) according to `rule`.
static void fillTensor(HostTensor &tensor, const InitRule &rule, uint64_t key) {
  tensor.bytes.resize(tensor.numElements() * kir::dtypeBytes(tensor.dtype));
  fillTensorMemory(tensor.bytes, tensor.dtype, rule, key);
}

Expected<TensorMap> initGpt2(ArrayRef<ParamSpec> params, int64_t nLayer,
                             uint64_t seed, DType dtype) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    return createStringError("GPT-2 init: parameters must be F32, F16 or "
                             "BF16");
  TensorMap tensors;
  for (const ParamSpec &param : params) {
    if (!checkedByteCount(param.shape, 1))
      return createStringError("GPT-2 init: tensor '" + param.name +
                               "' has an invalid shape " +
                               kir::formatShape(param.shape));
    Expected<InitRule> rule = gpt2InitRule(param.name, param.shape, nLayer);
    if (!rule)
      return rule.takeError();
    HostTensor tensor;
    tensor.dtype = dtype;
    tensor.shape = param.shape;
    fillTensor(tensor, *rule, tensorStreamKey(seed, param.name));
    if (!tensors.emplace(param.name, std::move(tensor)).second)
      return createStringError("GPT-2 init: tensor '" + param.name +
                               "' is listed twice");
  }
  return tensors;
}

Error initGpt2(TensorMap &params, int64_t nLayer, uint64_t seed) {
  // Check every tensor first so that an error leaves `params` untouched.
  std::vector<InitRule> rules;
  for (const auto &[name, tensor] : params) {
    if (!tensor.isFloat())
      return createStringError("GPT-2 init: tensor '" + name +
                               "' is not F32, F16 or BF16");
    if (!checkedByteCount(tensor.shape, 1))
      return createStringError("GPT-2 init: tensor '" + name +
                               "' has an invalid shape " +
                               kir::formatShape(tensor.shape));
    Expected<InitRule> rule = gpt2InitRule(name, tensor.shape, nLayer);
    if (!rule)
      return rule.takeError();
    rules.push_back(*rule);
  }
  for (auto [entry, rule] : llvm::zip_equal(params, rules))
    fillTensor(entry.second, rule, tensorStreamKey(seed, entry.first));
  return Error::success();
}

llvm::Expected<Gpt2Dims> modelDims(const kir::Program &program) {
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(program.modelJson);
  if (!json)
    return llvm::createStringError(
        "the artifact records no model config (it was compiled from a "
        "model.mlir without an llmc.model attribute)");
  const llvm::json::Object *object = json->getAsObject();
  Gpt2Dims dims;
  for (auto [key, field] :
       {std::pair<const char *, int64_t *>{"n_layer", &dims.nLayer},
        {"n_head", &dims.nHead},
        {"n_embd", &dims.nEmbd},
        {"seq_len", &dims.seqLen},
        {"vocab_size", &dims.vocabSize}}) {
    std::optional<int64_t> value = object ? object->getInteger(key) : std::nullopt;
    if (!value)
      return llvm::createStringError(
          llvm::Twine("the artifact's model config has no '") + key + "'");
    *field = *value;
  }
  return dims;
}

llvm::Error readProgramWeights(
    const kir::Program &program, llvm::StringRef path, uint64_t seed,
    llvm::function_ref<llvm::Error(const std::string &name,
                                   const HostTensor &tensor)>
        set) {
  std::vector<ParamSpec> specs;
  for (const kir::Binding &param : program.params)
    specs.push_back({param.name, program.buffers[param.buffer].shape});
  if (path.empty()) {
    // One tensor at a time: the initialization holds no second copy of
    // the model beside the executor's.
    llvm::Expected<Gpt2Dims> dims = modelDims(program);
    if (!dims)
      return dims.takeError();
    for (auto [spec, param] : llvm::zip_equal(specs, program.params)) {
      llvm::Expected<TensorMap> one = initGpt2({spec}, dims->nLayer, seed);
      if (!one)
        return one.takeError();
      // The initialization is f32; a bf16 parameter (llmc export
      // --precision bf16) gets it rounded.
      HostTensor &tensor = one->begin()->second;
      DType want = program.buffers[param.buffer].dtype;
      if (tensor.isFloat() && kir::isFloat(want) && tensor.dtype != want)
        tensor = castFloatTensor(tensor, want);
      if (llvm::Error error = set(spec.name, tensor))
        return llvm::createStringError("initialization: " +
                                       llvm::toString(std::move(error)));
    }
    return llvm::Error::success();
  }
  llvm::Expected<TensorMap> tensors = readWeights(specs, program, path, seed);
  if (!tensors)
    return tensors.takeError();
  // Weights stored in another float precision (a bf16 file for an fp32
  // model) are converted to the model's.
  for (const kir::Binding &param : program.params) {
    auto it = tensors->find(param.name);
    DType want = program.buffers[param.buffer].dtype;
    if (it != tensors->end() && it->second.isFloat() && kir::isFloat(want) &&
        it->second.dtype != want)
      it->second = castFloatTensor(it->second, want);
  }
  for (const kir::Binding &param : program.params) {
    auto it = tensors->find(param.name);
    if (it == tensors->end())
      return llvm::createStringError(path + ": no tensor '" + param.name +
                                     "', a parameter of the model");
    if (llvm::Error error = set(param.name, it->second))
      return llvm::createStringError(path + ": " +
                                     llvm::toString(std::move(error)));
  }
  return llvm::Error::success();
}

llvm::Error loadWeights(Executor &executor, llvm::StringRef path,
                        uint64_t seed) {
  if (!path.empty())
    return readProgramWeights(
        executor.program(), path, seed,
        [&](const std::string &name, const HostTensor &tensor) {
          return executor.setTensor(name, tensor);
        });
  // The seeded initialization writes each parameter in the executor's
  // memory (the CPU store: no staging copy of the model), the same values
  // readProgramWeights hands out.
  const kir::Program &program = executor.program();
  llvm::Expected<Gpt2Dims> dims = modelDims(program);
  if (!dims)
    return dims.takeError();
  for (const kir::Binding &param : program.params) {
    const kir::Buffer &buffer = program.buffers[param.buffer];
    if (!kir::isFloat(buffer.dtype))
      return createStringError("initialization: GPT-2 init: parameter '" +
                               param.name + "' is " +
                               kir::dtypeName(buffer.dtype) +
                               ", not F32, F16 or BF16");
    Expected<InitRule> rule =
        gpt2InitRule(param.name, buffer.shape, dims->nLayer);
    if (!rule)
      return rule.takeError();
    uint64_t key = tensorStreamKey(seed, param.name);
    if (llvm::Error error = executor.writeTensor(
            param.name, [&](MutableArrayRef<char> memory) {
              fillTensorMemory(memory, buffer.dtype, *rule, key);
            }))
      return createStringError("initialization: " +
                               llvm::toString(std::move(error)));
  }
  return Error::success();
}

/// The keys of the `llmc.model` config that decide what the weights mean;
/// the name, the compiled batch and dropout do not.
static constexpr const char *kModelKeys[] = {
    "n_layer",    "n_head",   "n_embd",         "seq_len",
    "vocab_size", "ffn_hidden", "activation",   "norm",
    "position",   "tie_embeddings", "bias",     "norm_eps",
    "rope_theta"};

/// Empty when the model a file records (`saved`, JSON) is the artifact's
/// (`current`), else one "key: X in the file, Y in the model" line each.
static std::string modelDifference(llvm::StringRef saved,
                                   llvm::StringRef current) {
  llvm::Expected<llvm::json::Value> a = llvm::json::parse(saved);
  llvm::Expected<llvm::json::Value> b = llvm::json::parse(current);
  if (!a || !b || !a->getAsObject() || !b->getAsObject()) {
    if (!a)
      llvm::consumeError(a.takeError());
    if (!b)
      llvm::consumeError(b.takeError());
    return "";
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  for (const char *key : kModelKeys) {
    const llvm::json::Value *x = a->getAsObject()->get(key);
    const llvm::json::Value *y = b->getAsObject()->get(key);
    if (!x || !y || *x == *y)
      continue;
    os << "\n  " << key << ": " << *x << " in the file, " << *y
       << " in the model";
  }
  return out;
}

/// The parameters of a safetensors file: under llmc's names, or under
/// Hugging Face GPT-2 or Llama names (what `llmc convert` writes, and the
/// hub's files), mapped to llmc's. A file that records the llmc model it
/// holds (metadata `llmc.model`) must be of the artifact's model.
static llvm::Expected<TensorMap>
readSafetensorsWeights(llvm::ArrayRef<ParamSpec> specs,
                       const kir::Program &program, llvm::StringRef path) {
  llvm::Expected<SafetensorsFile> file = readSafetensorsFile(path);
  if (!file)
    return file.takeError();
  auto saved = file->metadata.find("llmc.model");
  if (saved != file->metadata.end()) {
    std::string difference = modelDifference(saved->second, program.modelJson);
    if (!difference.empty())
      return llvm::createStringError(
          "'" + path + "' holds the weights of another model:" + difference);
  }
  // Weights `llmc convert --sparse` stored in the 2:4 layout, dense again
  // (the executor packs them for its kernels from the dense values).
  if (llvm::Error error = expandTwoOfFour(file->tensors, path))
    return error;
  bool llmcNames = llvm::all_of(specs, [&](const ParamSpec &spec) {
    return file->tensors.count(spec.name);
  });
  std::optional<HfArchitecture> hf = detectHuggingFace(file->tensors);
  if (llmcNames || !hf) {
    for (const ParamSpec &spec : specs)
      if (file->f64Tensors.count(spec.name))
        return llvm::createStringError("'" + path + "': tensor '" + spec.name +
                                       "' is F64; parameters are F32, F16 "
                                       "or BF16");
    return std::move(file->tensors);
  }
  llvm::Expected<HfModel> model = hfModelOf(program.modelJson);
  if (!model)
    return llvm::createStringError("'" + path + "' holds " +
                                   hfArchitectureName(*hf) + " names, but " +
                                   llvm::toString(model.takeError()));
  if (model->architecture != *hf)
    return llvm::createStringError(
        "'" + path + "' holds " + hfArchitectureName(*hf) +
        " names, but the artifact's model maps to " +
        hfArchitectureName(model->architecture));
  return fromHuggingFace(file->tensors, *model, path);
}

llvm::Expected<TensorMap> readWeights(llvm::ArrayRef<ParamSpec> specs,
                                      const kir::Program &program,
                                      llvm::StringRef path, uint64_t seed) {
  if (path.empty()) {
    llvm::Expected<Gpt2Dims> dims = modelDims(program);
    if (!dims)
      return dims.takeError();
    return initGpt2(specs, dims->nLayer, seed);
  }
  // The format by its first bytes (only those are read here; the reader of
  // the format reads the rest): llm.c checkpoints start with the int32
  // magic 20240326, llmc training checkpoints with "LLMCCKPT", safetensors
  // files with their header's length and '{'. A file that is none of them
  // is named by what it resembles (an llmc checkpoint's layout, or its
  // extension), so damage is reported as damage to that format.
  llvm::Expected<llvm::sys::fs::file_t> file =
      llvm::sys::fs::openNativeFileForRead(path);
  if (!file)
    return llvm::createStringError("cannot read '" + path + "': " +
                                   llvm::toString(file.takeError()));
  char head[33] = {};
  llvm::Expected<size_t> read =
      llvm::sys::fs::readNativeFile(*file, llvm::MutableArrayRef<char>(head));
  llvm::sys::fs::closeFile(*file);
  if (!read)
    return llvm::createStringError("cannot read '" + path + "': " +
                                   llvm::toString(read.takeError()));
  llvm::StringRef first(head, *read);
  uint64_t size = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, size))
    return llvm::createStringError("cannot read '" + path + "': " +
                                   ec.message());
  int32_t magic = 0;
  std::memcpy(&magic, head, sizeof(magic));
  bool llmcC = *read >= sizeof(magic) && magic == 20240326;
  bool trainingCheckpoint = first.starts_with("LLMCCKPT");
  uint64_t headerBytes = llvm::support::endian::read64le(head);
  bool safetensors = *read > 8 && head[8] == '{' && headerBytes <= size - 8;
  llvm::StringRef extension = llvm::sys::path::extension(path);
  if (size == 0)
    return llvm::createStringError(path + ": the file is empty (0 bytes): "
                                          "no weights in it");
  if (!trainingCheckpoint && !llmcC && !safetensors) {
    if (hasCheckpointLayout(first) || extension == ".ckpt")
      return llvm::createStringError(
          path + ": damaged llmc checkpoint: bad magic " +
          describeMagic(first) + " (expected 'LLMCCKPT')");
    if (extension == ".bin")
      llmcC = true; // readLlmcCheckpoint names the bad magic
    else if (extension != ".safetensors")
      return llvm::createStringError(
          path + ": not an llmc checkpoint, safetensors file or llm.c "
                 "checkpoint: it starts with " +
          describeMagic(first) +
          " (an llmc checkpoint starts with 'LLMCCKPT', an llm.c one with "
          "the int32 20240326, a safetensors file with its header's length "
          "and '{')");
  }
  llvm::Expected<TensorMap> tensors = TensorMap();
  if (trainingCheckpoint) {
    // The parameters of a checkpoint `llmc run` wrote; its optimizer state
    // is for resuming, not for running the model.
    llvm::Expected<Checkpoint> checkpoint = readFullCheckpoint(path);
    if (!checkpoint)
      return checkpoint.takeError();
    TensorMap params;
    for (const ParamSpec &param : specs) {
      auto it = checkpoint->tensors.find(param.name);
      if (it == checkpoint->tensors.end())
        return llvm::createStringError(
            "'" + path + "' has no parameter '" + param.name +
            "': it is a checkpoint of another model");
      params[param.name] = std::move(it->second);
    }
    tensors = std::move(params);
  } else if (llmcC) {
    llvm::Expected<Gpt2Dims> dims = modelDims(program);
    if (!dims)
      return dims.takeError();
    tensors = readLlmcCheckpoint(path, *dims);
  } else {
    tensors = readSafetensorsWeights(specs, program, path);
  }
  return tensors;
}

} // namespace llmc::runtime
