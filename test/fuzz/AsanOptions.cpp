// The AddressSanitizer options every fuzz target starts with (linked into
// each; ASAN_OPTIONS still overrides them).
//
// allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons a new slab and
// unpoisons each allocation from it when its header is compiled with ASan.
// The fuzz targets compile that inline code instrumented while Debian's
// libLLVM/libMLIR have it uninstrumented, and both allocate from the same
// allocators (MLIR's attribute and type storage): a slab that llmc's code
// started is then written by MLIR's allocation without an unpoison, which
// ASan reports as use-after-poison although nothing is wrong. Manual
// poisoning is off instead; ASan's own checks (heap, stack, globals) stay.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}
