/* tsgu_cuda_dev.cuh: what the CUDA kernels share (device side).
 *
 * Values: float, double, __half, __nv_bfloat16; sums are float (double for
 * double values), and a 16-bit result is rounded once, to nearest even.
 * Dense rows are read as packs of V values (16 bytes when the operands' base,
 * strides and width allow it, else V = 1), one pack per lane.
 * Index types: int32_t or int64_t, ptr and col alike. */
#ifndef TSGU_CUDA_DEV_CUH
#define TSGU_CUDA_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include "tsgu_cuda.h"

#define TSGU_WARPS 8 /* warps per block */
#define TSGU_FULL 0xffffffffu

/* TSGU_OK or TSGU_ECUDA + the error of the last launch */
static inline int tsgu_launched(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? TSGU_OK : TSGU_ECUDA + (int)e;
}

template <typename T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type x) { return (T)x; }
template <> __device__ __forceinline__ __half from_acc<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}

/* V values of type T, aligned as one load */
template <typename T, int V> struct __align__(sizeof(T) * V) Pack { T v[V]; };

/* the raw type of one load of B bytes */
template <int B> struct Raw;
template <> struct Raw<16> { typedef int4 type; };
template <> struct Raw<8> { typedef int2 type; };
template <> struct Raw<4> { typedef int type; };
template <> struct Raw<2> { typedef short type; };

/* a[0..V) = the pack at x (V-aligned; read-only memory), converted */
template <typename T, int V>
__device__ __forceinline__ void load_pack(const T *x, typename Acc<T>::type *a)
{
    typedef typename Raw<sizeof(T) * V>::type R;
    R raw = __ldg(reinterpret_cast<const R *>(x));
    Pack<T, V> q;
    memcpy(&q, &raw, sizeof q);
#pragma unroll
    for (int v = 0; v < V; v++) a[v] = to_acc(q.v[v]);
}

/* the pack at y (V-aligned) = a[0..V), rounded */
template <typename T, int V>
__device__ __forceinline__ void store_pack(T *y, const typename Acc<T>::type *a)
{
    Pack<T, V> q;
#pragma unroll
    for (int v = 0; v < V; v++) q.v[v] = from_acc<T>(a[v]);
    *reinterpret_cast<Pack<T, V> *>(y) = q;
}

/* entries [*s, *e) of global row r, clamped into [0, nnz] (never trusted) */
template <typename I>
__device__ __forceinline__ void row_range(const I *ptr, int64_t r, int64_t nnz, int64_t *s, int64_t *e)
{
    int64_t a = (int64_t)ptr[r], b = (int64_t)ptr[r + 1];
    a = a < 0 ? 0 : a > nnz ? nnz : a;
    b = b < a ? a : b > nnz ? nnz : b;
    *s = a;
    *e = b;
}

/* entries [*s, *e) of piece q of a plan (tsgu_cuda.h) and its global row *r;
 * false for a piece the plan does not describe in range (never trusted either) */
template <typename I>
__device__ __forceinline__ bool piece_range(const I *ptr, int64_t R, int64_t nnz, int64_t long_row,
                                            int64_t nlong, const int64_t *long_rows, const int64_t *piece_off,
                                            const int64_t *piece_long, int64_t q, int64_t *r, int64_t *s,
                                            int64_t *e)
{
    int64_t L = piece_long[q];
    if (L < 0 || L >= nlong) return false;
    *r = long_rows[L];
    if (*r < 0 || *r >= R) return false;
    row_range(ptr, *r, nnz, s, e);
    int64_t a = *s + (q - piece_off[L]) * long_row;
    *s = a < *s ? *s : a > *e ? *e : a;
    if (*e - *s > long_row) *e = *s + long_row;
    return true;
}

/* blocks of 256 threads for a grid-stride loop over `work` items: enough to cover
 * them, at least 1, at most 65535 * 16 (each thread then takes several) */
static inline unsigned tsgu_blocks_for(int64_t work)
{
    int64_t b = (work + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

/* blocks of TSGU_WARPS warps for `items` work items of a group of `lanes` (a power of
 * two, at most 32) each */
static inline unsigned tsgu_group_blocks(int64_t items, int lanes)
{
    int64_t per_block = TSGU_WARPS * 32 / lanes;
    return (unsigned)((items + per_block - 1) / per_block);
}

/* lanes to a group (a row of spmm, an entry of sddmm): the width in packs rounded up
 * to a power of two, at most 32 */
static inline int tsgu_lanes_for(int64_t packs)
{
    int l = 1;
    while (l < 32 && l < packs) l <<= 1;
    return l;
}

/* the pack width V (values) for rows of width p at data, with strides rs, bs:
 * 16 bytes when all of them allow it, else 1 */
static inline int tsgu_pack_for(int64_t size, const void *data, int64_t p, int64_t rs, int64_t bs)
{
    int64_t V = 16 / size;
    if ((uintptr_t)data % 16 == 0 && p % V == 0 && rs % V == 0 && bs % V == 0) return (int)V;
    return 1;
}

/* the pack width for rows of width p of both X and Y */
static inline int tsgu_pack_for_both(int64_t size, const tsgu_dense *X, const tsgu_dense *Y, int64_t p)
{
    int V = tsgu_pack_for(size, X->data, p, X->rstride, X->bstride);
    return tsgu_pack_for(size, Y->data, p, Y->rstride, Y->bstride) == V ? V : 1;
}

/* call F<T, I>(args) for the value type rt and index type it */
#define TSGU_CUDA_DISPATCH(rt, it, F, ...)                                                   \
    ((it) == TSGU_I32 ? TSGU_CUDA_BY_REAL(rt, int32_t, F, __VA_ARGS__)                       \
                      : TSGU_CUDA_BY_REAL(rt, int64_t, F, __VA_ARGS__))
#define TSGU_CUDA_BY_REAL(rt, I, F, ...)                                                     \
    ((rt) == TSGU_F32 ? F<float, I>(__VA_ARGS__)                                             \
     : (rt) == TSGU_F64 ? F<double, I>(__VA_ARGS__)                                          \
     : (rt) == TSGU_F16 ? F<__half, I>(__VA_ARGS__)                                          \
                        : F<__nv_bfloat16, I>(__VA_ARGS__))

#endif
