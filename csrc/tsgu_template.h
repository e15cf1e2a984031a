/* tsgu_template.h: instantiate a kernel template for every (value, index) type
 * pair and, on x86-64, for two instruction sets.
 *
 * A kernel file defines TSGU_TEMPLATE_FILE as its own name and includes this
 * header; the file is then included once per variant with real_t, acc_t,
 * idx_t, TSGU_LOAD, TSGU_STORE, TSGU_NARROW (see tsgu_template_types.h),
 * TSGU_FN(name) (name suffixed with the variant) and TSGU_ISA_ATTR (the
 * function attribute selecting the instruction set) defined.  One source,
 * every variant, no copy-paste; TSGU_PICK selects one at run time. */
#include "tsgu_inline.h"
#include "tsgu_isa.h"
#ifdef TSGU_HALF_TOO
#include "tsgu_half.h"
#endif
#define TSGU_IN_TEMPLATE 1
#define TSGU_CAT_(a, b) a##b
#define TSGU_CAT(a, b) TSGU_CAT_(a, b) /* pastes a and b after expanding them */

/* portable variants (baseline instruction set).  Where AVX2 variants are built
 * beside them they are only the fallback of processors without AVX2 (and of
 * TSGU_PORTABLE=1): their row loops take any width in one body rather than one
 * body per specialized width (TSGU_BY_WIDTH), which takes a quarter off the
 * build's time */
#define TSGU_ISA_ATTR
#define TSGU_ISA(name) name
#if TSGU_X86_CLONES
#define TSGU_FIXED_WIDTHS 0
#else
#define TSGU_FIXED_WIDTHS 1
#endif
#include "tsgu_template_types.h"
#undef TSGU_ISA_ATTR
#undef TSGU_ISA
#undef TSGU_FIXED_WIDTHS

#if TSGU_X86_CLONES /* AVX2+FMA variants, chosen at run time by tsgu_use_avx2() */
#define TSGU_ISA_ATTR __attribute__((target("avx2,fma")))
#define TSGU_ISA(name) TSGU_CAT(name, _avx2)
#define TSGU_FIXED_WIDTHS 1
#include "tsgu_template_types.h"
#undef TSGU_ISA_ATTR
#undef TSGU_ISA
#undef TSGU_FIXED_WIDTHS
#endif

#undef TSGU_IN_TEMPLATE

/* the variant of fn for a (tsgu_real, tsgu_index) pair on this processor; a
 * TSGU_INDEX_ONLY kernel's for a tsgu_index; a TSGU_HALF_TOO kernel's with
 * TSGU_PICK_HALF */
#define TSGU_PICK_IDX(fn, real, sfx, itype) ((itype) == TSGU_I32 ? fn##_##real##_i32##sfx : fn##_##real##_i64##sfx)
#define TSGU_PICK_TYPES(fn, sfx, rtype, itype) \
    ((rtype) == TSGU_F32 ? TSGU_PICK_IDX(fn, f32, sfx, itype) : TSGU_PICK_IDX(fn, f64, sfx, itype))
#define TSGU_PICK_HALF_TYPES(fn, sfx, rtype, itype)                                   \
    ((rtype) == TSGU_F16 ? TSGU_PICK_IDX(fn, f16, sfx, itype)                         \
     : (rtype) == TSGU_BF16 ? TSGU_PICK_IDX(fn, bf16, sfx, itype) : TSGU_PICK_TYPES(fn, sfx, rtype, itype))
#if TSGU_X86_CLONES
#define TSGU_PICK(fn, rtype, itype) \
    (tsgu_use_avx2() ? TSGU_PICK_TYPES(fn, _avx2, rtype, itype) : TSGU_PICK_TYPES(fn, , rtype, itype))
#define TSGU_PICK_HALF(fn, rtype, itype) \
    (tsgu_use_avx2() ? TSGU_PICK_HALF_TYPES(fn, _avx2, rtype, itype) : TSGU_PICK_HALF_TYPES(fn, , rtype, itype))
#define TSGU_PICK_INDEX(fn, itype) \
    (tsgu_use_avx2() ? TSGU_PICK_IDX(fn, f32, _avx2, itype) : TSGU_PICK_IDX(fn, f32, , itype))
#else
#define TSGU_PICK(fn, rtype, itype) TSGU_PICK_TYPES(fn, , rtype, itype)
#define TSGU_PICK_HALF(fn, rtype, itype) TSGU_PICK_HALF_TYPES(fn, , rtype, itype)
#define TSGU_PICK_INDEX(fn, itype) TSGU_PICK_IDX(fn, f32, , itype)
#endif
