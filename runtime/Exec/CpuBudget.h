// How many CPUs this process may use, and so how many threads it runs by
// default: its affinity mask, its cgroup's CPU quota, and the share of one
// rank when several ranks of an MPI job run on one node.
//
// A pool with more threads than the CPUs it may use keeps some of them
// waiting for a core (a cgroup quota throttles the whole process once it is
// spent), and a container's quota or a launcher's binding is invisible to
// std::thread::hardware_concurrency(), which counts the machine's CPUs.
#ifndef LLMC_RUNTIME_EXEC_CPUBUDGET_H
#define LLMC_RUNTIME_EXEC_CPUBUDGET_H

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace llmc::runtime {

/// The CPUs a cgroup v2 `cpu.max` grants ("QUOTA PERIOD" in microseconds:
/// QUOTA / PERIOD); nullopt for "max QUOTA" (no limit) or contents that
/// are not two such numbers.
std::optional<double> parseCgroupCpuMax(llvm::StringRef contents);

/// The same for cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (a
/// quota of -1: no limit).
std::optional<double> parseCgroupV1Quota(llvm::StringRef quota,
                                         llvm::StringRef period);

/// The CPU limit of the process whose /proc/self/cgroup reads
/// `procSelfCgroup`, with the cgroup file systems mounted at `root`
/// (normally /sys/fs/cgroup): the smallest quota of its cgroup and every
/// cgroup above it (v2: ROOT/PATH/cpu.max; v1: the cpu controller's
/// ROOT/cpu,cpuacct/PATH or ROOT/cpu/PATH); nullopt when none limits it.
std::optional<double> cgroupCpuLimit(llvm::StringRef root,
                                     llvm::StringRef procSelfCgroup);

/// Where the default thread count comes from.
struct CpuBudget {
  int affinityCpus = 1;           // CPUs in the affinity mask
  int onlineCpus = 1;             // CPUs the machine has online
  std::optional<double> quotaCpus; // the cgroup's quota, in CPUs
  int localRanks = 1;             // ranks of this job on this node
  int threads = 1;                // the default thread count
};

/// The default thread count from those facts: the affinity mask's CPUs,
/// shared among the node's ranks unless the launcher already bound each
/// rank to its own share (affinity x ranks within the machine's CPUs),
/// and the quota shared among them (rounded down: a pool that overruns
/// its quota is throttled as a whole); at least 1.
int defaultThreadsFrom(int affinityCpus, int onlineCpus,
                       std::optional<double> quotaCpus, int localRanks);

/// The ranks of this job on this node from the launcher's environment
/// (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS); 1
/// outside one.
int localRanksFromEnvironment();

/// This process's budget, read once (sched_getaffinity, /proc/self/cgroup
/// and /sys/fs/cgroup, the launcher's environment).
const CpuBudget &cpuBudget();

/// cpuBudget().threads: what `--threads 0` (the default) means.
int defaultThreadCount();

/// One line for logs: "2 threads (2 CPUs in the affinity mask, cgroup
/// quota 1.5 CPUs, 2 ranks on this node)".
std::string describeCpuBudget(const CpuBudget &budget);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_EXEC_CPUBUDGET_H
