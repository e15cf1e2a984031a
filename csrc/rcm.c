/* rcm.c: the reverse Cuthill-McKee ordering of a square pattern A (n x n), on the graph
 *     G = pattern(A + A^T) without the diagonal     (symmetric: pattern(A) without it, A
 *                                                     taken to be symmetric)
 * The components of G are numbered one after another, each from its node of least
 * (degree, id), in that order: nodes without neighbours first (last, once reversed).
 * A component is numbered by a breadth-first search from a pseudo-peripheral node r
 * (George and Liu): starting from that node, r becomes a node of least (degree, id) in
 * the last level of the search from r, as long as that search goes deeper, at most
 * TSGU_RCM_ROOT_TRIES times.  The search from r numbers each node's unnumbered
 * neighbours in increasing (degree, id).  Reversed, that numbering is the ordering:
 * perm[k] = the node placed k-th, so A[perm][:, perm] holds its entries near the
 * diagonal wherever the graph allows it.  Deterministic; O(nnz log(max degree)) time,
 * O(n + nnz) memory; A is checked first (tsgu_csr_check); every error path frees what
 * was allocated. */
#include <stdlib.h>
#include "tsgu.h"
#include "tsgu_prefetch.h"

#define TSGU_RCM_ROOT_TRIES 16

static inline int64_t at(const void *a, tsgu_index itype, int64_t i)
{
    return itype == TSGU_I32 ? (int64_t)((const int32_t *)a)[i] : ((const int64_t *)a)[i];
}

typedef struct {
    int64_t *ptr, *adj; /* G's neighbours of node v: adj[ptr[v] .. ptr[v+1]) */
} graph;

/* G from A: each node's neighbours in A's row merged with those in A^T's (unless
 * symmetric), both sorted, the diagonal and repeats left out; G->ptr (n+1) and G->adj
 * (room for every entry of A and A^T) are allocated here */
static int build_graph(const tsgu_csr *A, int symmetric, graph *G)
{
    const int64_t n = A->nrows, nnz = A->nnz;
    const int64_t room = symmetric ? nnz : 2 * nnz;
    int64_t *tptr = NULL, *trow = NULL;
    G->ptr = malloc((size_t)(n + 1) * sizeof(int64_t));
    G->adj = malloc((size_t)(room > 0 ? room : 1) * sizeof(int64_t));
    if (!symmetric) {
        tptr = calloc((size_t)(n + 1), sizeof(int64_t));
        trow = malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(int64_t));
    }
    if (!G->ptr || !G->adj || (!symmetric && (!tptr || !trow))) {
        free(tptr);
        free(trow);
        free(G->ptr);
        free(G->adj);
        return TSGU_ENOMEM;
    }
    if (!symmetric) {                             /* A^T by a counting sort: rows in increasing order */
        for (int64_t e = 0; e < nnz; e++) tptr[at(A->col, A->itype, e) + 1]++;
        for (int64_t j = 0; j < n; j++) tptr[j + 1] += tptr[j];
        for (int64_t i = 0; i < n; i++)
            for (int64_t e = at(A->ptr, A->itype, i); e < at(A->ptr, A->itype, i + 1); e++)
                trow[tptr[at(A->col, A->itype, e)]++] = i;
        for (int64_t j = n; j > 0; j--) tptr[j] = tptr[j - 1];
        tptr[0] = 0;
    }
    int64_t k = 0;
    for (int64_t v = 0; v < n; v++) {
        G->ptr[v] = k;
        int64_t a = at(A->ptr, A->itype, v), a_end = at(A->ptr, A->itype, v + 1);
        int64_t b = symmetric ? 0 : tptr[v], b_end = symmetric ? 0 : tptr[v + 1];
        while (a < a_end || b < b_end) {          /* a sorted merge of the two lists */
            int64_t x = a < a_end ? at(A->col, A->itype, a) : INT64_MAX;
            int64_t y = b < b_end ? trow[b] : INT64_MAX;
            int64_t w = x < y ? x : y;
            a += x == w;
            b += y == w;
            if (w != v) G->adj[k++] = w;
        }
    }
    G->ptr[n] = k;
    free(tptr);
    free(trow);
    return TSGU_OK;
}

static inline int64_t degree(const graph *G, int64_t v) { return G->ptr[v + 1] - G->ptr[v]; }

/* A search's queue is read a few nodes ahead: the pointers of the node RCM_AHEAD_PTR
 * places on, the neighbours of the one RCM_AHEAD_ADJ on, and their marks for the next;
 * each a cache miss otherwise (the nodes are anywhere) */
#define RCM_AHEAD_PTR 12
#define RCM_AHEAD_ADJ 6
#define RCM_AHEAD_MARK 3
static inline void prefetch_ahead(const graph *G, const int64_t *queue, int64_t at, int64_t tail,
                                  const int64_t *visited)
{
    if (at + RCM_AHEAD_PTR < tail) TSGU_PREFETCH(G->ptr + queue[at + RCM_AHEAD_PTR]);
    if (at + RCM_AHEAD_ADJ < tail) TSGU_PREFETCH(G->adj + G->ptr[queue[at + RCM_AHEAD_ADJ]]);
    if (at + RCM_AHEAD_MARK < tail) {
        int64_t u = queue[at + RCM_AHEAD_MARK];
        for (int64_t e = G->ptr[u]; e < G->ptr[u + 1]; e++) TSGU_PREFETCH(visited + G->adj[e]);
    }
}

#define NUMBERED (-2) /* visited[v] of a node already placed */

