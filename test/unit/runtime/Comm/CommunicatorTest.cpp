// Tests of runtime/Comm without a launcher: the single-process world, the
// launcher check and the options read from the environment.
#include "runtime/Comm/Communicator.h"
#include "runtime/Comm/Mesh.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdlib>
#include <vector>

using namespace llmc;
using namespace llmc::runtime::comm;
using ::testing::HasSubstr;
using kir::DType;

namespace {

std::string messageOf(llvm::Error error) {
  return error ? llvm::toString(std::move(error)) : "";
}

/// Sets an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      saved = old, hadValue = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (hadValue)
      setenv(name, saved.c_str(), 1);
    else
      unsetenv(name);
  }

private:
  const char *name;
  std::string saved;
  bool hadValue = false;
};

TEST(ReduceOp, Names) {
  EXPECT_STREQ(reduceOpName(ReduceOp::Sum), "sum");
  EXPECT_STREQ(reduceOpName(ReduceOp::Avg), "avg");
  EXPECT_STREQ(reduceOpName(ReduceOp::Max), "max");
}

TEST(SingleProcess, IsAWorldOfOne) {
  std::unique_ptr<Communicator> world = createSingleProcess();
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_EQ(world->worldRank(), 0);
  EXPECT_STREQ(world->backend(), "single");
  EXPECT_EQ(world->axis(), "world");
  EXPECT_EQ(world->started(), 0);
}

TEST(SingleProcess, CollectivesCopy) {
  std::unique_ptr<Communicator> world = createSingleProcess();
  std::vector<float> send = {1.5f, -2, 3}, recv(3, 0);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    std::fill(recv.begin(), recv.end(), 0.0f);
    Ticket t = world->allReduce(send.data(), recv.data(), 3, DType::F32, op);
    EXPECT_EQ(messageOf(world->wait(t)), "");
    EXPECT_EQ(recv, send) << reduceOpName(op);
  }
  std::vector<int64_t> wide = {1ll << 40, -7}, out(2, 0);
  EXPECT_EQ(messageOf(world->wait(world->reduceScatter(
                wide.data(), out.data(), 2, DType::I64, ReduceOp::Max))),
            "");
  EXPECT_EQ(out, wide);
  std::vector<uint16_t> half = {0x3c00, 0xc000}, gathered(2, 0);
  EXPECT_EQ(messageOf(world->wait(world->allGather(
                half.data(), gathered.data(), 2, DType::F16))),
            "");
  EXPECT_EQ(gathered, half);
  EXPECT_EQ(messageOf(world->wait(
                world->broadcast(send.data(), 3, DType::F32, 0))),
            "");
  EXPECT_EQ(world->started(), 6);
}

