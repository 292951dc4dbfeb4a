// The payload of an exported binary: writer, mapped reader, manifest.
#include "runtime/Serve/ExportPayload.h"

#include "ir/kernel/CudaModule.h"
#include "runtime/Exec/ParallelChunks.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/xxhash.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace llmc;
using namespace llmc::runtime;
namespace endian = llvm::support::endian;

static constexpr uint64_t kBlockBytes = 16 << 20;

static uint64_t combineBlockHashes(llvm::ArrayRef<uint64_t> hashes) {
  std::vector<uint8_t> bytes(hashes.size() * 8);
  for (auto [index, hash] : llvm::enumerate(hashes))
    endian::write64le(bytes.data() + 8 * index, hash);
  return llvm::xxh3_64bits(bytes);
}

uint64_t llmc::runtime::payloadChecksum(llvm::ArrayRef<uint8_t> bytes) {
  size_t blocks =
      std::max<size_t>(1, (bytes.size() + kBlockBytes - 1) / kBlockBytes);
  std::vector<uint64_t> hashes(blocks);
  // Blocks hashed in parallel chunks (runtime/Exec/ParallelChunks.h).
  parallelChunks(int64_t(blocks), 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block)
      hashes[block] = llvm::xxh3_64bits(bytes.slice(
          block * kBlockBytes,
          std::min<uint64_t>(kBlockBytes, bytes.size() - block * kBlockBytes)));
  });
  return combineBlockHashes(hashes);
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

PayloadWriter::PayloadWriter(llvm::raw_ostream &os, uint64_t start)
    : os(os), start(start), offset(start) {}

void PayloadWriter::begin(llvm::StringRef name, uint64_t align) {
  assert(!open && name.size() < kPayloadNameBytes && "bad section");
  uint64_t aligned = (offset + align - 1) / align * align;
  os.write_zeros(aligned - offset);
  offset = aligned;
  current = PayloadSection{name.str(), offset, 0, 0};
  open = true;
  block.clear();
  blockHashes.clear();
}

void PayloadWriter::flushBlock() {
  blockHashes.push_back(llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(block.data()), block.size())));
  os.write(block.data(), block.size());
  block.clear();
}

void PayloadWriter::write(llvm::ArrayRef<char> bytes) {
  while (!bytes.empty()) {
    size_t take = std::min<size_t>(bytes.size(), kBlockBytes - block.size());
    block.insert(block.end(), bytes.begin(), bytes.begin() + take);
    bytes = bytes.drop_front(take);
    offset += take;
    if (block.size() == kBlockBytes)
      flushBlock();
  }
}

void PayloadWriter::pad(uint64_t align) {
  uint64_t size = sectionSize();
  std::vector<char> zeros((size + align - 1) / align * align - size, 0);
  write(zeros);
}

void PayloadWriter::end() {
  assert(open && "no section");
  // An empty section, or the tail: one (possibly short) block more.
  if (!block.empty() || blockHashes.empty())
    flushBlock();
  current.size = offset - current.offset;
  current.checksum = combineBlockHashes(blockHashes);
  sections.push_back(current);
  open = false;
}

void PayloadWriter::add(llvm::StringRef name, llvm::ArrayRef<char> bytes,
                        uint64_t align) {
  begin(name, align);
  write(bytes);
  end();
}

uint64_t PayloadWriter::checksumOf(llvm::StringRef name) const {
  for (const PayloadSection &section : sections)
    if (section.name == name)
      return section.checksum;
  return 0;
}

