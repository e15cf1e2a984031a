/* groups_check.c: the O(R) check of a grouping of `rows` rows (tsgu_groups)
 *     0 = off[0] <= off[1] <= ... <= off[R] = rows
 * (perm is checked by the kernels as they read it). */
#include "tsgu.h"

int tsgu_groups_check(const tsgu_groups *g, int64_t rows)
{
    int64_t R = g->ngroups;
    const int64_t *off = g->off;
    if (R < 0 || off[0] != 0 || off[R] != rows) return TSGU_EGROUP;
    for (int64_t r = 0; r < R; r++)
        if (off[r + 1] < off[r]) return TSGU_EGROUP;
    return TSGU_OK;
}
