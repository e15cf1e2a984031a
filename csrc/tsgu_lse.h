/* tsgu_lse.h: the log-sum-exp of one group (lse_rows.c, lse_cols.c): its values
 * v and nz zeros (absent entries counted as genuine zeros; nz = 0 when they
 * are left out).  shift = max(max v, 0 if nz > 0), or 0 where that is not
 * finite (an empty group, or a +inf value: no inf - inf); then with
 * s = sum exp(v - shift)
 *     lse = shift + log(s + nz * exp(-shift))    (-inf when nothing contributes) */
#ifndef TSGU_LSE_H
#define TSGU_LSE_H

#include <math.h>
#include <stdint.h>

static inline double tsgu_lse_shift(double vmax, int64_t nz)
{
    double shift = nz > 0 && vmax < 0 ? 0 : vmax;
    return isfinite(shift) ? shift : 0;
}

static inline double tsgu_lse_finish(double shift, double s, int64_t nz)
{
    return shift + log(nz > 0 ? s + (double)nz * exp(-shift) : s);  /* no 0 * inf */
}

#endif
