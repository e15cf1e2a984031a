/* groups_check.c: a grouping of `rows` rows (tsgu_groups) is well formed:
 *     0 = off[0] <= off[1] <= ... <= off[R] = rows,
 * and perm, where given, a permutation of [0, rows): every row is named exactly
 * once, so every output row of a grouped product is written, by one thread.
 * O(R + rows) time and a byte of workspace per row. */
#include <stdlib.h>
#include "tsgu.h"

int tsgu_groups_check(const tsgu_groups *g, int64_t rows)
{
    const int64_t *off = g->off;
    if (g->ngroups < 0 || off[0] != 0 || off[g->ngroups] != rows) return TSGU_EGROUP;
    for (int64_t r = 0; r < g->ngroups; r++)
        if (off[r + 1] < off[r]) return TSGU_EGROUP;
    if (!g->perm || rows == 0) return TSGU_OK;
    unsigned char *seen = calloc((size_t)rows, 1);
    if (!seen) return TSGU_ENOMEM;
    int status = TSGU_OK;
    for (int64_t q = 0; q < rows && status == TSGU_OK; q++) {
        int64_t i = g->perm[q];
        if (i < 0 || i >= rows || seen[i]) status = TSGU_EGROUP;
        else seen[i] = 1;
    }
    free(seen);
    return status;
}
