/* group_rows.c: rows grouped by relation, a stable counting sort of idx
 *     off[r] = #{i : idx[i] < r},   perm[off[idx[i]] + #{i' < i : idx[i'] == idx[i]}] = i
 * so group r of tsgu_groups holds the rows with idx[i] == r in increasing order.
 * O(n + R) time, no memory but off and perm.  Every idx[i] is checked to lie in
 * [0, R), and every write to lie in perm, before anything is written through it. */
#include "tsgu.h"

static inline int64_t idx_at(const void *idx, tsgu_index itype, int64_t i)
{
    return itype == TSGU_I32 ? (int64_t)((const int32_t *)idx)[i] : ((const int64_t *)idx)[i];
}

int tsgu_group_rows(const void *idx, tsgu_index itype, int64_t n, int64_t R, int64_t *off,
                    int64_t *perm)
{
    for (int64_t r = 0; r <= R; r++) off[r] = 0;
    for (int64_t i = 0; i < n; i++) {                  /* off[r+1] = rows of relation r */
        int64_t r = idx_at(idx, itype, i);
        if (r < 0 || r >= R) return TSGU_EGROUP;
        off[r + 1]++;
    }
    for (int64_t r = 0; r < R; r++) off[r + 1] += off[r];   /* off[r+1] = end of group r */
    for (int64_t i = 0; i < n; i++) {                  /* off[r] runs from start to end of group r */
        int64_t r = idx_at(idx, itype, i);
        if (r < 0 || r >= R || off[r] >= n) return TSGU_EGROUP; /* idx changed under us */
        perm[off[r]++] = i;
    }
    for (int64_t r = R; r > 0; r--) off[r] = off[r - 1];     /* back to the starts */
    off[0] = 0;
    return TSGU_OK;
}
