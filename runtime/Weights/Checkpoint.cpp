// Training checkpoints: writing, verifying and reading them, and keeping the
// last K of a run.
#include "runtime/Weights/Checkpoint.h"

#include "ir/kernel/AtomicFile.h"
#include "ir/kernel/Fuzzing.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>
#include <tuple>
#include <cstdio>
#include <cstring>

using namespace llmc;
using namespace llmc::runtime;

namespace {
constexpr char kMagic[8] = {'L', 'L', 'M', 'C', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kPrefixBytes = 32;
constexpr int64_t kAlign = 64;

int64_t alignUp(int64_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

uint64_t hashBytes(llvm::ArrayRef<char> bytes) {
  return llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
}

std::string hex(uint64_t value) { return llvm::utohexstr(value, true, 16); }

template <typename T> void putLE(std::string &out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T)); // the host is little-endian
  out.append(bytes, sizeof(T));
}
template <typename T> T getLE(const char *at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

llvm::Error fail(llvm::StringRef path, const llvm::Twine &message) {
  return llvm::createStringError(
      std::make_error_code(std::errc::invalid_argument),
      path + ": " + message);
}
} // namespace

uint64_t llmc::runtime::hashConfigSections(
    const std::map<std::string, std::string> &config) {
  std::string all;
  for (const auto &[name, text] : config)
    all += "[" + name + "]\n" + text;
  return hashBytes(llvm::ArrayRef<char>(all.data(), all.size()));
}

std::string llmc::runtime::describeConfigDifference(
    const std::map<std::string, std::string> &saved,
    const std::map<std::string, std::string> &current) {
  std::string out;
  auto lines = [](llvm::StringRef text) {
    std::map<std::string, std::string> byKey;
    llvm::SmallVector<llvm::StringRef> parts;
    text.split(parts, '\n', -1, false);
    for (llvm::StringRef line : parts) {
      auto [key, value] = line.split(':');
      byKey[key.trim().str()] = value.trim().str();
    }
    return byKey;
  };
  std::vector<std::string> names;
  for (const auto &entry : saved)
    names.push_back(entry.first);
  for (const auto &entry : current)
    if (!saved.count(entry.first))
      names.push_back(entry.first);
  for (const std::string &name : names) {
    auto s = saved.find(name), c = current.find(name);
    std::string savedText = s == saved.end() ? "" : s->second;
    std::string currentText = c == current.end() ? "" : c->second;
    if (savedText == currentText)
      continue;
    std::map<std::string, std::string> a = lines(savedText),
                                       b = lines(currentText);
    std::vector<std::string> keys;
    for (const auto &entry : a)
      keys.push_back(entry.first);
    for (const auto &entry : b)
      if (!a.count(entry.first))
        keys.push_back(entry.first);
    for (const std::string &key : keys) {
      auto x = a.find(key), y = b.find(key);
      std::string before = x == a.end() ? "(absent)" : x->second;
      std::string now = y == b.end() ? "(absent)" : y->second;
      if (before != now)
        out += "  " + name + "." + key + ": " + before +
               " in the checkpoint, " + now + " now\n";
    }
  }
  return out;
}

llvm::Error llmc::runtime::writeCheckpoint(
    llvm::StringRef path, const Checkpoint &checkpoint,
    llvm::ArrayRef<StreamedTensor> streamed) {
  // Every tensor as a stream: the checkpoint's own read from its map.
  std::vector<StreamedTensor> all(streamed.begin(), streamed.end());
  for (const auto &[name, tensor] : checkpoint.tensors)
    all.push_back({name, [&tensor = tensor](StreamedTensor::Consumer consume) {
                     return consume(tensor.dtype, tensor.shape, tensor.bytes);
                   }});
  llvm::sort(all, [](const StreamedTensor &x, const StreamedTensor &y) {
    return x.name < y.name;
  });
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i].name == all[i - 1].name)
      return fail(path, "tensor '" + all[i].name + "' is given twice");

  // Lay the tensors out first: the header records every offset and
  // checksum, so each tensor is read once here and again to write it.
  struct Placed {
    const StreamedTensor *source;
    kir::DType dtype;
    std::vector<int64_t> shape;
    int64_t bytes, offset;
    uint64_t hash;
  };
  std::vector<Placed> placed;
  int64_t dataBytes = 0;
  for (const StreamedTensor &tensor : all) {
    Placed p{&tensor, kir::DType::F32, {}, 0, dataBytes, 0};
    if (llvm::Error err = tensor.read([&](kir::DType dtype,
                                          llvm::ArrayRef<int64_t> shape,
                                          llvm::ArrayRef<char> bytes) {
          p.dtype = dtype;
          p.shape.assign(shape.begin(), shape.end());
          p.bytes = int64_t(bytes.size());
          p.hash = hashBytes(bytes);
          return llvm::Error::success();
        }))
      return err;
    dataBytes = alignUp(dataBytes + p.bytes);
    placed.push_back(std::move(p));
  }

  auto headerFor = [&](int64_t fileBytes) {
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::json::OStream j(os);
    j.object([&] {
      j.attribute("format", "llmc-checkpoint");
      j.attribute("step", checkpoint.step);
      j.attribute("consumed_samples", checkpoint.consumedSamples);
      j.attribute("consumed_tokens", checkpoint.consumedTokens);
      j.attribute("seed", std::to_string(checkpoint.seed));
      j.attribute("lr", checkpoint.lr);
      j.attribute("loader_position", checkpoint.loaderPosition);
      if (!checkpoint.guard.empty())
        j.attribute("guard", checkpoint.guard);
      j.attribute("config_hash", hex(hashConfigSections(checkpoint.config)));
      j.attributeObject("config", [&] {
        for (const auto &[name, text] : checkpoint.config)
          j.attribute(name, text);
      });
      j.attribute("file_bytes", fileBytes);
      if (!checkpoint.manifest.empty())
        j.attribute("shards", checkpoint.manifest);
      j.attributeArray("tensors", [&] {
        for (const Placed &p : placed)
          j.object([&] {
            j.attribute("name", p.source->name);
            j.attribute("dtype", kir::dtypeName(p.dtype));
            j.attributeArray("shape", [&] {
              for (int64_t d : p.shape)
                j.value(d);
            });
            j.attribute("offset", p.offset);
            j.attribute("bytes", p.bytes);
            j.attribute("xxh3", hex(p.hash));
          });
      });
    });
    return text;
  };
  // The file size is part of the header, whose length moves the data; the
  // padding to 64 bytes absorbs the few digits it may add.
  std::string header = headerFor(0);
  int64_t dataStart = alignUp(kPrefixBytes + int64_t(header.size()) + 24);
  while (true) {
    header = headerFor(dataStart + dataBytes);
    if (kPrefixBytes + int64_t(header.size()) <= dataStart)
      break;
    dataStart += kAlign;
  }
  header.resize(dataStart - kPrefixBytes, ' ');

  std::string prefix(kMagic, sizeof(kMagic));
  putLE<uint32_t>(prefix, kVersion);
  putLE<uint32_t>(prefix, 0);
  putLE<uint64_t>(prefix, header.size());
  putLE<uint64_t>(prefix, hashBytes(header));
  return kir::writeFileAtomically(path, [&](llvm::raw_ostream &os)
                                             -> llvm::Error {
    os << prefix << header;
    int64_t written = 0;
    static const char zeros[kAlign] = {};
    for (const Placed &p : placed) {
      os.write(zeros, p.offset - written);
      if (llvm::Error err = p.source->read(
              [&](kir::DType, llvm::ArrayRef<int64_t>,
                  llvm::ArrayRef<char> bytes) -> llvm::Error {
                // A tensor that changed between the passes would not match
                // its checksum: refuse rather than write a bad file.
                if (int64_t(bytes.size()) != p.bytes ||
                    hashBytes(bytes) != p.hash)
                  return fail(path, "tensor '" + p.source->name +
                                        "' changed while it was written");
                os.write(bytes.data(), bytes.size());
                return llvm::Error::success();
              }))
        return err;
      written = p.offset + p.bytes;
    }
    os.write(zeros, dataBytes - written);
    return llvm::Error::success();
  });
}

