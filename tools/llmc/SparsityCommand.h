// `llmc sparsity check CKPT`: whether each weight of a checkpoint is 2:4.
#ifndef LLMC_TOOLS_LLMC_SPARSITYCOMMAND_H
#define LLMC_TOOLS_LLMC_SPARSITYCOMMAND_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace llmc {

/// Prints one line per matrix weight of the llmc run checkpoint at `path`
/// (name, shape, zeros, whether 2:4, whether selected: it has a
/// `sparsity_mask.` state) and returns whether every selected weight is
/// 2:4 and zero wherever its mask is (false also when none is selected).
/// An error for a checkpoint that cannot be read.
llvm::Expected<bool> checkSparsity(llvm::StringRef path,
                                   llvm::raw_ostream &os);

} // namespace llmc

#endif // LLMC_TOOLS_LLMC_SPARSITYCOMMAND_H
