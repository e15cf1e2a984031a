/* tsgu_template_index.h: one value type (real_t, TSGU_VAL) with both index
 * types; included by tsgu_template_types.h only.  TSGU_FN(name) is name
 * suffixed with the variant, e.g. spmm_rows_f32_i64 (and _avx2 on that set). */
#define idx_t int32_t
#define TSGU_FN(name) TSGU_ISA(TSGU_CAT(name, TSGU_CAT(TSGU_CAT(_, TSGU_VAL), _i32)))
#include TSGU_TEMPLATE_FILE
#undef idx_t
#undef TSGU_FN

#define idx_t int64_t
#define TSGU_FN(name) TSGU_ISA(TSGU_CAT(name, TSGU_CAT(TSGU_CAT(_, TSGU_VAL), _i64)))
#include TSGU_TEMPLATE_FILE
#undef idx_t
#undef TSGU_FN