bool llmc::runtime::hasCheckpointLayout(llvm::StringRef head) {
  return head.size() > size_t(kPrefixBytes) &&
         getLE<uint32_t>(head.data() + 8) == kVersion &&
         getLE<uint32_t>(head.data() + 12) == 0 && head[kPrefixBytes] == '{';
}

std::string llmc::runtime::describeMagic(llvm::StringRef head) {
  head = head.take_front(sizeof(kMagic));
  if (llvm::all_of(head, [](char c) { return llvm::isPrint(c); }))
    return "'" + head.str() + "'";
  std::string hex = "0x";
  for (char c : head)
    hex += llvm::utohexstr(uint8_t(c), /*LowerCase=*/true, /*Width=*/2);
  return hex;
}

llvm::Expected<Checkpoint> llmc::runtime::readCheckpoint(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (std::error_code ec = file.getError())
    return fail(path, "cannot read the checkpoint: " + ec.message());
  return parseCheckpoint((*file)->getBuffer(), path);
}

llvm::Expected<Checkpoint> llmc::runtime::parseCheckpoint(llvm::StringRef bytes,
                                                          llvm::StringRef path) {
  if (bytes.size() < sizeof(kMagic) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return fail(path, hasCheckpointLayout(bytes)
                          ? "damaged llmc checkpoint: bad magic " +
                                describeMagic(bytes) + " (expected 'LLMCCKPT')"
                          : "not an llmc checkpoint (it starts with " +
                                describeMagic(bytes) + ", not 'LLMCCKPT')");
  if (bytes.size() < size_t(kPrefixBytes))
    return fail(path, "truncated checkpoint (" + llvm::Twine(bytes.size()) +
                          " bytes, shorter than its fixed header)");
  uint32_t version = getLE<uint32_t>(bytes.data() + 8);
  if (version != kVersion || getLE<uint32_t>(bytes.data() + 12) != 0)
    return fail(path, "checkpoint format version " + llvm::Twine(version) +
                          " is not the supported version " +
                          llvm::Twine(kVersion));
  uint64_t headerBytes = getLE<uint64_t>(bytes.data() + 16);
  uint64_t headerHash = getLE<uint64_t>(bytes.data() + 24);
  if (headerBytes > bytes.size() - kPrefixBytes)
    return fail(path, "truncated checkpoint (the header needs " +
                          llvm::Twine(headerBytes) + " bytes, " +
                          llvm::Twine(bytes.size() - kPrefixBytes) +
                          " are left)");
  llvm::StringRef header = bytes.substr(kPrefixBytes, headerBytes);
  if (hashBytes(llvm::ArrayRef<char>(header.data(), header.size())) !=
          headerHash &&
      !kir::kFuzzing)
    return fail(path, "corrupted checkpoint (header checksum mismatch)");
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(header);
  if (!json)
    return fail(path, "corrupted checkpoint (header: " +
                          llvm::toString(json.takeError()) + ")");
  const llvm::json::Object *root = json->getAsObject();
  auto bad = [&](const llvm::Twine &what) {
    return fail(path, "malformed checkpoint header: " + what);
  };
  if (!root || root->getString("format") != "llmc-checkpoint")
    return bad("not an llmc checkpoint header");

  std::optional<int64_t> fileBytes = root->getInteger("file_bytes");
  if (!fileBytes)
    return bad("no file_bytes");
  if (int64_t(bytes.size()) != *fileBytes)
    return fail(path, llvm::formatv("{0} checkpoint: the header says {1} "
                                    "bytes, the file has {2}",
                                    int64_t(bytes.size()) < *fileBytes
                                        ? "truncated"
                                        : "corrupted",
                                    *fileBytes, bytes.size())
                          .str());

  Checkpoint c;
  auto integer = [&](llvm::StringRef key, int64_t &field) -> llvm::Error {
    std::optional<int64_t> value = root->getInteger(key);
    if (!value)
      return bad("no integer '" + key + "'");
    field = *value;
    return llvm::Error::success();
  };
  if (llvm::Error err = integer("step", c.step))
    return err;
  if (llvm::Error err = integer("consumed_samples", c.consumedSamples))
    return err;
  if (llvm::Error err = integer("consumed_tokens", c.consumedTokens))
    return err;
  std::optional<llvm::StringRef> seed = root->getString("seed");
  if (!seed || seed->getAsInteger(10, c.seed))
    return bad("no seed");
  c.lr = root->getNumber("lr").value_or(0.0);
  if (std::optional<llvm::StringRef> position =
          root->getString("loader_position"))
    c.loaderPosition = position->str();
  if (std::optional<llvm::StringRef> guard = root->getString("guard"))
    c.guard = guard->str();
  if (std::optional<llvm::StringRef> manifest = root->getString("shards"))
    c.manifest = manifest->str();
  if (const llvm::json::Object *config = root->getObject("config"))
    for (const auto &[name, text] : *config)
      if (std::optional<llvm::StringRef> s = text.getAsString())
        c.config[name.str()] = s->str();
  if (root->getString("config_hash") !=
      hex(hashConfigSections(c.config)))
    return bad("the config hash does not match the config it records");

  const llvm::json::Array *tensors = root->getArray("tensors");
  if (!tensors)
    return bad("no tensor list");
  int64_t dataStart = kPrefixBytes + int64_t(headerBytes);
  if (dataStart % kAlign)
    return bad("the data does not start 64-byte aligned");
  int64_t expected = 0; // where the next tensor may start
  for (const llvm::json::Value &value : *tensors) {
    const llvm::json::Object *t = value.getAsObject();
    std::optional<llvm::StringRef> name = t ? t->getString("name") : std::nullopt;
    if (!name)
      return bad("a tensor without a name");
    std::optional<llvm::StringRef> dtypeName = t->getString("dtype");
    std::optional<kir::DType> dtype =
        dtypeName ? kir::parseDType(dtypeName->str()) : std::nullopt;
    const llvm::json::Array *shape = t->getArray("shape");
    std::optional<int64_t> offset = t->getInteger("offset");
    std::optional<int64_t> size = t->getInteger("bytes");
    std::optional<llvm::StringRef> hash = t->getString("xxh3");
    if (!dtype || !shape || !offset || !size || !hash)
      return bad("tensor '" + *name + "' lacks dtype, shape, offset, bytes "
                                      "or xxh3");
    HostTensor tensor;
    tensor.dtype = *dtype;
    int64_t elements = 1;
    for (const llvm::json::Value &d : *shape) {
      std::optional<int64_t> dim = d.getAsInteger();
      if (!dim || *dim < 0)
        return bad("tensor '" + *name + "' has a bad shape");
      tensor.shape.push_back(*dim);
      elements *= *dim;
    }
    if (*size != elements * kir::dtypeBytes(*dtype) || *offset < expected ||
        *offset % kAlign || dataStart + *offset + *size > *fileBytes)
      return bad("tensor '" + *name + "' has a bad size or offset");
    // The padding before each tensor is zeros: with the checksums this
    // covers every byte of the file.
    for (int64_t i = dataStart + expected; i < dataStart + *offset; ++i)
      if (bytes[i] != 0)
        return fail(path, "corrupted checkpoint (non-zero padding before "
                          "tensor '" + *name + "')");
    const char *data = bytes.data() + dataStart + *offset;
    if (hex(hashBytes(llvm::ArrayRef<char>(data, *size))) != *hash &&
        !kir::kFuzzing)
      return fail(path, "corrupted checkpoint (checksum mismatch in tensor '" +
                            *name + "')");
    tensor.bytes.assign(data, data + *size);
    c.tensors[name->str()] = std::move(tensor);
    expected = *offset + *size;
  }
  for (int64_t i = dataStart + expected; i < *fileBytes; ++i)
    if (bytes[i] != 0)
      return fail(path, "corrupted checkpoint (non-zero trailing padding)");
  return c;
}

std::string llmc::runtime::checkpointFileName(int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "step-%06lld.ckpt", (long long)step);
  return name;
}