/* breadth-first search from root over the unnumbered nodes it reaches, visited[v] set to
 * stamp: the nodes in order[0 .. *size), the last level starting at order[*last]; returns
 * the number of levels */
static int64_t levels(const graph *G, int64_t root, int64_t stamp, int64_t *visited, int64_t *order,
                      int64_t *size, int64_t *last)
{
    int64_t head = 0, tail = 1, depth = 0;
    order[0] = root;
    visited[root] = stamp;
    while (head < tail) {                     /* one level: order[head .. level_end) */
        int64_t level_end = tail;
        *last = head;
        depth++;
        for (; head < level_end; head++) {
            prefetch_ahead(G, order, head, tail, visited);
            int64_t v = order[head];
            for (int64_t e = G->ptr[v]; e < G->ptr[v + 1]; e++) {
                int64_t w = G->adj[e];
                if (visited[w] != stamp && visited[w] != NUMBERED) {
                    visited[w] = stamp;
                    order[tail++] = w;
                }
            }
        }
    }
    *size = tail;
    return depth;
}

static inline int before(const graph *G, int64_t u, int64_t w)   /* (degree, id) of u < of w */
{
    int64_t du = degree(G, u), dw = degree(G, w);
    return du < dw || (du == dw && u < w);
}

/* node ids a[0 .. count) in increasing (degree, id), a merge sort through tmp (count) */
static void sort_by_degree(const graph *G, int64_t *a, int64_t count, int64_t *tmp)
{
    if (count <= 32) {
        for (int64_t i = 1; i < count; i++) {
            int64_t v = a[i], j = i;
            for (; j > 0 && before(G, v, a[j - 1]); j--) a[j] = a[j - 1];
            a[j] = v;
        }
        return;
    }
    int64_t half = count / 2, i = 0, j = half, k = 0;
    sort_by_degree(G, a, half, tmp);
    sort_by_degree(G, a + half, count - half, tmp);
    while (i < half && j < count) tmp[k++] = before(G, a[j], a[i]) ? a[j++] : a[i++];
    while (i < half) tmp[k++] = a[i++];
    while (j < count) tmp[k++] = a[j++];
    for (k = 0; k < count; k++) a[k] = tmp[k];
}

int tsgu_rcm(const tsgu_csr *A, int symmetric, int64_t *perm)
{
    const int64_t n = A->nrows;
    if (A->batch != 1 || A->ncols != n) return TSGU_ECOL_RANGE;  /* the glue passes one square item */
    int status = tsgu_csr_check_ends(A);
    if (status == TSGU_OK) status = tsgu_csr_check(A, 1);
    if (status != TSGU_OK || n == 0) return status;
    int64_t *visited = malloc((size_t)n * sizeof(int64_t));
    int64_t *order = malloc((size_t)n * sizeof(int64_t));
    int64_t *starts = malloc((size_t)n * sizeof(int64_t));
    graph G = {0};
    if (!visited || !order || !starts || (status = build_graph(A, symmetric, &G)) != TSGU_OK) {
        free(visited);
        free(order);
        free(starts);
        return status != TSGU_OK ? status : TSGU_ENOMEM;
    }
    /* starts: the nodes by increasing (degree, id), a counting sort through visited (degrees < n) */
    for (int64_t d = 0; d < n; d++) visited[d] = 0;
    for (int64_t v = 0; v < n; v++) visited[degree(&G, v)]++;
    for (int64_t d = 0, sum = 0; d < n; d++) {
        int64_t c = visited[d];
        visited[d] = sum;
        sum += c;
    }
    for (int64_t v = 0; v < n; v++) starts[visited[degree(&G, v)]++] = v;
    /* visited[v]: NUMBERED, or the stamp of the last search that reached v (-1: none) */
    int64_t stamp = 0, placed = 0;            /* the Cuthill-McKee order goes into perm, reversed at the end */
    for (int64_t v = 0; v < n; v++) visited[v] = -1;
    for (int64_t q = 0; q < n; q++) {
        int64_t s = starts[q];
        if (visited[s] == NUMBERED) continue;
        int64_t root = s, size, last;
        int64_t depth = levels(&G, root, stamp++, visited, order, &size, &last);
        for (int tries = 0; tries < TSGU_RCM_ROOT_TRIES && depth > 1; tries++) {
            int64_t x = order[last];
            for (int64_t i = last + 1; i < size; i++)
                if (before(&G, order[i], x)) x = order[i];
            int64_t d = levels(&G, x, stamp++, visited, order, &size, &last);
            if (d <= depth) break;
            root = x;
            depth = d;
        }
        /* Cuthill-McKee from root: perm[placed ..) is the queue */
        int64_t head = placed;
        perm[placed++] = root;
        visited[root] = NUMBERED;
        while (head < placed) {
            prefetch_ahead(&G, perm, head, placed, visited);
            int64_t v = perm[head++], first = placed;
            for (int64_t e = G.ptr[v]; e < G.ptr[v + 1]; e++) {
                int64_t w = G.adj[e];
                if (visited[w] != NUMBERED) {
                    visited[w] = NUMBERED;
                    perm[placed++] = w;
                }
            }
            sort_by_degree(&G, perm + first, placed - first, order);   /* order: free by now */
        }
    }
    for (int64_t i = 0, j = n - 1; i < j; i++, j--) {   /* reversed */
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    free(G.ptr);
    free(G.adj);
    free(visited);
    free(order);
    free(starts);
    return TSGU_OK;
}
