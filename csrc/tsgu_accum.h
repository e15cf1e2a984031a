/* tsgu_accum.h: the row accumulators of the sparse @ sparse kernels (spgemm.c,
 * spgemm_grad.c): a set of column indices of one row, each with a sum.
 *
 * tsgu_accum, a table of T slots, each an int64 key (-1: empty) and a sum.  For a row
 * that will hold at most `want` columns of m, T is the power of two >= 2*want (at
 * least 16), found by multiplicative hashing and linear probing; where that is not
 * less than m, T = m and column j lives in slot j (no hashing, no probing).  A table
 * never holds more than T/2 keys in hashed mode, so a probe always ends.  One per
 * thread, grown as rows need and reused: O(threads * (largest row or m)) memory.
 * Read back in order, its keys are sorted (tsgu_accum_keys).
 *
 * tsgu_spa, the sparse accumulator for rows read back in order: a sum per column of m
 * and a bitmap of the columns in levels (bit c of level 0 is column c, bit q of level
 * L+1 says that word q of level L is not zero: m/8 bytes in all), set as columns come
 * in and cleared as they are read: a walk down the set bits gives the columns in
 * increasing order at a few operations each, and each one's sum at its own index,
 * where a table would sort (log(count) comparisons each) and look each key up again.
 * It costs m sums per thread, so the kernels take it for m up to TSGU_SPA_MAX_BYTES. */
#ifndef TSGU_ACCUM_H
#define TSGU_ACCUM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t *key;   /* T keys, -1 where empty */
    void *sum;      /* T sums of sum_size bytes each */
    int64_t T;      /* slots in use for the current row */
    int64_t cap;    /* slots allocated */
    int shift;      /* hashed mode: 64 - log2(T); 0 in direct mode (slot = column) */
    size_t sum_size;
} tsgu_accum;

static inline void tsgu_accum_free(tsgu_accum *a)
{
    free(a->key);
    free(a->sum);
    a->key = NULL;
    a->sum = NULL;
    a->cap = 0;
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
        a->sum = malloc((size_t)T * a->sum_size);
        a->cap = T;
        if (!a->key || !a->sum) return TSGU_ENOMEM;   /* tsgu_accum_free frees the rest */
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

/* the keys of a, in increasing order, into out[0..count) (count: how many a holds) */
static inline void tsgu_accum_keys(const tsgu_accum *a, int64_t *out, int64_t count)
{
    int64_t c = 0;
    for (int64_t s = 0; s < a->T && c < count; s++)
        if (a->key[s] >= 0) out[c++] = a->key[s];
    if (a->shift) tsgu_sort_keys(out, count);
}

/* ---- tsgu_spa ---- */
#define TSGU_ACCUM_LEVELS 8
#define TSGU_SPA_MAX_BYTES ((int64_t)1 << 23)   /* a thread's sums: 8 MiB at most */

typedef struct {
    void *sum;                              /* m sums */
    uint64_t *bits;                         /* the bitmap's levels, one after the other */
    int64_t level[TSGU_ACCUM_LEVELS];       /* where level L starts in bits */
    int levels;
} tsgu_spa;

/* an empty spa for columns in [0, m) with sums of sum_size bytes: TSGU_OK, TSGU_ENOMEM,
 * or -1 where m is past what it takes (m * sum_size > TSGU_SPA_MAX_BYTES) */
static inline int tsgu_spa_init(tsgu_spa *a, int64_t m, size_t sum_size)
{
    int64_t words = 0, w = m > 0 ? m : 1;   /* (no columns: one word, never set) */
    int L = 0;
    memset(a, 0, sizeof *a);
    if (m * (int64_t)sum_size > TSGU_SPA_MAX_BYTES) return -1;
    do {                                     /* 2^23 columns: 4 levels */
        w = (w + 63) / 64;
        a->level[L++] = words;
        words += w;
    } while (w > 1);
    a->levels = L;
    a->bits = calloc((size_t)words, sizeof *a->bits);
    a->sum = malloc((size_t)(m > 0 ? m : 1) * sum_size);
    return a->bits && a->sum ? TSGU_OK : TSGU_ENOMEM;
}

static inline void tsgu_spa_free(tsgu_spa *a)
{
    free(a->bits);
    free(a->sum);
    a->bits = NULL;
    a->sum = NULL;
}

/* mark column c; 1 where it was not marked yet (its sum is then to be set, not added to) */
static inline int tsgu_spa_mark(tsgu_spa *a, int64_t c)
{
    uint64_t *w = a->bits + (c >> 6), bit = UINT64_C(1) << (c & 63);
    if (*w & bit) return 0;
    *w |= bit;
    for (int L = 1; L < a->levels; L++) {
        c >>= 6;
        a->bits[a->level[L] + (c >> 6)] |= UINT64_C(1) << (c & 63);
    }
    return 1;
}

/* the marked columns under word q of level L >= 1, in increasing order, at *out
 * (advanced past them); each word cleared once read */
static void tsgu_spa_walk(tsgu_spa *a, int L, int64_t q, int64_t **out)
{
    uint64_t *w = a->bits + a->level[L] + q, word = *w;
    *w = 0;
    for (; word; word &= word - 1) {
        int64_t next = q * 64 + __builtin_ctzll(word);
        if (L > 1) {
            tsgu_spa_walk(a, L - 1, next, out);
            continue;
        }
        uint64_t *w0 = a->bits + next, x = *w0;    /* level 0: the columns themselves */
        int64_t *o = *out;
        *w0 = 0;
        for (; x; x &= x - 1) *o++ = next * 64 + __builtin_ctzll(x);
        *out = o;
    }
}

/* the marked columns, in increasing order, into out; all cleared */
static inline void tsgu_spa_keys(tsgu_spa *a, int64_t *out)
{
    if (a->levels == 1) {
        for (uint64_t x = a->bits[0]; x; x &= x - 1) *out++ = __builtin_ctzll(x);
        a->bits[0] = 0;
        return;
    }
    tsgu_spa_walk(a, a->levels - 1, 0, &out);
}

#endif