std::vector<std::string> llmc::runtime::listCheckpoints(llvm::StringRef dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    int64_t step = 0;
    if (!name.consume_front("step-") || !name.consume_back(".ckpt") ||
        name.empty() || !llvm::all_of(name, llvm::isDigit) ||
        name.getAsInteger(10, step))
      continue;
    found.push_back({step, it->path()});
  }
  llvm::sort(found);
  std::vector<std::string> paths;
  for (auto &entry : found)
    paths.push_back(std::move(entry.second));
  return paths;
}

/// The files of the checkpoint whose main file is `mainPath`: its per-rank
/// files, then the main file (the order to remove them in: a main file
/// without its rank files would be a checkpoint that cannot resume).
static std::vector<std::string> checkpointFiles(llvm::StringRef mainPath) {
  llvm::StringRef dir = llvm::sys::path::parent_path(mainPath);
  std::string prefix = (llvm::sys::path::stem(mainPath) + ".rank-").str();
  std::error_code ec;
  std::vector<std::string> files;
  for (llvm::sys::fs::directory_iterator it(dir.empty() ? "." : dir, ec), end;
       !ec && it != end; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (name.starts_with(prefix) && name.ends_with(".ckpt"))
      files.push_back(it->path());
  }
  files.push_back(mainPath.str());
  return files;
}

