/* tsgu_kept_blocks.h: memory for large outputs, kept for reuse once given back
 * (kept_blocks.c).  Not a kernel's: the glue takes a block for an output tensor
 * and its deleter gives it back. */
#ifndef TSGU_KEPT_BLOCKS_H
#define TSGU_KEPT_BLOCKS_H

#include <stddef.h>

/* a block of at least *bytes (2 MiB aligned where fresh), its size into *bytes; NULL for want of memory */
void *tsgu_block_take(size_t *bytes);
/* a block from tsgu_block_take and its size, back: kept for reuse or freed */
void tsgu_block_give(void *data, size_t bytes);
/* frees every kept block; the bytes freed */
size_t tsgu_blocks_release(void);

#endif