TEST(SingleProcess, InPlaceAndEmpty) {
  std::unique_ptr<Communicator> world = createSingleProcess();
  std::vector<float> data = {4, 5};
  Ticket t = world->allReduce(data.data(), data.data(), 2, DType::F32,
                              ReduceOp::Avg);
  EXPECT_EQ(messageOf(world->wait(t)), "");
  EXPECT_EQ(data, (std::vector<float>{4, 5}));
  t = world->allReduce(nullptr, nullptr, 0, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(messageOf(world->wait(t)), "");
}

TEST(SingleProcess, TicketsWaitAllAndErrors) {
  std::unique_ptr<Communicator> world = createSingleProcess();
  float x = 1, y = 0;
  Ticket a = world->allReduce(&x, &y, 1, DType::F32, ReduceOp::Sum);
  Ticket b = world->broadcast(&x, 1, DType::F32, 3); // no rank 3
  Ticket c = world->allReduce(&x, &y, 1, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(a + 1, b);
  EXPECT_EQ(b + 1, c);
  EXPECT_THAT(messageOf(world->wait(b)),
              HasSubstr("broadcast #2 on 'world': root 3 is not a rank"));
  EXPECT_EQ(messageOf(world->wait(b)), ""); // the error was delivered
  EXPECT_EQ(messageOf(world->waitAll()), "");
  EXPECT_THAT(messageOf(world->wait(99)), HasSubstr("never started"));
  EXPECT_THAT(messageOf(world->wait(0)), HasSubstr("never started"));
  EXPECT_EQ(messageOf(world->barrier()), "");
  EXPECT_EQ(world->started(), 4);
}

TEST(SingleProcess, Split) {
  std::unique_ptr<Communicator> world = createSingleProcess();
  llvm::Expected<std::unique_ptr<Communicator>> dp = world->split(0, 0, "dp");
  ASSERT_TRUE(static_cast<bool>(dp)) << llvm::toString(dp.takeError());
  EXPECT_EQ((*dp)->axis(), "dp");
  EXPECT_EQ((*dp)->size(), 1);
  EXPECT_EQ(world->started(), 1);
}

TEST(Launcher, Detected) {
  ScopedEnv a("OMPI_COMM_WORLD_SIZE", nullptr), b("PMIX_RANK", nullptr),
      c("PMI_SIZE", nullptr), d("PMI_RANK", nullptr),
      e("SLURM_STEP_NUM_TASKS", nullptr);
  EXPECT_FALSE(launchedByLauncher());
  {
    ScopedEnv mpirun("OMPI_COMM_WORLD_SIZE", "2");
    EXPECT_TRUE(launchedByLauncher());
  }
  {
    ScopedEnv batchScript("SLURM_STEP_NUM_TASKS", "1");
    EXPECT_FALSE(launchedByLauncher());
  }
  {
    ScopedEnv srun("SLURM_STEP_NUM_TASKS", "8");
    EXPECT_TRUE(launchedByLauncher());
  }
  // Without a launcher the world is one process, and MPI is not started.
  llvm::Expected<std::unique_ptr<Communicator>> world = createWorld();
  ASSERT_TRUE(static_cast<bool>(world)) << llvm::toString(world.takeError());
  EXPECT_STREQ((*world)->backend(), "single");
}

TEST(Options, Defaults) {
  CommOptions options;
  EXPECT_EQ(options.timeoutSeconds, 30);
  EXPECT_EQ(options.graceSeconds, 5);
}

TEST(Options, FromEnvironment) {
  {
    ScopedEnv timeout("LLMC_COMM_TIMEOUT_S", "3.5"),
        grace("LLMC_COMM_GRACE_S", nullptr);
    llvm::Expected<CommOptions> options = optionsFromEnvironment({});
    ASSERT_TRUE(static_cast<bool>(options));
    EXPECT_EQ(options->timeoutSeconds, 3.5);
    EXPECT_EQ(options->graceSeconds, 5);
  }
  {
    ScopedEnv timeout("LLMC_COMM_TIMEOUT_S", "soon");
    llvm::Expected<CommOptions> options = optionsFromEnvironment({});
    ASSERT_FALSE(static_cast<bool>(options));
    EXPECT_THAT(llvm::toString(options.takeError()),
                HasSubstr("LLMC_COMM_TIMEOUT_S='soon' is not a number of "
                          "seconds > 0"));
  }
  {
    ScopedEnv grace("LLMC_COMM_GRACE_S", "0");
    llvm::Expected<CommOptions> world = optionsFromEnvironment({});
    EXPECT_FALSE(static_cast<bool>(world));
    llvm::consumeError(world.takeError());
  }
}

} // namespace

TEST(Mesh, TpFastestLayout) {
  // Megatron-LM's order: 8 ranks as pp=2 x dp=2 x tp=2.
  MeshShape shape{/*dp=*/2, /*tp=*/2, /*pp=*/2};
  EXPECT_EQ(shape.size(), 8);
  for (int rank = 0; rank < 8; ++rank) {
    MeshCoord c = meshCoord(shape, rank);
    EXPECT_EQ(c.tp, rank % 2);
    EXPECT_EQ(c.dp, (rank / 2) % 2);
    EXPECT_EQ(c.pp, rank / 4);
    EXPECT_EQ(meshRank(shape, c), rank);
  }
  MeshCoord c = meshCoord(MeshShape{/*dp=*/3, /*tp=*/4, /*pp=*/1}, 7);
  EXPECT_EQ(c.tp, 3);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 0);
}

TEST(Mesh, SplitChecksTheWorldSize) {
  std::unique_ptr<Communicator> world = createSingleProcess();
  llvm::Expected<MeshAxes> bad = splitMesh(*world, MeshShape{1, 2, 1});
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_THAT(messageOf(bad.takeError()),
              HasSubstr("the mesh dp=1 x tp=2 x pp=1 has 2 ranks but the job "
                        "has 1"));
  llvm::Expected<MeshAxes> one = splitMesh(*world, MeshShape{});
  ASSERT_TRUE(static_cast<bool>(one)) << llvm::toString(one.takeError());
  EXPECT_FALSE(one->dp || one->tp || one->pp);
}