llvm::Error llmc::runtime::pruneCheckpoints(llvm::StringRef dir, int64_t keep) {
  if (keep <= 0)
    return llvm::Error::success();
  std::vector<std::string> paths = listCheckpoints(dir);
  for (size_t i = 0; i + keep < paths.size(); ++i) {
    for (const std::string &path : checkpointFiles(paths[i]))
      if (std::error_code ec = llvm::sys::fs::remove(path))
        return llvm::createStringError(ec, "cannot remove old checkpoint '" +
                                               path + "': " + ec.message());
  }
  return llvm::Error::success();
}

bool llmc::runtime::isCheckpointTemporary(llvm::StringRef name) {
  // kir::writeFileAtomically's "<path>.tmp-%%%%%%%%" of a checkpoint name.
  size_t at = name.rfind(".ckpt.tmp-");
  if (at == llvm::StringRef::npos)
    return false;
  llvm::StringRef target = name.take_front(at + strlen(".ckpt"));
  llvm::StringRef stem = target.drop_back(strlen(".ckpt"));
  if (!kir::isTemporaryFileOf(name, target) || !stem.consume_front("step-"))
    return false;
  // "NNNNNN" or "NNNNNN.rank-R-of-W".
  llvm::StringRef digits = stem.take_while(llvm::isDigit);
  stem = stem.drop_front(digits.size());
  if (digits.empty())
    return false;
  if (stem.empty())
    return true;
  llvm::StringRef rank, world;
  if (!stem.consume_front(".rank-"))
    return false;
  std::tie(rank, world) = stem.split("-of-");
  return !rank.empty() && !world.empty() && llvm::all_of(rank, llvm::isDigit) &&
         llvm::all_of(world, llvm::isDigit);
}

