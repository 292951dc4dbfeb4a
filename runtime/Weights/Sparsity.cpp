// 2:4 masks, checks and compression on the host (see Sparsity.h).
#include "runtime/Weights/Sparsity.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>
#include <set>

using namespace llmc::runtime;

namespace {
/// |x|, with NaN above every number (a NaN weight is kept, not hidden).
float magnitude(float x) {
  return std::isnan(x) ? INFINITY : std::fabs(x);
}
} // namespace

void llmc::runtime::maskTwoOfFour(llvm::ArrayRef<float> weights, int64_t k,
                                  llvm::MutableArrayRef<float> mask) {
  (void)k;
  for (size_t g = 0; g + 4 <= weights.size(); g += 4) {
    float m[4];
    for (int i = 0; i < 4; ++i)
      m[i] = magnitude(weights[g + i]);
    // Element i is kept when fewer than 2 others outrank it (larger, or
    // equal at a lower index).
    for (int i = 0; i < 4; ++i) {
      int above = 0;
      for (int j = 0; j < 4; ++j)
        if (j != i && (m[j] > m[i] || (m[j] == m[i] && j < i)))
          ++above;
      mask[g + i] = above < 2 ? 1.0f : 0.0f;
    }
  }
}

TwoOfFourCheck llmc::runtime::checkTwoOfFour(llvm::ArrayRef<float> values,
                                             int64_t k) {
  (void)k;
  TwoOfFourCheck c;
  c.elements = int64_t(values.size());
  for (size_t g = 0; g + 4 <= values.size(); g += 4) {
    int nonZeros = 0;
    for (int i = 0; i < 4; ++i)
      nonZeros += values[g + i] != 0.0f;
    c.zeros += 4 - nonZeros;
    ++c.groups;
    c.denseGroups += nonZeros > 2;
  }
  return c;
}

llvm::Expected<CompressedTwoOfFour>
llmc::runtime::compressTwoOfFour(llvm::StringRef name,
                                 llvm::ArrayRef<float> values, int64_t rows,
                                 int64_t k) {
  if (k % 4 != 0 || rows * k != int64_t(values.size()))
    return llvm::createStringError(llvm::formatv(
        "{0}: a [{1}, {2}] 2:4 matrix needs {1}*{2} values and {2} a "
        "multiple of 4 (it has {3} values)",
        name, rows, k, values.size()));
  CompressedTwoOfFour c;
  c.rows = rows;
  c.k = k;
  c.values.resize(size_t(rows * k / 2));
  c.meta.assign(size_t((rows * (k / 4) + 1) / 2), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < k / 4; ++g) {
      const float *group = values.data() + r * k + g * 4;
      int kept[2], n = 0;
      for (int i = 0; i < 4; ++i)
        if (group[i] != 0.0f) {
          if (n == 2)
            return llvm::createStringError(llvm::formatv(
                "{0} is not 2:4: row {1}, columns {2}-{3} have more than 2 "
                "non-zeros",
                name, r, g * 4, g * 4 + 3));
          kept[n++] = i;
        }
      // Fewer than 2 non-zeros: zeros at the first free positions, in
      // increasing order as the hardware requires.
      for (int i = 0; n < 2 && i < 4; ++i)
        if (n == 0 || i != kept[0])
          kept[n++] = i;
      if (kept[0] > kept[1])
        std::swap(kept[0], kept[1]);
      int64_t index = r * (k / 4) + g;
      c.values[size_t(index * 2)] = group[kept[0]];
      c.values[size_t(index * 2 + 1)] = group[kept[1]];
      uint8_t nibble = uint8_t(kept[0] | (kept[1] << 2));
      c.meta[size_t(index / 2)] |= uint8_t(nibble << ((index & 1) * 4));
    }
  return c;
}

