// The default thread count: cgroup quotas parsed from sample cpu.max and
// cfs files, found through /proc/self/cgroup in a fake cgroup tree, and
// combined with the affinity mask and the ranks on the node.
#include "runtime/Exec/CpuBudget.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace llmc::runtime;

namespace {

TEST(CpuBudgetTest, ParsesCgroupV2CpuMax) {
  EXPECT_EQ(parseCgroupCpuMax("200000 100000\n"), 2.0);
  EXPECT_EQ(parseCgroupCpuMax("150000 100000"), 1.5);
  EXPECT_EQ(parseCgroupCpuMax("50000 100000\n"), 0.5);
  EXPECT_EQ(parseCgroupCpuMax("max 100000\n"), std::nullopt); // no limit
  EXPECT_EQ(parseCgroupCpuMax(""), std::nullopt);
  EXPECT_EQ(parseCgroupCpuMax("100000"), std::nullopt);
  EXPECT_EQ(parseCgroupCpuMax("abc 100000"), std::nullopt);
  EXPECT_EQ(parseCgroupCpuMax("100000 0"), std::nullopt);
  EXPECT_EQ(parseCgroupCpuMax("-5 100000"), std::nullopt);
  EXPECT_EQ(parseCgroupCpuMax("1 2 3"), std::nullopt);
}

TEST(CpuBudgetTest, ParsesCgroupV1Quota) {
  EXPECT_EQ(parseCgroupV1Quota("300000\n", "100000\n"), 3.0);
  EXPECT_EQ(parseCgroupV1Quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parseCgroupV1Quota("x", "100000"), std::nullopt);
}

TEST(CpuBudgetTest, CombinesAffinityQuotaAndRanks) {
  // Alone: the affinity mask, capped by the quota (rounded down, >= 1).
  EXPECT_EQ(defaultThreadsFrom(8, 8, std::nullopt, 1), 8);
  EXPECT_EQ(defaultThreadsFrom(8, 8, 2.0, 1), 2);
  EXPECT_EQ(defaultThreadsFrom(8, 8, 1.5, 1), 1);
  EXPECT_EQ(defaultThreadsFrom(8, 8, 0.5, 1), 1);
  EXPECT_EQ(defaultThreadsFrom(4, 8, std::nullopt, 1), 4); // taskset
  // Two unbound ranks on 2 CPUs: one thread each; on 8: four each.
  EXPECT_EQ(defaultThreadsFrom(2, 2, std::nullopt, 2), 1);
  EXPECT_EQ(defaultThreadsFrom(8, 8, std::nullopt, 2), 4);
  EXPECT_EQ(defaultThreadsFrom(8, 8, std::nullopt, 16), 1);
  // Ranks the launcher bound to their own CPUs keep their masks.
  EXPECT_EQ(defaultThreadsFrom(1, 2, std::nullopt, 2), 1);
  EXPECT_EQ(defaultThreadsFrom(4, 8, std::nullopt, 2), 4);
  // The quota is the whole job's: shared among the ranks.
  EXPECT_EQ(defaultThreadsFrom(8, 8, 4.0, 2), 2);
}

/// A fake cgroup file system under a temporary directory.
struct FakeCgroups {
  llvm::SmallString<128> root;
  FakeCgroups() {
    EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-cgroup", root));
  }
  ~FakeCgroups() { llvm::sys::fs::remove_directories(root); }
  void write(const std::string &relative, const std::string &contents) {
    std::string path = std::string(root) + relative;
    llvm::sys::fs::create_directories(llvm::sys::path::parent_path(path));
    std::error_code error;
    llvm::raw_fd_ostream out(path, error);
    ASSERT_FALSE(error) << path;
    out << contents;
  }
};

TEST(CpuBudgetTest, FindsTheSmallestV2QuotaUpTheTree) {
  FakeCgroups fs;
  fs.write("/job/cpu.max", "300000 100000\n");
  fs.write("/job/step/cpu.max", "max 100000\n");
  fs.write("/job/step/task/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroupCpuLimit(fs.root, "0::/job/step/task\n"), 3.0);
  fs.write("/job/step/cpu.max", "150000 100000\n");
  EXPECT_EQ(cgroupCpuLimit(fs.root, "0::/job/step/task\n"), 1.5);
  // A container's namespace: its own cgroup is the root of the tree.
  FakeCgroups container;
  container.write("/cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroupCpuLimit(container.root, "0::/\n"), 2.0);
  // No limit anywhere, or no cgroup line.
  FakeCgroups open;
  open.write("/a/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroupCpuLimit(open.root, "0::/a\n"), std::nullopt);
  EXPECT_EQ(cgroupCpuLimit(open.root, ""), std::nullopt);
  EXPECT_EQ(cgroupCpuLimit(open.root, "0::/missing\n"), std::nullopt);
}

TEST(CpuBudgetTest, ReadsTheV1CpuController) {
  FakeCgroups fs;
  fs.write("/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  fs.write("/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  fs.write("/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  fs.write("/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroupCpuLimit(fs.root, "4:memory:/docker/abc\n"
                                    "3:cpu,cpuacct:/docker/abc\n"),
            2.5);
  EXPECT_EQ(cgroupCpuLimit(fs.root, "3:cpu,cpuacct:/\n"), std::nullopt);
}

TEST(CpuBudgetTest, RanksOnTheNodeFromTheLauncher) {
  ::unsetenv("MPI_LOCALNRANKS");
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(localRanksFromEnvironment(), 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  EXPECT_EQ(localRanksFromEnvironment(), 2);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "zero", 1);
  EXPECT_EQ(localRanksFromEnvironment(), 1);
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  ::setenv("MPI_LOCALNRANKS", "3", 1);
  EXPECT_EQ(localRanksFromEnvironment(), 3);
  ::unsetenv("MPI_LOCALNRANKS");
}

TEST(CpuBudgetTest, ThisProcessHasAtLeastOneThread) {
  const CpuBudget &budget = cpuBudget();
  EXPECT_GE(budget.threads, 1);
  EXPECT_LE(budget.threads, budget.affinityCpus);
  EXPECT_EQ(defaultThreadCount(), budget.threads);
  EXPECT_NE(describeCpuBudget(budget).find("thread"), std::string::npos);
}

} // namespace
