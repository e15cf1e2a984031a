/* kept_blocks.c: memory for large outputs (and a kernel's large workspace), kept for the
 * next call once its tensor is freed (or the kernel is done with it).
 *     take(bytes): the smallest kept block of size s with  bytes <= s <= bytes + bytes/2,
 *                  else a fresh block of bytes rounded up to 2 MiB;
 *     give(block): kept while the kept blocks' total stays <= TSGU_KEPT_BYTES (the
 *                  longest-kept ones freed to make room), else freed.
 * A fresh block of tens of MiB is a fresh mapping (glibc maps every block over 32 MiB
 * anew), whose first write takes a page fault per 4 KiB page: about 2-3 us a page on a
 * virtual machine, 40-50 ms of system time for the 77 MB a 6.4M-entry product fills,
 * where the product itself takes about as long.  A training step frees its outputs
 * before the next step's call of the same op, so a kept block comes back paged in.
 * The glue hands blocks to PyTorch (DLPack, glue_blocks.c); they come back here from
 * the tensor's deleter, on whatever thread frees it, with or without the GIL: the
 * list is guarded by a spin lock, held for a few loads and stores, never while
 * memory is allocated or freed. */
#include <stdatomic.h>
#include <stdlib.h>
#include "tsgu_advise.h"
#include "tsgu_kept_blocks.h"

#define TSGU_KEPT_BYTES ((size_t)1 << 28) /* 256 MiB: three products of 6.4M entries (float32, int64) */
#define TSGU_KEPT_SLOTS 16
#define TSGU_BLOCK_GRAIN ((size_t)1 << 21) /* 2 MiB: a huge page */

typedef struct {
    void *data;
    size_t bytes;
} kept_block;

static kept_block kept[TSGU_KEPT_SLOTS]; /* kept[0 .. count), longest-kept first */
static int count = 0;
static size_t kept_total = 0;
static atomic_flag busy = ATOMIC_FLAG_INIT;

static void lock(void)
{
    while (atomic_flag_test_and_set_explicit(&busy, memory_order_acquire)) {
    }
}
static void unlock(void) { atomic_flag_clear_explicit(&busy, memory_order_release); }

/* kept[i] out of the list (the lock held) */
static kept_block remove_at(int i)
{
    kept_block b = kept[i];
    for (int j = i; j + 1 < count; j++) kept[j] = kept[j + 1];
    count--;
    kept_total -= b.bytes;
    return b;
}

void *tsgu_block_take(size_t *bytes)
{
    size_t want = *bytes, most = want + want / 2;
    kept_block b = {NULL, 0};
    lock();
    int best = -1;
    for (int i = 0; i < count; i++)
        if (kept[i].bytes >= want && kept[i].bytes <= most && (best < 0 || kept[i].bytes < kept[best].bytes))
            best = i;
    if (best >= 0) b = remove_at(best);
    unlock();
    if (b.data) {
        *bytes = b.bytes;
        return b.data;
    }
    if (want > SIZE_MAX - TSGU_BLOCK_GRAIN) return NULL;
    size_t size = (want + TSGU_BLOCK_GRAIN - 1) / TSGU_BLOCK_GRAIN * TSGU_BLOCK_GRAIN;
    void *data = aligned_alloc(TSGU_BLOCK_GRAIN, size ? size : TSGU_BLOCK_GRAIN);
    if (!data) return NULL;
    tsgu_advise_output(data, (int64_t)size);  /* first written once per block: huge pages */
    *bytes = size ? size : TSGU_BLOCK_GRAIN;
    return data;
}

void tsgu_block_give(void *data, size_t bytes)
{
    kept_block out[TSGU_KEPT_SLOTS];   /* freed once the lock is let go */
    int nout = 0;
    if (bytes > TSGU_KEPT_BYTES) {
        free(data);
        return;
    }
    lock();
    while (count > 0 && (count == TSGU_KEPT_SLOTS || kept_total + bytes > TSGU_KEPT_BYTES))
        out[nout++] = remove_at(0);
    kept[count++] = (kept_block){data, bytes};
    kept_total += bytes;
    unlock();
    for (int i = 0; i < nout; i++) free(out[i].data);
}

size_t tsgu_blocks_release(void)
{
    kept_block out[TSGU_KEPT_SLOTS];
    size_t total;
    lock();
    int n = count;
    for (int i = 0; i < n; i++) out[i] = kept[i];
    total = kept_total;
    count = 0;
    kept_total = 0;
    unlock();
    for (int i = 0; i < n; i++) free(out[i].data);
    return total;
}