std::vector<float>
llmc::runtime::decompressTwoOfFour(const CompressedTwoOfFour &c) {
  std::vector<float> dense(size_t(c.rows * c.k), 0.0f);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t g = 0; g < c.k / 4; ++g) {
      auto [a, b] = c.positions(r, g);
      int64_t index = r * (c.k / 4) + g;
      dense[size_t(r * c.k + g * 4 + a)] = c.values[size_t(index * 2)];
      dense[size_t(r * c.k + g * 4 + b)] = c.values[size_t(index * 2 + 1)];
    }
  return dense;
}

llvm::Expected<std::vector<PrunedTensor>>
llmc::runtime::pruneTwoOfFour(TensorStore &store) {
  std::vector<PrunedTensor> pruned;
  for (const std::string &maskName : store.names()) {
    llvm::StringRef name(maskName);
    if (!name.consume_front(kSparsityMaskPrefix))
      continue;
    llvm::Expected<HostTensor> weight = store.get(name);
    if (!weight)
      return weight.takeError();
    if (weight->dtype != kir::DType::F32 || weight->shape.size() != 2 ||
        weight->shape[1] % 4 != 0)
      return llvm::createStringError(
          "cannot prune '" + name.str() +
          "': 2:4 needs an f32 [N, K] weight with K a multiple of 4");
    HostTensor mask = HostTensor::zeros(kir::DType::F32, weight->shape);
    maskTwoOfFour(weight->f32(), weight->shape[1], mask.f32());
    llvm::MutableArrayRef<float> w = weight->f32();
    llvm::ArrayRef<float> m = static_cast<const HostTensor &>(mask).f32();
    for (size_t i = 0; i < w.size(); ++i)
      w[i] *= m[i];
    if (llvm::Error err = store.set(maskName, mask))
      return err;
    if (llvm::Error err = store.set(name, *weight))
      return err;
    pruned.push_back(
        {name.str(),
         checkTwoOfFour(static_cast<const HostTensor &>(*weight).f32(),
                        weight->shape[1])
             .zeroFraction()});
  }
  return pruned;
}

llvm::Error llmc::runtime::compressTensorTwoOfFour(TensorMap &tensors,
                                                   llvm::StringRef name) {
  auto it = tensors.find(name.str());
  if (it == tensors.end())
    return llvm::createStringError("no tensor '" + name + "' to compress");
  const HostTensor &dense = it->second;
  if (dense.dtype != kir::DType::F32 || dense.shape.size() != 2)
    return llvm::createStringError("'" + name +
                                   "': 2:4 compression takes an f32 [N, K] "
                                   "weight");
  int64_t rows = dense.shape[0], k = dense.shape[1];
  llvm::Expected<CompressedTwoOfFour> c =
      compressTwoOfFour(name, dense.f32(), rows, k);
  if (!c)
    return c.takeError();
  HostTensor values = HostTensor::fromF32(c->values, {rows, k / 2});
  HostTensor meta =
      HostTensor::zeros(kir::DType::I32, {int64_t(c->meta.size() + 3) / 4});
  std::memcpy(meta.bytes.data(), c->meta.data(), c->meta.size());
  tensors.erase(it);
  tensors[(name + kTwoOfFourValuesSuffix).str()] = std::move(values);
  tensors[(name + kTwoOfFourMetaSuffix).str()] = std::move(meta);
  return llvm::Error::success();
}

