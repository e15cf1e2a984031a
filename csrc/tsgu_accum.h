/* tsgu_accum.h: the row accumulator of the sparse @ sparse kernels (spgemm_count.c,
 * spgemm.c, spgemm_grad_a.c): a set of column indices of one row, each with a sum,
 * that a row fills and then reads back in increasing column order.
 *
 * A table of T slots, each an int64 key (-1: empty) and a sum.  For a row that
 * will hold at most `want` columns of m, T is the power of two >= 2*want (at least
 * 16), found by multiplicative hashing and linear probing; where that is not less
 * than m, T = m and column j lives in slot j (no hashing, no probing, and the
 * slots read in order are the columns in order).  A table never holds more than
 * T/2 keys in hashed mode, so a probe always ends.  One accumulator per thread,
 * grown as rows need and reused: O(threads * (largest row or m)) memory.
 *
 * A row read back in order (tsgu_accum_keys) finds its keys through a bitmap of
 * the m columns in levels (bit c of level 0 is column c, bit q of level L+1 says
 * that word q of level L is not zero: m/8 bytes in all), set as keys are inserted
 * and cleared as they are read: a walk down the set bits gives the columns in
 * increasing order at a few operations each, where sorting them would cost
 * log(count) comparisons each (the accumulator's largest cost). */
#ifndef TSGU_ACCUM_H
#define TSGU_ACCUM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TSGU_ACCUM_LEVELS 8

typedef struct {
    int64_t *key;   /* T keys, -1 where empty */
    void *sum;      /* T sums of sum_size bytes each, or NULL for a set of keys alone */
    int64_t T;      /* slots in use for the current row */
    int64_t cap;    /* slots allocated */
    int shift;      /* hashed mode: 64 - log2(T); 0 in direct mode (slot = column) */
    size_t sum_size;
    uint64_t *bits;                         /* the ordering bitmap (tsgu_accum_ordered), or NULL */
    int64_t level[TSGU_ACCUM_LEVELS];       /* where level L starts in bits */
    int levels;
} tsgu_accum;

static inline void tsgu_accum_free(tsgu_accum *a)
{
    free(a->key);
    free(a->sum);
    free(a->bits);
    a->key = NULL;
    a->sum = NULL;
    a->bits = NULL;
    a->cap = 0;
}

/* give a the bitmap that reads rows of columns in [0, m) back in order (all clear);
 * TSGU_ENOMEM or TSGU_OK.  Without it (m past 2^48), tsgu_accum_keys sorts. */
static inline int tsgu_accum_ordered(tsgu_accum *a, int64_t m)
{
    int64_t words = 0, w = m;
    int L = 0;
    do {
        w = (w + 63) / 64;
        a->level[L++] = words;
        words += w;
    } while (w > 1 && L < TSGU_ACCUM_LEVELS);
    if (w > 1) return TSGU_OK;
    a->levels = L;
    a->bits = calloc((size_t)words, sizeof *a->bits);
    return a->bits ? TSGU_OK : TSGU_ENOMEM;
}

/* key c into slot s (found empty by tsgu_accum_slot) */
static inline void tsgu_accum_insert(tsgu_accum *a, int64_t s, int64_t c)
{
    a->key[s] = c;
    if (a->bits)
        for (int L = 0; L < a->levels; L++, c >>= 6) a->bits[a->level[L] + (c >> 6)] |= UINT64_C(1) << (c & 63);
}

/* make a empty, for a row of at most `want` columns of m; TSGU_ENOMEM or TSGU_OK */
static inline int tsgu_accum_reset(tsgu_accum *a, int64_t want, int64_t m)
{
    int64_t T = 16;
    int lg = 4;
    while (T < 2 * want && T < m) {
        T *= 2;
        lg++;
    }
    if (T >= m) {                 /* a slot per column */
        T = m > 0 ? m : 1;
        a->shift = 0;
    } else {
        a->shift = 64 - lg;
    }
    if (T > a->cap) {
        free(a->key);
        free(a->sum);
        a->key = malloc((size_t)T * sizeof *a->key);
        a->sum = a->sum_size ? malloc((size_t)T * a->sum_size) : NULL;
        a->cap = T;
        if (!a->key || (a->sum_size && !a->sum)) return TSGU_ENOMEM;   /* tsgu_accum_free frees the rest */
    }
    a->T = T;
    memset(a->key, 0xff, (size_t)T * sizeof *a->key);   /* every key -1 */
    return TSGU_OK;
}

