/* tsgu_template.h: instantiate a kernel template for every (value, index) type pair.
 *
 * A kernel file defines TSGU_TEMPLATE_FILE as its own name and includes this
 * header; the file is then included once per pair with real_t, idx_t and
 * TSGU_FN(name) (name suffixed with the pair) defined.  One source, four
 * variants, no copy-paste. */
#define TSGU_IN_TEMPLATE 1

#define real_t float
#define idx_t int32_t
#define TSGU_FN(name) name##_f32_i32
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN

#define real_t float
#define idx_t int64_t
#define TSGU_FN(name) name##_f32_i64
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN

#define real_t double
#define idx_t int32_t
#define TSGU_FN(name) name##_f64_i32
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN

#define real_t double
#define idx_t int64_t
#define TSGU_FN(name) name##_f64_i64
#include TSGU_TEMPLATE_FILE
#undef real_t
#undef idx_t
#undef TSGU_FN

#undef TSGU_IN_TEMPLATE

/* the variant of fn for a (tsgu_real, tsgu_index) pair */
#define TSGU_PICK(fn, rtype, itype)                                    \
    ((rtype) == TSGU_F32 ? ((itype) == TSGU_I32 ? fn##_f32_i32 : fn##_f32_i64) \
                         : ((itype) == TSGU_I32 ? fn##_f64_i32 : fn##_f64_i64))