llvm::Expected<std::vector<std::string>>
llmc::runtime::removeInterruptedCheckpointFiles(llvm::StringRef dir) {
  std::vector<std::string> stale;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (isCheckpointTemporary(name)) {
      stale.push_back(it->path());
      continue;
    }
    // "step-NNNNNN.rank-R-of-W.ckpt" without "step-NNNNNN.ckpt".
    size_t at = name.find(".rank-");
    if (!name.starts_with("step-") || !name.ends_with(".ckpt") ||
        at == llvm::StringRef::npos)
      continue;
    llvm::SmallString<256> main(dir);
    llvm::sys::path::append(main, name.take_front(at) + ".ckpt");
    if (!llvm::sys::fs::exists(main))
      stale.push_back(it->path());
  }
  llvm::sort(stale);
  for (const std::string &path : stale)
    if (std::error_code ec = llvm::sys::fs::remove(path))
      return llvm::createStringError(
          ec, "cannot remove '" + path + "' of an interrupted checkpoint "
                  "write: " + ec.message());
  return stale;
}

llvm::Error llmc::runtime::setAsideCheckpoint(llvm::StringRef path) {
  for (const std::string &file : checkpointFiles(path))
    if (std::error_code ec = llvm::sys::fs::rename(file, file + ".damaged"))
      return llvm::createStringError(ec, "cannot rename the damaged "
                                         "checkpoint '" +
                                             file + "': " + ec.message());
  return llvm::Error::success();
}

