// The CPUs this process may use (CpuBudget.h): affinity, cgroup quota,
// ranks on the node.
#include "runtime/Exec/CpuBudget.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#ifdef __linux__
#include <sched.h>
#include <unistd.h>
#endif

using namespace llmc::runtime;

namespace {

std::optional<int64_t> positiveInteger(llvm::StringRef text) {
  int64_t value = 0;
  if (text.trim().getAsInteger(10, value) || value <= 0)
    return std::nullopt;
  return value;
}

/// A pseudo-file's contents (its size is not known before reading).
std::optional<std::string> readSmallFile(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void keepSmaller(std::optional<double> &limit, std::optional<double> quota) {
  if (quota && (!limit || *quota < *limit))
    limit = quota;
}

/// The quotas of `dir` and every directory above it up to `root`,
/// `read` giving one directory's.
template <typename Read>
std::optional<double> walkUp(llvm::StringRef root, std::string dir,
                             Read read) {
  std::optional<double> limit;
  while (true) {
    keepSmaller(limit, read(dir));
    if (dir.size() <= root.size())
      return limit;
    size_t slash = dir.find_last_of('/');
    if (slash == std::string::npos || slash < root.size())
      dir = root.str();
    else
      dir.resize(slash);
  }
}

} // namespace

std::optional<double>
llmc::runtime::parseCgroupCpuMax(llvm::StringRef contents) {
  llvm::SmallVector<llvm::StringRef, 3> fields;
  contents.trim().split(fields, ' ', -1, /*KeepEmpty=*/false);
  if (fields.size() != 2)
    return std::nullopt;
  std::optional<int64_t> quota = positiveInteger(fields[0]),
                         period = positiveInteger(fields[1]);
  if (!quota || !period) // "max": no limit
    return std::nullopt;
  return double(*quota) / double(*period);
}

std::optional<double> llmc::runtime::parseCgroupV1Quota(llvm::StringRef quota,
                                                        llvm::StringRef period) {
  std::optional<int64_t> q = positiveInteger(quota), p = positiveInteger(period);
  if (!q || !p) // -1: no limit
    return std::nullopt;
  return double(*q) / double(*p);
}

std::optional<double>
llmc::runtime::cgroupCpuLimit(llvm::StringRef root,
                              llvm::StringRef procSelfCgroup) {
  std::optional<double> limit;
  llvm::SmallVector<llvm::StringRef, 16> lines;
  procSelfCgroup.split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    // "ID:CONTROLLERS:PATH"; v2's is "0::PATH".
    auto [id, rest] = line.trim().split(':');
    auto [controllers, path] = rest.split(':');
    if (!path.starts_with("/"))
      continue;
    std::string relative = path == "/" ? "" : path.str();
    if (id == "0" && controllers.empty()) {
      keepSmaller(limit, walkUp(root, root.str() + relative,
                                [](const std::string &dir) {
                                  std::optional<std::string> text =
                                      readSmallFile(dir + "/cpu.max");
                                  return text ? parseCgroupCpuMax(*text)
                                              : std::nullopt;
                                }));
      continue;
    }
    llvm::SmallVector<llvm::StringRef, 4> names;
    controllers.split(names, ',');
    if (!llvm::is_contained(names, "cpu"))
      continue;
    for (std::string mount : {controllers.str(), std::string("cpu,cpuacct"),
                              std::string("cpu")}) {
      std::string base = root.str() + "/" + mount;
      auto read = [](const std::string &dir) -> std::optional<double> {
        std::optional<std::string> quota =
            readSmallFile(dir + "/cpu.cfs_quota_us");
        std::optional<std::string> period =
            readSmallFile(dir + "/cpu.cfs_period_us");
        if (!quota || !period)
          return std::nullopt;
        return parseCgroupV1Quota(*quota, *period);
      };
      if (readSmallFile(base + "/cpu.cfs_period_us") ||
          readSmallFile(base + relative + "/cpu.cfs_period_us")) {
        keepSmaller(limit, walkUp(base, base + relative, read));
        break;
      }
    }
  }
  return limit;
}

int llmc::runtime::defaultThreadsFrom(int affinityCpus, int onlineCpus,
                                      std::optional<double> quotaCpus,
                                      int localRanks) {
  int ranks = std::max(1, localRanks);
  double cpus = std::max(1, affinityCpus);
  // A launcher that bound each rank to its own CPUs (Open MPI binds to
  // cores for small jobs) left each mask its share already; an unbound
  // rank sees every CPU and takes its share of them.
  if (int64_t(affinityCpus) * ranks > std::max(1, onlineCpus))
    cpus /= ranks;
  if (quotaCpus)
    cpus = std::min(cpus, *quotaCpus / ranks);
  return std::max(1, int(std::floor(cpus + 1e-9)));
}

int llmc::runtime::localRanksFromEnvironment() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char *value = std::getenv(name))
      if (std::optional<int64_t> ranks = positiveInteger(value))
        return int(std::min<int64_t>(*ranks, 1 << 20));
  return 1;
}

const CpuBudget &llmc::runtime::cpuBudget() {
  static const CpuBudget budget = [] {
    CpuBudget b;
    b.onlineCpus = std::max(1u, std::thread::hardware_concurrency());
    b.affinityCpus = b.onlineCpus;
#ifdef __linux__
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0)
      b.onlineCpus = int(online);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
      b.affinityCpus = std::max(1, CPU_COUNT(&set));
    if (std::optional<std::string> self = readSmallFile("/proc/self/cgroup"))
      b.quotaCpus = cgroupCpuLimit("/sys/fs/cgroup", *self);
#endif
    b.localRanks = localRanksFromEnvironment();
    b.threads = defaultThreadsFrom(b.affinityCpus, b.onlineCpus, b.quotaCpus,
                                   b.localRanks);
    return b;
  }();
  return budget;
}

int llmc::runtime::defaultThreadCount() { return cpuBudget().threads; }

std::string llmc::runtime::describeCpuBudget(const CpuBudget &budget) {
  std::string text = llvm::formatv("{0} thread{1} ({2} CPU{3} in the "
                                   "affinity mask",
                                   budget.threads,
                                   budget.threads == 1 ? "" : "s",
                                   budget.affinityCpus,
                                   budget.affinityCpus == 1 ? "" : "s");
  if (budget.quotaCpus)
    text += llvm::formatv(", cgroup quota {0:f2} CPUs", *budget.quotaCpus);
  if (budget.localRanks > 1)
    text += llvm::formatv(", {0} ranks on this node", budget.localRanks);
  return text + ")";
}
