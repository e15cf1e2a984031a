/* tsgu_template_types.h: the four (value, index) type pairs of one instruction
 * set; included by tsgu_template.h only, with TSGU_ISA(name) naming the set.
 * A pattern-only kernel (one that reads no values) defines TSGU_INDEX_ONLY and
 * gets the two float pairs alone, picked with TSGU_PICK_INDEX. */
#define real_t float
#define idx_t int32_t
#define TSGU_FN(name) TSGU_ISA(name##_f32_i32)
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN

#define real_t float
#define idx_t int64_t
#define TSGU_FN(name) TSGU_ISA(name##_f32_i64)
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN

#ifndef TSGU_INDEX_ONLY
#define real_t double
#define idx_t int32_t
#define TSGU_FN(name) TSGU_ISA(name##_f64_i32)
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN

#define real_t double
#define idx_t int64_t
#define TSGU_FN(name) TSGU_ISA(name##_f64_i64)
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN
#endif