/* the slot of column j (0 <= j < m): where it is, or the empty one it would take */
static inline int64_t tsgu_accum_slot(const tsgu_accum *a, int64_t j)
{
    if (!a->shift) return j;
    int64_t s = (int64_t)(((uint64_t)j * UINT64_C(0x9E3779B97F4A7C15)) >> a->shift), mask = a->T - 1;
    while (a->key[s] != j && a->key[s] != -1) s = (s + 1) & mask;
    return s;
}

/* y[0..len) into a max-heap order, then sorted (the fallback of tsgu_sort_keys) */
static inline void tsgu_heapsort_keys(int64_t *y, int64_t len)
{
    for (int64_t e = len, s = len / 2;;) {
        if (s > 0) {
            s--;                                   /* build the heap ... */
        } else {
            if (--e <= 0) return;                  /* ... then move its top to the end */
            int64_t t = y[0];
            y[0] = y[e];
            y[e] = t;
        }
        for (int64_t r = s, c; (c = 2 * r + 1) < e; r = c) {   /* sift y[s] down within y[0..e) */
            if (c + 1 < e && y[c + 1] > y[c]) c++;
            if (y[r] >= y[c]) break;
            int64_t t = y[r];
            y[r] = y[c];
            y[c] = t;
        }
    }
}

/* sort x[0..n) increasingly: introsort (quicksort on a median of three, heapsort for
 * a range that exhausts its depth budget, insertion sort for short ranges); the
 * larger side of each split waits on a stack, so it never holds more than 64 */
static inline void tsgu_sort_keys(int64_t *x, int64_t n)
{
    struct { int64_t lo, hi; int budget; } stack[64];
    int top = 0, budget = 2;
    for (int64_t len = n; len > 1; len /= 2) budget += 2;
    int64_t lo = 0, hi = n;
    for (;;) {
        if (hi - lo > 24 && budget > 0) {
            int64_t a = x[lo], b = x[lo + (hi - lo) / 2], c = x[hi - 1];
            int64_t pivot = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
            int64_t i = lo, j = hi - 1;
            while (i <= j) {                  /* Hoare: x[lo..j] <= pivot <= x[i..hi) */
                while (x[i] < pivot) i++;
                while (x[j] > pivot) j--;
                if (i <= j) {
                    int64_t t = x[i];
                    x[i++] = x[j];
                    x[j--] = t;
                }
            }
            budget--;
            int small_left = j + 1 - lo < hi - i;
            stack[top].lo = small_left ? i : lo;
            stack[top].hi = small_left ? hi : j + 1;
            stack[top++].budget = budget;
            if (small_left) hi = j + 1;
            else lo = i;
            continue;
        }
        if (hi - lo > 24) {
            tsgu_heapsort_keys(x + lo, hi - lo);
        } else {
            for (int64_t i = lo + 1; i < hi; i++) {
                int64_t v = x[i], j = i;
                for (; j > lo && x[j - 1] > v; j--) x[j] = x[j - 1];
                x[j] = v;
            }
        }
        if (!top) return;
        top--;
        lo = stack[top].lo;
        hi = stack[top].hi;
        budget = stack[top].budget;
    }
}

/* the set bits under word q of level L, in increasing order, appended at out[*c],
 * each word cleared once read */
static inline void tsgu_accum_walk(tsgu_accum *a, int L, int64_t q, int64_t *out, int64_t *c)
{
    uint64_t *w = a->bits + a->level[L] + q, word = *w;
    *w = 0;
    while (word) {
        int64_t next = q * 64 + __builtin_ctzll(word);
        word &= word - 1;
        if (L == 0) out[(*c)++] = next;
        else tsgu_accum_walk(a, L - 1, next, out, c);
    }
}

/* the keys of a, in increasing order, into out[0..count) (count: how many a holds) */
static inline void tsgu_accum_keys(tsgu_accum *a, int64_t *out, int64_t count)
{
    int64_t c = 0;
    if (a->bits) {
        tsgu_accum_walk(a, a->levels - 1, 0, out, &c);
        return;
    }
    for (int64_t s = 0; s < a->T && c < count; s++)
        if (a->key[s] >= 0) out[c++] = a->key[s];
    if (a->shift) tsgu_sort_keys(out, count);
}

#endif
