// Links a kernel object into the process with ORC's LLJIT.
#include "runtime/Cpu/CpuKernels.h"

#include "llvm/ExecutionEngine/JITLink/JITLink.h"
#include "llvm/ExecutionEngine/JITLink/JITLinkMemoryManager.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/SelfExecutorProcessControl.h"
#include "llvm/ExecutionEngine/Orc/TaskDispatch.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/TargetSelect.h"

#include <cstring>
#include <mutex>

using namespace llmc::cpu;

namespace {
/// LLVM's in-process JIT memory manager, recording where each allocation's
/// kept segments lie (the memory report counts their resident pages).
/// Finalize-lifetime segments are freed after linking and not recorded.
class RecordingMemoryManager : public llvm::jitlink::JITLinkMemoryManager {
public:
  RecordingMemoryManager(
      std::unique_ptr<llvm::jitlink::InProcessMemoryManager> inner,
      std::shared_ptr<CpuKernels::Ranges> ranges, uint64_t pageSize)
      : inner(std::move(inner)), ranges(std::move(ranges)),
        pageSize(pageSize) {}

  void allocate(const llvm::jitlink::JITLinkDylib *dylib,
                llvm::jitlink::LinkGraph &graph,
                OnAllocatedFunction onAllocated) override {
    inner->allocate(
        dylib, graph,
        [this, &graph, onAllocated = std::move(onAllocated)](
            AllocResult result) mutable {
          if (result)
            record(graph);
          onAllocated(std::move(result));
        });
  }
  using JITLinkMemoryManager::allocate;

  void deallocate(std::vector<FinalizedAlloc> allocs,
                  OnDeallocatedFunction onDeallocated) override {
    inner->deallocate(std::move(allocs), std::move(onDeallocated));
  }
  using JITLinkMemoryManager::deallocate;

private:
  /// The kept blocks lie in one slab: the span of their addresses.
  void record(llvm::jitlink::LinkGraph &graph) {
    uint64_t begin = ~uint64_t(0), end = 0;
    for (llvm::jitlink::Section &section : graph.sections()) {
      if (section.getMemLifetime() != llvm::orc::MemLifetime::Standard)
        continue;
      for (llvm::jitlink::Block *block : section.blocks()) {
        begin = std::min(begin, block->getAddress().getValue());
        end = std::max(end, block->getAddress().getValue() + block->getSize());
      }
    }
    if (begin >= end)
      return;
    begin = begin / pageSize * pageSize;
    end = (end + pageSize - 1) / pageSize * pageSize;
    std::lock_guard<std::mutex> lock(mutex);
    ranges->push_back({reinterpret_cast<const void *>(begin),
                       int64_t(end - begin)});
  }

  std::unique_ptr<llvm::jitlink::InProcessMemoryManager> inner;
  std::shared_ptr<CpuKernels::Ranges> ranges;
  uint64_t pageSize;
  std::mutex mutex;
};
} // namespace

namespace {
constexpr char kBundleMagic[8] = {'L', 'L', 'M', 'C', 'O', 'B', 'J', 'S'};
} // namespace

llvm::SmallVector<char, 0>
llmc::cpu::bundleObjects(llvm::ArrayRef<llvm::SmallVector<char, 0>> objects) {
  if (objects.size() == 1)
    return objects.front();
  llvm::SmallVector<char, 0> bundle(kBundleMagic,
                                    kBundleMagic + sizeof(kBundleMagic));
  auto append64 = [&](uint64_t value) {
    char bytes[8];
    llvm::support::endian::write64le(bytes, value);
    bundle.append(bytes, bytes + 8);
  };
  append64(objects.size());
  for (const llvm::SmallVector<char, 0> &object : objects)
    append64(object.size());
  for (const llvm::SmallVector<char, 0> &object : objects)
    bundle.append(object.begin(), object.end());
  return bundle;
}

