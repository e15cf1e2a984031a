/* tsgu_template_types.h: the value types of one instruction set; included by
 * tsgu_template.h only, with TSGU_ISA(name) naming the set.  Each value type
 * defines, besides real_t (the stored type) and TSGU_VAL (its name suffix):
 *   acc_t          the type sums are kept in (real_t, or float for 16-bit types)
 *   TSGU_LOAD(x)   a stored real_t as acc_t
 *   TSGU_STORE(v)  an acc_t rounded to real_t (to nearest, ties to even)
 *   TSGU_NARROW    1 when real_t is narrower than acc_t, else 0
 * and is instantiated for both index types by tsgu_template_index.h.
 * A pattern-only kernel (one that reads no values) defines TSGU_INDEX_ONLY and
 * gets float alone, picked with TSGU_PICK_INDEX.  A kernel that defines
 * TSGU_HALF_TOO also gets float16 and bfloat16 (stored as uint16_t), picked
 * with TSGU_PICK_HALF; the others get float and double, picked with TSGU_PICK. */
#define acc_t real_t
#define TSGU_LOAD(x) (x)
#define TSGU_STORE(v) (v)
#define TSGU_NARROW 0

#define real_t float
#define TSGU_VAL f32
#include "tsgu_template_index.h"
#undef real_t
#undef TSGU_VAL

#ifndef TSGU_INDEX_ONLY
#define real_t double
#define TSGU_VAL f64
#include "tsgu_template_index.h"
#undef real_t
#undef TSGU_VAL
#endif

#undef acc_t
#undef TSGU_LOAD
#undef TSGU_STORE
#undef TSGU_NARROW

#ifdef TSGU_HALF_TOO
#define real_t uint16_t
#define acc_t float
#define TSGU_NARROW 1

#define TSGU_LOAD(x) tsgu_f16_to_f32(x)
#define TSGU_STORE(v) tsgu_f32_to_f16(v)
#define TSGU_VAL f16
#include "tsgu_template_index.h"
#undef TSGU_LOAD
#undef TSGU_STORE
#undef TSGU_VAL

#define TSGU_LOAD(x) tsgu_bf16_to_f32(x)
#define TSGU_STORE(v) tsgu_f32_to_bf16(v)
#define TSGU_VAL bf16
#include "tsgu_template_index.h"
#undef TSGU_LOAD
#undef TSGU_STORE
#undef TSGU_VAL

#undef real_t
#undef acc_t
#undef TSGU_NARROW
#endif
