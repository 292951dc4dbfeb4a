// Whether this is the fuzz build (LLMC_FUZZ=ON, test/fuzz), where readers
// accept a wrong checksum so that mutated inputs reach the parsing behind
// it. Never true in a build that ships.
#ifndef LLMC_IR_KERNEL_FUZZING_H
#define LLMC_IR_KERNEL_FUZZING_H

namespace llmc::kir {

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
inline constexpr bool kFuzzing = true;
#else
inline constexpr bool kFuzzing = false;
#endif

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_FUZZING_H