void PayloadWriter::finish() {
  assert(!open && "a section is open");
  uint64_t tableOffset = offset;
  std::vector<uint8_t> table(sections.size() * kPayloadEntryBytes, 0);
  for (auto [index, section] : llvm::enumerate(sections)) {
    uint8_t *entry = table.data() + index * kPayloadEntryBytes;
    std::memcpy(entry, section.name.data(), section.name.size());
    endian::write64le(entry + kPayloadNameBytes, section.offset);
    endian::write64le(entry + kPayloadNameBytes + 8, section.size);
    endian::write64le(entry + kPayloadNameBytes + 16, section.checksum);
  }
  uint8_t footer[kPayloadFooterBytes];
  endian::write64le(footer, tableOffset);
  endian::write32le(footer + 8, uint32_t(sections.size()));
  endian::write32le(footer + 12, kPayloadVersion);
  endian::write64le(footer + 16, payloadChecksum(table));
  endian::write64le(footer + 24, start);
  std::memcpy(footer + 32, kPayloadMagic.data(), 8);
  os.write(reinterpret_cast<const char *>(table.data()), table.size());
  os.write(reinterpret_cast<const char *>(footer), sizeof(footer));
  offset += table.size() + sizeof(footer);
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

Payload::~Payload() {
  if (data)
    ::munmap(const_cast<char *>(data), bytes);
}

llvm::Expected<std::unique_ptr<Payload>> Payload::open(llvm::StringRef path) {
  auto fail = [&](const llvm::Twine &what) {
    return llvm::createStringError(path + ": " + what);
  };
  int fd = ::open(path.str().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    int saved = errno;
    ::close(fd);
    return fail(std::strerror(saved));
  }
  std::unique_ptr<Payload> payload(new Payload());
  payload->file = path.str();
  payload->bytes = uint64_t(info.st_size);
  if (payload->bytes < kPayloadFooterBytes) {
    ::close(fd);
    return fail("not an exported llmc binary: too short for a payload "
                "trailer (truncated?)");
  }
  void *mapped = ::mmap(nullptr, payload->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int saved = errno;
  ::close(fd);
  if (mapped == MAP_FAILED)
    return fail(llvm::Twine("cannot map the file: ") + std::strerror(saved));
  payload->data = static_cast<const char *>(mapped);
  const uint8_t *footer = reinterpret_cast<const uint8_t *>(
      payload->data + payload->bytes - kPayloadFooterBytes);
  if (llvm::StringRef(reinterpret_cast<const char *>(footer) + 32, 8) !=
      kPayloadMagic)
    return fail("no llmc payload trailer at the end of the file (truncated, "
                "or not an exported llmc binary)");
  uint64_t tableOffset = endian::read64le(footer);
  uint32_t count = endian::read32le(footer + 8);
  uint32_t version = endian::read32le(footer + 12);
  uint64_t tableChecksum = endian::read64le(footer + 16);
  payload->start = endian::read64le(footer + 24);
  if (version != kPayloadVersion)
    return fail("payload format version " + llvm::Twine(version) +
                ", this llmc reads version " + llvm::Twine(kPayloadVersion));
  uint64_t tableBytes = uint64_t(count) * kPayloadEntryBytes;
  if (tableOffset > payload->bytes - kPayloadFooterBytes ||
      payload->bytes - kPayloadFooterBytes - tableOffset != tableBytes ||
      payload->start > tableOffset)
    return fail("damaged payload trailer: its section table does not end "
                "where the trailer starts (truncated?)");
  llvm::ArrayRef<uint8_t> tableData(
      reinterpret_cast<const uint8_t *>(payload->data + tableOffset),
      tableBytes);
  if (payloadChecksum(tableData) != tableChecksum)
    return fail("damaged payload trailer: the section table's checksum "
                "does not match");
  for (uint32_t index = 0; index < count; ++index) {
    const uint8_t *entry = tableData.data() + index * kPayloadEntryBytes;
    const char *name = reinterpret_cast<const char *>(entry);
    size_t length = strnlen(name, kPayloadNameBytes);
    PayloadSection section;
    section.name.assign(name, length);
    section.offset = endian::read64le(entry + kPayloadNameBytes);
    section.size = endian::read64le(entry + kPayloadNameBytes + 8);
    section.checksum = endian::read64le(entry + kPayloadNameBytes + 16);
    if (length == kPayloadNameBytes || section.name.empty() ||
        payload->find(section.name))
      return fail("damaged payload trailer: section " + llvm::Twine(index) +
                  " has no name or a repeated one");
    if (section.offset < payload->start || section.offset > tableOffset ||
        section.size > tableOffset - section.offset)
      return fail("section '" + section.name +
                  "' lies outside the payload (truncated or damaged)");
    payload->table.push_back(std::move(section));
  }
  return payload;
}

bool Payload::isExported(llvm::StringRef path) {
  int fd = ::open(path.str().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char magic[8];
  struct stat info;
  bool found = ::fstat(fd, &info) == 0 &&
               uint64_t(info.st_size) >= kPayloadFooterBytes &&
               ::pread(fd, magic, 8, info.st_size - 8) == 8 &&
               llvm::StringRef(magic, 8) == kPayloadMagic;
  ::close(fd);
  return found;
}

const PayloadSection *Payload::find(llvm::StringRef name) const {
  for (const PayloadSection &section : table)
    if (section.name == name)
      return &section;
  return nullptr;
}

llvm::Expected<llvm::ArrayRef<char>>
Payload::section(llvm::StringRef name) const {
  const PayloadSection *section = find(name);
  if (!section)
    return llvm::createStringError(file + ": the payload has no section '" +
                                   name + "'");
  return llvm::ArrayRef<char>(data + section->offset, section->size);
}

llvm::Error Payload::verify() const {
  for (const PayloadSection &section : table) {
    uint64_t actual = payloadChecksum(llvm::ArrayRef<uint8_t>(
        reinterpret_cast<const uint8_t *>(data + section.offset),
        section.size));
    if (actual != section.checksum)
      return llvm::createStringError(
          file + ": section '" + section.name + "' is damaged: checksum " +
          llvm::utohexstr(actual, true) + ", expected " +
          llvm::utohexstr(section.checksum, true) +
          " (the file was modified after llmc export wrote it)");
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Manifest
//===----------------------------------------------------------------------===//

std::string ExportManifest::toJson() const {
  llvm::json::Array tensors;
  for (const Tensor &tensor : weights)
    tensors.push_back(
        llvm::json::Object{{"name", tensor.name},
                           {"dtype", kir::dtypeName(tensor.dtype)},
                           {"shape", llvm::json::Array(tensor.shape)},
                           {"offset", int64_t(tensor.offset)},
                           {"bytes", int64_t(tensor.bytes)}});
  llvm::json::Array features;
  for (const std::string &feature : cpuFeatures)
    features.push_back(feature);
  llvm::json::Object object{
      {"llmc_version", llmcVersion},
      {"model_name", modelName},
      {"model", modelJson},
      {"precision", precision},
      {"target", target},
      {"batch", batch},
      {"max_context", maxContext},
      {"prefill_chunk", prefillChunk},
      {"cpu", cpu},
      {"cpu_features", std::move(features)},
      {"prefill_kernels", prefillKernels},
      {"decode_kernels", decodeKernels},
      {"tokenizer", tokenizer},
      {"weights_bytes", int64_t(weightsBytes)},
      {"weights_checksum", llvm::utohexstr(weightsChecksum, true)},
      {"weights", std::move(tensors)}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::json::Value(std::move(object));
  return text;
}

llvm::Expected<ExportManifest> ExportManifest::parse(llvm::StringRef json,
                                                     llvm::StringRef name) {
  auto fail = [&](const llvm::Twine &what) {
    return llvm::createStringError(name + ": " + what);
  };
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(json);
  if (!value)
    return fail("not JSON: " + llvm::toString(value.takeError()));
  const llvm::json::Object *object = value->getAsObject();
  if (!object)
    return fail("not a JSON object");
  ExportManifest manifest;
  for (auto [key, field] : {std::pair<const char *, std::string *>{
                                "llmc_version", &manifest.llmcVersion},
                            {"model_name", &manifest.modelName},
                            {"model", &manifest.modelJson},
                            {"precision", &manifest.precision},
                            {"cpu", &manifest.cpu},
                            {"tokenizer", &manifest.tokenizer}}) {
    std::optional<llvm::StringRef> text = object->getString(key);
    if (!text)
      return fail(llvm::Twine("no string '") + key + "'");
    *field = text->str();
  }
  // Binaries from before CUDA exports have no target: the CPU's.
  if (std::optional<llvm::StringRef> target = object->getString("target"))
    manifest.target = target->str();
  if (manifest.target != "cpu" && manifest.target != "cuda")
    return fail("unknown target '" + manifest.target + "'");
  for (auto [key, field] :
       {std::pair<const char *, int64_t *>{"batch", &manifest.batch},
        {"max_context", &manifest.maxContext},
        {"prefill_chunk", &manifest.prefillChunk},
        {"prefill_kernels", &manifest.prefillKernels},
        {"decode_kernels", &manifest.decodeKernels}}) {
    std::optional<int64_t> number = object->getInteger(key);
    if (!number || *number < 0)
      return fail(llvm::Twine("no count '") + key + "'");
    *field = *number;
  }
  std::optional<int64_t> weightsBytes = object->getInteger("weights_bytes");
  std::optional<llvm::StringRef> checksum =
      object->getString("weights_checksum");
  if (!weightsBytes || *weightsBytes < 0 || !checksum ||
      checksum->getAsInteger(16, manifest.weightsChecksum))
    return fail("no weights_bytes or weights_checksum");
  manifest.weightsBytes = uint64_t(*weightsBytes);
  const llvm::json::Array *features = object->getArray("cpu_features");
  if (!features)
    return fail("no list 'cpu_features'");
  for (const llvm::json::Value &feature : *features) {
    std::optional<llvm::StringRef> text = feature.getAsString();
    if (!text)
      return fail("a CPU feature is not a string");
    manifest.cpuFeatures.push_back(text->str());
  }
  const llvm::json::Array *tensors = object->getArray("weights");
  if (!tensors)
    return fail("no list 'weights'");
  for (const llvm::json::Value &item : *tensors) {
    const llvm::json::Object *entry = item.getAsObject();
    std::optional<llvm::StringRef> tensorName =
        entry ? entry->getString("name") : std::nullopt;
    std::optional<llvm::StringRef> dtype =
        entry ? entry->getString("dtype") : std::nullopt;
    const llvm::json::Array *shape = entry ? entry->getArray("shape") : nullptr;
    std::optional<int64_t> offset =
        entry ? entry->getInteger("offset") : std::nullopt;
    std::optional<int64_t> bytes =
        entry ? entry->getInteger("bytes") : std::nullopt;
    std::optional<kir::DType> type =
        dtype ? kir::parseDType(dtype->str()) : std::nullopt;
    if (!tensorName || !type || !shape || !offset || !bytes || *offset < 0 ||
        *bytes < 0)
      return fail("a weights entry lacks name, dtype, shape, offset or bytes");
    Tensor tensor{
        tensorName->str(), *type, {}, uint64_t(*offset), uint64_t(*bytes)};
    int64_t elements = 1;
    for (const llvm::json::Value &extent : *shape) {
      std::optional<int64_t> size = extent.getAsInteger();
      if (!size || *size < 0 || (*size && elements > (INT64_MAX / *size)))
        return fail("tensor '" + tensor.name + "' has an invalid shape");
      elements *= *size;
      tensor.shape.push_back(*size);
    }
    if (elements > int64_t(tensor.bytes) ||
        uint64_t(elements) * kir::dtypeBytes(*type) != tensor.bytes ||
        tensor.offset > manifest.weightsBytes ||
        tensor.bytes > manifest.weightsBytes - tensor.offset)
      return fail("tensor '" + tensor.name +
                  "' does not fit its shape or the weights section");
    manifest.weights.push_back(std::move(tensor));
  }
  return manifest;
}

llvm::Expected<ExportManifest>
llmc::runtime::readManifest(const Payload &payload) {
  llvm::Expected<llvm::ArrayRef<char>> bytes = payload.section("manifest");
  if (!bytes)
    return bytes.takeError();
  return ExportManifest::parse(llvm::StringRef(bytes->data(), bytes->size()),
                               payload.path() + ": section 'manifest'");
}

std::vector<std::string>
llmc::runtime::missingCpuFeatures(llvm::ArrayRef<std::string> required) {
  // A feature the host's list does not name is taken as present: only one
  // it reports absent can be told missing.
  llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> missing;
  for (const std::string &feature : required) {
    auto it = host.find(feature);
    if (it != host.end() && !it->second)
      missing.push_back(feature);
  }
  return missing;
}

void llmc::runtime::printExportInfo(const Payload &payload,
                                    const ExportManifest &manifest,
                                    llvm::raw_ostream &os) {
  os << "exported llmc binary: " << payload.path() << "\n";
  os << "llmc: " << manifest.llmcVersion << "\n";
  os << "model: " << manifest.modelName << " " << manifest.modelJson << "\n";
  os << "precision: " << manifest.precision << "\n";
  os << "batch: " << manifest.batch << ", max context: " << manifest.maxContext
     << ", prefill chunk: " << manifest.prefillChunk << "\n";
  os << "programs: @prefill " << manifest.prefillKernels << " kernels, @decode "
     << manifest.decodeKernels << " kernels\n";
  if (manifest.target == "cuda") {
    os << "kernels: " << manifest.prefillKernels + manifest.decodeKernels
       << " (CUDA, compiled ahead of time by NVRTC)\n";
    for (const char *program : {"prefill", "decode"}) {
      std::string section = std::string("cuda.") + program;
      auto bytes = payload.section(section);
      auto modules =
          bytes ? cuda::deserializeCudaModules(
                      *bytes, payload.path() + ": section '" + section + "'")
                : llvm::Expected<cuda::CudaModules>(bytes.takeError());
      if (!modules) {
        os << "cuda @" << program << ": " << llvm::toString(modules.takeError())
           << "\n";
        continue;
      }
      auto describe = [](const cuda::CudaBinaries &binaries) {
        std::string text;
        for (const cuda::Cubin &cubin : binaries.cubins)
          text += "sm_" + std::to_string(cubin.arch) + " cubin " +
                  std::to_string(cubin.bytes.size()) + " bytes, ";
        return text + "compute_" + std::to_string(binaries.ptxArch) + " PTX " +
               std::to_string(binaries.ptx.size()) + " bytes";
      };
      int64_t libraryLaunches = 0;
      for (const auto &step : modules->stepKernels)
        libraryLaunches += int64_t(step.size());
      os << "cuda @" << program << ": " << modules->kernelLaunches.size()
         << " kernels (" << describe(modules->kernels) << ")";
      if (modules->hasLibrary)
        os << "; library (attention) " << libraryLaunches << " launches ("
           << describe(modules->library) << ")";
      os << "\n";
    }
  } else {
    os << "kernels: " << manifest.prefillKernels + manifest.decodeKernels
       << " (compiled ahead of time for " << manifest.cpu << ")\n";
  }
  os << "tokenizer: " << manifest.tokenizer << "\n";
  os << "weights: " << manifest.weights.size() << " tensors, "
     << manifest.weightsBytes << " bytes, checksum "
     << llvm::utohexstr(manifest.weightsChecksum, true) << "\n";
  if (manifest.target == "cpu")
    os << "cpu features: " << llvm::join(manifest.cpuFeatures, ",") << "\n";
  os << "payload: " << payload.fileSize() - payload.payloadStart()
     << " bytes after an executable of " << payload.payloadStart()
     << " bytes\n";
  for (const PayloadSection &section : payload.sections())
    os << llvm::format("  section %-18s offset %12llu size %12llu checksum "
                       "%016llx\n",
                       section.name.c_str(), (unsigned long long)section.offset,
                       (unsigned long long)section.size,
                       (unsigned long long)section.checksum);
  os << "checksums: " << payload.sections().size() << " sections verified\n";
}
