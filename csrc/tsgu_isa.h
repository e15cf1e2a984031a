/* tsgu_isa.h: which instruction set the kernels run.
 *
 * x86-64 builds carry AVX2+FMA variants of the kernels beside the portable ones
 * (tsgu_template.h) and choose at run time, so one build runs on any x86-64
 * processor; the environment variable TSGU_PORTABLE=1 (read once) makes them
 * take the portable ones, which is how the tests run those on AVX2 machines.
 * Compiled with -DTSGU_NO_X86_CLONES, a build has the portable variants alone,
 * specialized like the AVX2 ones (the sanitizer build: one variant of each
 * kernel to compile). */
#ifndef TSGU_ISA_H
#define TSGU_ISA_H

#include <stdlib.h>

#if !defined(TSGU_NO_X86_CLONES) && (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define TSGU_X86_CLONES 1
static inline int tsgu_use_avx2(void)
{
    static int use = -1;  /* racy first use is harmless: every thread computes the same value */
    if (use < 0) {
        const char *portable = getenv("TSGU_PORTABLE");
        use = !(portable && portable[0] == '1') && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return use;
}
#else
#define TSGU_X86_CLONES 0
#endif

#endif