llvm::Expected<std::pair<std::string, Checkpoint>>
llmc::runtime::readLatestGoodCheckpoint(
    llvm::StringRef dir, std::vector<DamagedCheckpoint> &damaged) {
  std::vector<std::string> paths = listCheckpoints(dir);
  if (paths.empty())
    return llvm::createStringError("no checkpoint in '" + dir + "'");
  for (auto it = paths.rbegin(); it != paths.rend(); ++it) {
    llvm::Expected<Checkpoint> checkpoint = readCheckpoint(*it);
    llvm::Error error = checkpoint ? verifyShardFiles(*checkpoint, *it)
                                   : checkpoint.takeError();
    if (!error)
      return std::make_pair(*it, std::move(*checkpoint));
    std::string reason = llvm::toString(std::move(error));
    // readCheckpoint's errors start with the path, which the caller names.
    if (llvm::StringRef(reason).starts_with(*it + ": "))
      reason = reason.substr(it->size() + 2);
    damaged.push_back({*it, reason});
  }
  std::string all;
  for (const DamagedCheckpoint &d : damaged)
    all += "\n  " + d.path + ": " + d.reason;
  return llvm::createStringError("no good checkpoint in '" + dir +
                                 "'; every one is damaged:" + all);
}

std::string llmc::runtime::checkpointShardFileName(int64_t step, int rank,
                                                   int worldSize) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%06lld.rank-%d-of-%d.ckpt",
                (long long)step, rank, worldSize);
  return name;
}

std::string ShardManifest::toJson() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream j(os);
  j.object([&] {
    j.attribute("world_size", worldSize);
    j.attributeArray("files", [&] {
      for (const File &f : files)
        j.object([&] {
          j.attribute("rank", f.rank);
          j.attribute("name", f.name);
          j.attribute("bytes", f.bytes);
          j.attribute("xxh3", hex(f.xxh3));
        });
    });
    j.attributeObject("blocks", [&] {
      for (const auto &[name, block] : blocks)
        j.attributeObject(name, [&] {
          j.attribute("full", block.full);
          j.attributeArray("shape", [&] {
            for (int64_t d : block.shape)
              j.value(d);
          });
        });
    });
  });
  return text;
}

