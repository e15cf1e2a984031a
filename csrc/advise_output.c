/* advise_output.c: ask for huge pages under a large output (or a kernel's own
 * workspace) before a kernel writes it for the first time.
 *     madvise(the 2 MiB pages wholly inside [data, data + bytes), MADV_HUGEPAGE)
 * A fresh output (torch.empty of a few MiB or more is a fresh mmap) costs one
 * page fault per 4 KiB page on its first write; on a virtual machine that
 * measured about 2-3 us a page: 14-22 ms for a 32 MiB output that the kernel
 * itself fills in 4 ms, against 3.5 ms with huge pages (one fault per 2 MiB).
 * Only the aligned interior is advised, so no byte outside the output changes
 * behaviour; the advice is a hint, so a refusal (no transparent huge pages,
 * another platform) changes nothing and is not an error.  Pages already
 * present are unaffected. */
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE under -std=c11 */
#include "tsgu_advise.h"
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define TSGU_HUGE_PAGE ((uintptr_t)1 << 21)
#define TSGU_ADVISE_MIN_BYTES ((int64_t)2 << 20) /* below, not one whole huge page */

void tsgu_advise_output(void *data, int64_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes < TSGU_ADVISE_MIN_BYTES) return;
    uintptr_t a = (uintptr_t)data, lo = (a + TSGU_HUGE_PAGE - 1) & ~(TSGU_HUGE_PAGE - 1);
    uintptr_t hi = (a + (uintptr_t)bytes) & ~(TSGU_HUGE_PAGE - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)data;
    (void)bytes;
#endif
}