llvm::Error llmc::runtime::expandTwoOfFour(TensorMap &tensors,
                                           llvm::StringRef path) {
  std::set<std::string> compressed;
  for (const auto &[name, tensor] : tensors) {
    llvm::StringRef n(name);
    if (n.consume_back(kTwoOfFourValuesSuffix) ||
        n.consume_back(kTwoOfFourMetaSuffix))
      compressed.insert(n.str());
  }
  for (const std::string &name : compressed) {
    auto fail = [&](const llvm::Twine &what) {
      return llvm::createStringError(path + ": 2:4 weight '" + name + "': " +
                                     what);
    };
    auto values = tensors.find(name + kTwoOfFourValuesSuffix.str());
    auto meta = tensors.find(name + kTwoOfFourMetaSuffix.str());
    if (values == tensors.end() || meta == tensors.end())
      return fail(llvm::Twine("has ") +
                  (values == tensors.end() ? "metadata but no values"
                                           : "values but no metadata"));
    if (tensors.count(name))
      return fail("is stored both dense and compressed");
    if (values->second.dtype != kir::DType::F32 ||
        values->second.shape.size() != 2 ||
        meta->second.dtype != kir::DType::I32 ||
        meta->second.shape.size() != 1)
      return fail("expected F32 values [N, K/2] and I32 metadata words");
    CompressedTwoOfFour c;
    c.rows = values->second.shape[0];
    c.k = 2 * values->second.shape[1];
    if (c.k % 4 != 0)
      return fail(llvm::formatv("{0} values a row: K = {1} is not a multiple "
                                "of 4",
                                c.k / 2, c.k));
    int64_t metaBytes = (c.rows * (c.k / 4) + 1) / 2;
    if (meta->second.shape[0] != (metaBytes + 3) / 4)
      return fail(llvm::formatv("{0} metadata words for [{1}, {2}], expected "
                                "{3}",
                                meta->second.shape[0], c.rows, c.k,
                                (metaBytes + 3) / 4));
    c.values.assign(values->second.f32().begin(), values->second.f32().end());
    c.meta.assign(meta->second.bytes.begin(),
                  meta->second.bytes.begin() + metaBytes);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t g = 0; g < c.k / 4; ++g) {
        auto [a, b] = c.positions(r, g);
        if (a >= b)
          return fail(llvm::formatv("row {0}, group {1}: positions {2}, {3} "
                                    "are not two increasing ones of 0..3 "
                                    "(damaged metadata)",
                                    r, g, a, b));
      }
    tensors[name] =
        HostTensor::fromF32(decompressTwoOfFour(c), {c.rows, c.k});
    tensors.erase(values);
    tensors.erase(meta);
  }
  return llvm::Error::success();
}

TensorCoreTwoOfFour llmc::runtime::packForTensorCores(
    const CompressedTwoOfFour &c, bool f16) {
  TensorCoreTwoOfFour t;
  t.n = c.rows;
  t.k = c.k;
  t.f16 = f16;
  t.rowTiles = (c.rows + 15) / 16;
  t.kTiles = (c.k + 31) / 32;
  t.values.assign(t.rowTiles * t.kTiles * 32 * 4, 0);
  // Padding: positions 0 and 1 in every nibble of every word.
  t.meta.assign(t.rowTiles * t.kTiles * 16, 0x44444444u);
  auto round = [&](float v) -> uint32_t {
    return f16 ? floatToHalf(v) : floatToBFloat16(v);
  };
  for (int64_t row = 0; row < c.rows; ++row)
    for (int64_t group = 0; group < c.k / 4; ++group) {
      int64_t rt = row / 16, kt = group / 8;
      int g = int(row % 8), upper = int(row % 16 / 8); // row g or g + 8
      int inTile = int(group % 8), t4 = inTile % 4, half = inTile / 4;
      int64_t tile = rt * t.kTiles + kt;
      int lane = 4 * g + t4, reg = upper + 2 * half;
      int64_t at = (row * (c.k / 4) + group) * 2;
      t.values[size_t((tile * 32 + lane) * 4 + reg)] =
          round(c.values[size_t(at)]) |
          round(c.values[size_t(at + 1)]) << 16;
      auto [p0, p1] = c.positions(row, group);
      uint32_t &word = t.meta[size_t(tile * 16 + 2 * g + half)];
      int shift = 16 * upper + 4 * t4;
      word = (word & ~(0xFu << shift)) | uint32_t(p0 | p1 << 2) << shift;
    }
  return t;
}