llvm::Expected<ShardManifest>
ShardManifest::fromJson(llvm::StringRef text) {
  auto bad = [](const llvm::Twine &what) {
    return llvm::createStringError("malformed shard manifest: " + what);
  };
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(text);
  if (!json)
    return bad(llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root)
    return bad("not an object");
  ShardManifest m;
  std::optional<int64_t> world = root->getInteger("world_size");
  const llvm::json::Array *files = root->getArray("files");
  const llvm::json::Object *blocks = root->getObject("blocks");
  if (!world || *world < 1 || !files || !blocks)
    return bad("no world_size, files or blocks");
  m.worldSize = int(*world);
  for (const llvm::json::Value &value : *files) {
    const llvm::json::Object *f = value.getAsObject();
    std::optional<int64_t> rank = f ? f->getInteger("rank") : std::nullopt;
    std::optional<int64_t> bytes = f ? f->getInteger("bytes") : std::nullopt;
    std::optional<llvm::StringRef> name =
        f ? f->getString("name") : std::nullopt;
    std::optional<llvm::StringRef> digest =
        f ? f->getString("xxh3") : std::nullopt;
    uint64_t xxh3 = 0;
    if (!rank || !bytes || !name || !digest ||
        digest->getAsInteger(16, xxh3) || name->contains('/'))
      return bad("a file entry lacks rank, name, bytes or xxh3");
    m.files.push_back({int(*rank), name->str(), *bytes, xxh3});
  }
  if (int(m.files.size()) != m.worldSize)
    return bad("it lists " + llvm::Twine(m.files.size()) + " files for " +
               llvm::Twine(m.worldSize) + " ranks");
  for (const auto &[name, value] : *blocks) {
    const llvm::json::Object *b = value.getAsObject();
    std::optional<llvm::StringRef> full =
        b ? b->getString("full") : std::nullopt;
    const llvm::json::Array *shape = b ? b->getArray("shape") : nullptr;
    if (!full || !shape)
      return bad("block '" + name.str() + "' lacks full or shape");
    Block block;
    block.full = full->str();
    for (const llvm::json::Value &d : *shape) {
      std::optional<int64_t> extent = d.getAsInteger();
      if (!extent || *extent < 0)
        return bad("block '" + name.str() + "' has a bad shape");
      block.shape.push_back(*extent);
    }
    m.blocks[name.str()] = std::move(block);
  }
  return m;
}

llvm::Expected<std::pair<int64_t, uint64_t>>
llmc::runtime::fileDigest(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!file)
    return llvm::createStringError(file.getError(),
                                   "cannot read '" + path +
                                       "': " + file.getError().message());
  llvm::StringRef bytes = (*file)->getBuffer();
  return std::make_pair(int64_t(bytes.size()),
                        uint64_t(llvm::xxh3_64bits(bytes)));
}

namespace {
/// The manifest in a ZeRO checkpoint's main file; errors name the file.
llvm::Expected<ShardManifest> readManifest(const Checkpoint &main,
                                           llvm::StringRef mainPath) {
  llvm::Expected<ShardManifest> manifest =
      ShardManifest::fromJson(main.manifest);
  if (!manifest)
    return llvm::createStringError(mainPath + ": " +
                                   llvm::toString(manifest.takeError()));
  return manifest;
}

/// A rank file of the manifest: where it lies (beside the main file) and
/// how errors name it.
struct ShardFile {
  std::string path;
  std::string what;
};
ShardFile locateShard(llvm::StringRef mainPath, const ShardManifest &manifest,
                      const ShardManifest::File &f) {
  llvm::SmallString<256> path(llvm::sys::path::parent_path(mainPath));
  llvm::sys::path::append(path, f.name);
  return {std::string(path),
          llvm::formatv("checkpoint shard '{0}' (rank {1} of {2})", path,
                        f.rank, manifest.worldSize)
              .str()};
}
} // namespace

