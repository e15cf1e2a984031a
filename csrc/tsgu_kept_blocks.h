/* tsgu_kept_blocks.h: memory for large outputs (and a kernel's large workspace), kept
 * for reuse once given back (kept_blocks.c): the glue takes a block for an output
 * tensor, whose deleter gives it back. */
#ifndef TSGU_KEPT_BLOCKS_H
#define TSGU_KEPT_BLOCKS_H

#include <stddef.h>

#define TSGU_KEPT_MIN_BYTES ((size_t)2 << 20) /* smaller: malloc's own reuse serves */

/* a block of at least *bytes (2 MiB aligned where fresh), its size into *bytes; NULL for want of memory */
void *tsgu_block_take(size_t *bytes);
/* a block from tsgu_block_take and its size, back: kept for reuse or freed */
void tsgu_block_give(void *data, size_t bytes);
/* frees every kept block; the bytes freed */
size_t tsgu_blocks_release(void);

#endif
