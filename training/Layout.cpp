// The world, the mesh and its axes' communicators.
#include "training/Layout.h"

#include "runtime/Comm/Mesh.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"

using namespace llmc;
using namespace llmc::training;
namespace runtime = ::llmc::runtime;

llvm::Expected<Layout> training::openWorld(const TrainingConfig &config) {
  Layout layout;
  layout.commOptions.timeoutSeconds = config.parallel.timeoutSeconds;
  llvm::Expected<std::unique_ptr<runtime::comm::Communicator>> world =
      runtime::comm::createWorld(layout.commOptions);
  if (!world)
    return world.takeError();
  layout.world = std::move(*world);
  layout.rank = layout.world->rank();
  layout.worldSize = layout.world->size();
  return layout;
}

llvm::Error training::resolveMesh(TrainingConfig &config,
                                  const Layout &layout) {
  // The mesh: dp x tp x pp ranks; dp defaults to what tp and pp leave.
  const int64_t tpSize = config.parallel.tp, ppSize = config.parallel.pp;
  if (config.origins.count("parallel.dp")) {
    int64_t mesh = config.parallel.dp * tpSize * ppSize;
    if (mesh != layout.worldSize)
      return llvm::createStringError(
          llvm::formatv(
              "the mesh dp={0} x tp={1} x pp={2} needs {3} rank{4} but the job "
              "has {5}{6}",
              config.parallel.dp, tpSize, ppSize, mesh, mesh == 1 ? "" : "s",
              layout.worldSize,
              layout.worldSize == 1
                  ? llvm::formatv(": start it with a launcher, e.g. "
                                  "scripts/mpirun.sh -np {0} llmc run ...",
                                  mesh)
                        .str()
                  : std::string())
              .str());
  } else if (layout.worldSize % (tpSize * ppSize) != 0) {
    return llvm::createStringError(
        llvm::formatv(
            "the job has {0} rank{1}, which is not a multiple of tp={2} x "
            "pp={3}"
            "{4}",
            layout.worldSize, layout.worldSize == 1 ? "" : "s", tpSize, ppSize,
            layout.worldSize == 1
                ? llvm::formatv(": start it with a launcher, e.g. "
                                "scripts/mpirun.sh -np {0} llmc run ...",
                                tpSize * ppSize)
                      .str()
                : std::string())
            .str());
  } else {
    config.parallel.dp = layout.worldSize / (tpSize * ppSize);
  }
  if (ppSize > 1) {
    // What pipeline parallelism does not compose with yet.
    if (config.device != "cpu")
      return llvm::createStringError(
          "--pp on --device " + config.device +
          " is not implemented yet (the stages' transfers run on "
          "MPI, on the CPU)");
    if (config.modelMlirPath.empty() && ppSize > config.model.nLayer)
      return llvm::createStringError(
          llvm::formatv(
              "--pp {0} is more than the model's {1} transformer blocks: every "
              "pipeline stage needs at least one; choose a pp of at most {1}",
              ppSize, config.model.nLayer)
              .str());
  }
  if (tpSize > 1 && config.parallel.dp > 1 && config.parallel.zero == 3)
    return llvm::createStringError(
        "parallel.zero 3 with tensor parallelism is not implemented "
        "yet (the tp shares of the parameters would be cut again "
        "into ZeRO-3 blocks); use zero 0, 1 or 2 with tp");
  if (config.parallel.dp == 1 && config.parallel.zero > 0)
    llvm::errs() << "llmc run: warning: parallel.zero " << config.parallel.zero
                 << " shards state over data-parallel ranks; one process "
                    "holds it all\n";
  return llvm::Error::success();
}

llvm::Error training::splitMesh(const TrainingConfig &config, Layout &layout) {
  const int worldSize = layout.worldSize;
  const int64_t tpSize = config.parallel.tp, ppSize = config.parallel.pp;
  llvm::raw_ostream &out = layout.out();
  runtime::comm::Communicator *world = layout.world.get();
  if (worldSize > 1) {
    // Every rank must train the same thing: the resolved configs' hashes
    // are compared before anything else happens.
    std::string text;
    llvm::raw_string_ostream os(text);
    printTrainingConfig(config, os);
    int64_t hash = int64_t(llvm::xxh3_64bits(text));
    std::vector<int64_t> hashes(worldSize);
    runtime::comm::Ticket ticket =
        world->allGather(&hash, hashes.data(), 1, kir::DType::I64);
    if (llvm::Error err = world->wait(ticket))
      return err;
    for (int other = 0; other < worldSize; ++other)
      if (hashes[other] != hashes[0])
        return llvm::createStringError(
            llvm::formatv(
                "the config of rank {0} differs from rank 0's (resolved config "
                "hash {1:x} vs {2:x}): every rank must run the same config and "
                "flags",
                other, uint64_t(hashes[other]), uint64_t(hashes[0]))
                .str());
    out << llvm::format("llmc run: %d ranks (%s), mesh dp=%lld x tp=%lld x "
                        "pp=%lld (tp fastest), zero %lld, gradient buckets "
                        "of %g MiB\n",
                        worldSize, world->backend(),
                        (long long)config.parallel.dp, (long long)tpSize,
                        (long long)ppSize, (long long)config.parallel.zero,
                        config.parallel.bucketMb);
    if (config.parallel.sp)
      out << llvm::format("llmc run: sequence parallel: the residual stream "
                          "is [B, T/%lld, C] per tp rank\n",
                          (long long)tpSize);
  }
  // One communicator per mesh axis of more than one rank.
  if (worldSize > 1) {
    llvm::Expected<runtime::comm::MeshAxes> axes = runtime::comm::splitMesh(
        *world, {int(config.parallel.dp), int(tpSize), int(ppSize)});
    if (!axes)
      return axes.takeError();
    layout.dp = std::move(axes->dp);
    layout.tp = std::move(axes->tp);
    layout.pp = std::move(axes->pp);
  }
  if (layout.pp) {
    // 1F1B: every dp rank runs m = global / (micro * dp) micro-batches
    // through the stages; the pipeline idles (p-1)/(m+p-1) of a step,
    // the bubble `llmc plan` counts.
    int64_t microBatches =
        config.globalBatchSize / (config.microBatchSize * config.parallel.dp);
    out << llvm::format("llmc run: pipeline of %lld stages, 1F1B over %lld "
                        "micro-batches per step: bubble (p-1)/(m+p-1) = "
                        "%.4f\n",
                        (long long)ppSize, (long long)microBatches,
                        double(ppSize - 1) / double(microBatches + ppSize - 1));
    // The first and the last stage share the tied parameters' gradients:
    // on 2 stages the pp axis itself, on more a split of it.
    int stage = layout.pp->rank();
    bool ends = stage == 0 || stage == int(ppSize) - 1;
    llvm::Expected<std::unique_ptr<runtime::comm::Communicator>> tied =
        layout.pp->split(ends ? 0 : 1, stage, "pp");
    if (!tied)
      return tied.takeError();
    if (ends)
      layout.ppTied = std::move(*tied);
  }
  return llvm::Error::success();
}
