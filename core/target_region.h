#ifndef ATTNSERVE_CORE_TARGET_REGION_H_
#define ATTNSERVE_CORE_TARGET_REGION_H_

// Internal: a region of a source file compiled for ISA extensions beyond the
// build's baseline (the code in it runs only where the CPU has them):
//
//   ATTNSERVE_TARGET_BEGIN("avx512f,avx512bw,avx512bf16,fma")
//   ... functions ...
//   ATTNSERVE_TARGET_END()
//
// GCC: push_options and a target pragma; clang: a target attribute applied to
// every function of the region.

#define ATTNSERVE_PRAGMA_(text) _Pragma(#text)

#if defined(__clang__)
#define ATTNSERVE_TARGET_BEGIN(targets)                                    \
  ATTNSERVE_PRAGMA_(clang attribute push(__attribute__((target(targets))), \
                                         apply_to = function))
#define ATTNSERVE_TARGET_END() ATTNSERVE_PRAGMA_(clang attribute pop)
#else
#define ATTNSERVE_TARGET_BEGIN(targets) \
  ATTNSERVE_PRAGMA_(GCC push_options) ATTNSERVE_PRAGMA_(GCC target(targets))
#define ATTNSERVE_TARGET_END() ATTNSERVE_PRAGMA_(GCC pop_options)
#endif

#endif  // ATTNSERVE_CORE_TARGET_REGION_H_
