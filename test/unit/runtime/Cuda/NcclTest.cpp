// Tests of the NCCL backend that need no GPU: loading libnccl.so.2 from the
// toolkit, the unique id, and the error where there is no GPU. On a machine
// with one, Create also runs a one-rank all-reduce on the device.
#include "runtime/Cuda/NcclCommunicator.h"

#include "runtime/Cuda/CudaApi.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstring>
#include <vector>

using namespace llmc;
using namespace llmc::runtime::comm;
using ::testing::HasSubstr;

namespace {

TEST(Nccl, LoadsAndReportsItsVersion) {
  llvm::Expected<const NcclApi *> nccl = loadNccl();
  ASSERT_TRUE(static_cast<bool>(nccl)) << llvm::toString(nccl.takeError());
  int version = 0;
  ASSERT_EQ((*nccl)->getVersion(&version), ncclSuccess);
  EXPECT_EQ(version, (*nccl)->version);
  EXPECT_GE(version, 21800);
  // The library found is the one whose header llmc was built with.
  EXPECT_EQ(ncclVersionString(version),
            std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) +
                "." + std::to_string(NCCL_PATCH));
  EXPECT_THAT((*nccl)->getErrorString(ncclInvalidArgument),
              HasSubstr("invalid argument"));
}

TEST(Nccl, VersionStrings) {
  EXPECT_EQ(ncclVersionString(22809), "2.28.9");
  EXPECT_EQ(ncclVersionString(21803), "2.18.3");
  EXPECT_EQ(ncclVersionString(2804), "2.8.4"); // before 2.9's encoding
}

TEST(Nccl, UniqueIdWithoutGpu) {
  llvm::Expected<const NcclApi *> nccl = loadNccl();
  ASSERT_TRUE(static_cast<bool>(nccl)) << llvm::toString(nccl.takeError());
  std::unique_ptr<Communicator> world = createSingleProcess();
  llvm::Expected<ncclUniqueId> id = shareUniqueId(*world, **nccl);
  ASSERT_TRUE(static_cast<bool>(id)) << llvm::toString(id.takeError());
  ncclUniqueId zero{};
  EXPECT_NE(std::memcmp(&*id, &zero, sizeof(zero)), 0);
}

TEST(Nccl, Create) {
  std::unique_ptr<Communicator> world = createSingleProcess();
  llvm::Expected<std::unique_ptr<Communicator>> made =
      createNccl(*world, 0, {});
  llvm::Expected<const cuda::DriverApi *> driver = cuda::loadDriver();
  if (!driver) {
    // This machine has no GPU: the error says so and names the rank.
    std::string why = llvm::toString(driver.takeError());
    ASSERT_FALSE(static_cast<bool>(made));
    std::string message = llvm::toString(made.takeError());
    EXPECT_THAT(message, HasSubstr("rank 0 ('world'): cannot create an NCCL "
                                   "communicator: "));
    EXPECT_THAT(message, HasSubstr(why));
    return;
  }
  ASSERT_TRUE(static_cast<bool>(made)) << llvm::toString(made.takeError());
  Communicator &nccl = **made;
  EXPECT_STREQ(nccl.backend(), "nccl");
  EXPECT_EQ(nccl.size(), 1);
  const cuda::DriverApi &cu = **driver;
  std::vector<float> host = {1, 2, 3, 4}, back(4, 0);
  CUdeviceptr buffer = 0;
  ASSERT_EQ(cu.memAlloc(&buffer, sizeof(float) * 4), CUDA_SUCCESS);
  cu.memcpyHtoDAsync(buffer, host.data(), sizeof(float) * 4, nullptr);
  void *device = reinterpret_cast<void *>(buffer);
  EXPECT_FALSE(static_cast<bool>(nccl.wait(nccl.allReduce(
      device, device, 4, kir::DType::F32, ReduceOp::Avg))));
  EXPECT_FALSE(static_cast<bool>(nccl.barrier()));
  cu.memcpyDtoHAsync(back.data(), buffer, sizeof(float) * 4, nullptr);
  cu.ctxSynchronize();
  EXPECT_EQ(back, host);
  cu.memFree(buffer);
}

} // namespace