llvm::Error llmc::runtime::verifyShardFiles(const Checkpoint &main,
                                            llvm::StringRef mainPath) {
  if (main.manifest.empty())
    return llvm::Error::success();
  llvm::Expected<ShardManifest> manifest = readManifest(main, mainPath);
  if (!manifest)
    return manifest.takeError();
  for (const ShardManifest::File &f : manifest->files) {
    auto [path, what] = locateShard(mainPath, *manifest, f);
    if (f.rank < 0 || f.rank >= manifest->worldSize)
      return llvm::createStringError(mainPath + ": " + what +
                                     ": no such rank");
    if (!llvm::sys::fs::exists(path))
      return llvm::createStringError(what + " is missing");
    llvm::Expected<std::pair<int64_t, uint64_t>> digest = fileDigest(path);
    if (!digest)
      return digest.takeError();
    if (digest->first != f.bytes || digest->second != f.xxh3)
      return llvm::createStringError(
          what + " does not match the manifest of '" + mainPath + "' (" +
          llvm::Twine(digest->first) + " bytes, xxh3 " + hex(digest->second) +
          "; expected " + llvm::Twine(f.bytes) + " bytes, xxh3 " +
          hex(f.xxh3) + "): it is damaged or from another save");
  }
  return llvm::Error::success();
}

llvm::Expected<TensorMap>
llmc::runtime::readShardedTensors(const Checkpoint &main,
                                  llvm::StringRef mainPath) {
  llvm::Expected<ShardManifest> manifest = readManifest(main, mainPath);
  if (!manifest)
    return manifest.takeError();
  if (llvm::Error error = verifyShardFiles(main, mainPath))
    return error;
  // Each rank's blocks, in rank order.
  std::vector<TensorMap> ranks(manifest->worldSize);
  for (const ShardManifest::File &f : manifest->files) {
    auto [path, what] = locateShard(mainPath, *manifest, f);
    llvm::Expected<Checkpoint> shard = readCheckpoint(path);
    if (!shard)
      return shard.takeError();
    if (shard->step != main.step)
      return llvm::createStringError(what + " is of step " +
                                     llvm::Twine(shard->step) + ", not " +
                                     llvm::Twine(main.step));
    ranks[f.rank] = std::move(shard->tensors);
  }
  TensorMap full;
  for (const auto &[blockName, block] : manifest->blocks) {
    int64_t elements = 1;
    for (int64_t d : block.shape)
      elements *= d;
    std::vector<char> bytes;
    kir::DType dtype = kir::DType::F32;
    for (int rank = 0; rank < manifest->worldSize; ++rank) {
      auto it = ranks[rank].find(blockName);
      if (it == ranks[rank].end())
        return llvm::createStringError(
            mainPath + ": rank " + llvm::Twine(rank) + "'s file has no block '" +
            blockName + "'");
      dtype = it->second.dtype;
      bytes.insert(bytes.end(), it->second.bytes.begin(),
                   it->second.bytes.end());
    }
    int64_t need = elements * kir::dtypeBytes(dtype);
    if (int64_t(bytes.size()) < need)
      return llvm::createStringError(mainPath + ": the blocks of '" +
                                     blockName + "' hold fewer than the " +
                                     llvm::Twine(elements) + " elements of " +
                                     block.full);
    bytes.resize(need); // the padding goes
    HostTensor tensor = HostTensor::zeros(dtype, block.shape);
    tensor.bytes = std::move(bytes);
    full[block.full] = std::move(tensor);
  }
  return full;
}

llvm::Error llmc::runtime::joinShardedTensors(Checkpoint &checkpoint,
                                              llvm::StringRef path) {
  if (checkpoint.manifest.empty())
    return llvm::Error::success();
  llvm::Expected<TensorMap> full = readShardedTensors(checkpoint, path);
  if (!full)
    return full.takeError();
  for (auto &entry : *full)
    checkpoint.tensors[entry.first] = std::move(entry.second);
  checkpoint.manifest.clear();
  return llvm::Error::success();
}

llvm::Expected<Checkpoint> llmc::runtime::readFullCheckpoint(
    llvm::StringRef path) {
  llvm::Expected<Checkpoint> checkpoint = readCheckpoint(path);
  if (!checkpoint)
    return checkpoint.takeError();
  if (llvm::Error error = joinShardedTensors(*checkpoint, path))
    return error;
  return checkpoint;
}