llvm::Expected<std::vector<llvm::ArrayRef<char>>>
llmc::cpu::unbundleObjects(llvm::ArrayRef<char> payload) {
  if (payload.size() < sizeof(kBundleMagic) ||
      std::memcmp(payload.data(), kBundleMagic, sizeof(kBundleMagic)) != 0)
    return std::vector<llvm::ArrayRef<char>>{payload};
  auto bad = [&](const llvm::Twine &what) {
    return llvm::createStringError("malformed object bundle (" +
                                   llvm::Twine(payload.size()) +
                                   " bytes): " + what);
  };
  llvm::ArrayRef<char> rest = payload.drop_front(sizeof(kBundleMagic));
  if (rest.size() < 8)
    return bad("no object count");
  uint64_t count = llvm::support::endian::read64le(rest.data());
  rest = rest.drop_front(8);
  if (count == 0 || count > rest.size() / 8)
    return bad("an object count of " + llvm::Twine(count));
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < count; ++i)
    sizes.push_back(llvm::support::endian::read64le(rest.data() + 8 * i));
  rest = rest.drop_front(8 * count);
  std::vector<llvm::ArrayRef<char>> objects;
  for (uint64_t size : sizes) {
    if (size > rest.size())
      return bad("object " + llvm::Twine(objects.size()) + " of " +
                 llvm::Twine(size) + " bytes runs past the end");
    objects.push_back(rest.take_front(size));
    rest = rest.drop_front(size);
  }
  if (!rest.empty())
    return bad(llvm::Twine(rest.size()) + " bytes after the last object");
  return objects;
}

CpuKernels::CpuKernels(std::unique_ptr<llvm::orc::LLJIT> jit,
                       std::shared_ptr<Ranges> ranges)
    : jit(std::move(jit)), ranges(std::move(ranges)) {}

CpuKernels::~CpuKernels() = default;

llvm::Expected<std::unique_ptr<CpuKernels>>
CpuKernels::load(llvm::ArrayRef<char> object, llvm::StringRef name) {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  auto fail = [&](llvm::Error error) {
    return llvm::createStringError("cannot load CPU kernels '" + name +
                                   "': " + llvm::toString(std::move(error)));
  };
  // The process's own executor, linking in place (no task threads) through
  // a memory manager that records where the code goes.
  auto ranges = std::make_shared<Ranges>();
  auto memory = llvm::jitlink::InProcessMemoryManager::Create();
  if (!memory)
    return fail(memory.takeError());
  uint64_t pageSize = llvm::sys::Process::getPageSizeEstimate();
  auto process = llvm::orc::SelfExecutorProcessControl::Create(
      nullptr, std::make_unique<llvm::orc::InPlaceTaskDispatcher>(),
      std::make_unique<RecordingMemoryManager>(std::move(*memory), ranges,
                                               pageSize));
  if (!process)
    return fail(process.takeError());
  auto jit = llvm::orc::LLJITBuilder()
                 .setExecutorProcessControl(std::move(*process))
                 .create();
  if (!jit)
    return fail(jit.takeError());
  // The code may call the C runtime (memcpy, half-precision conversions):
  // resolve such symbols from this process.
  auto symbols = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  if (!symbols)
    return fail(symbols.takeError());
  (*jit)->getMainJITDylib().addGenerator(std::move(*symbols));
  llvm::Expected<std::vector<llvm::ArrayRef<char>>> objects =
      unbundleObjects(object);
  if (!objects)
    return fail(objects.takeError());
  for (llvm::ArrayRef<char> one : *objects) {
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
        llvm::StringRef(one.data(), one.size()), name);
    if (llvm::Error error = (*jit)->addObjectFile(std::move(buffer)))
      return fail(std::move(error));
  }
  return std::unique_ptr<CpuKernels>(
      new CpuKernels(std::move(*jit), std::move(ranges)));
}

llvm::Expected<CpuKernelFn> CpuKernels::lookup(llvm::StringRef name) const {
  auto address = jit->lookup(name);
  if (!address)
    return llvm::createStringError("CPU kernel '" + name +
                                   "' is not in the loaded object: " +
                                   llvm::toString(address.takeError()));
  return address->toPtr<CpuKernelFn>();
}
