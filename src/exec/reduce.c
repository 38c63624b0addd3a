/*
 * reduce.c — element-wise copy and reduction for every datatype x operation.
 *
 * The executor spends most of its CPU time here, combining a received chunk
 * with a local one, so every kernel is written with GCC's vector extension
 * (which clang also reads) rather than left to the auto-vectoriser: the build
 * uses plain -O2, where GCC 12 and older do not vectorise loops of unknown
 * trip count, and explicit vectors give SIMD code at any optimisation level
 * from -O1 up. A vector is one register: 16 bytes on baseline x86-64, 32 when
 * built for AVX.
 *
 * Buffers carry no alignment guarantee (a chunk may start at any byte of a
 * user buffer), so every load and store goes through memcpy, which the
 * compiler turns into one unaligned vector move and which sidesteps strict
 * aliasing too. dst may be a or b exactly: each vector is loaded from both
 * inputs before its slot of dst is written, so in-place calls need no special
 * path.
 *
 *   int / float / double:  [ whole vectors ............ ][ scalar tail ]
 *   fp16 / bf16:           [ widen to float, op, round back ][ tail, zero-padded
 *                                                              to one vector ]
 *
 * Integer sum and product wrap modulo 2^bits; they are computed on unsigned
 * lanes because signed overflow is undefined in C. Max and min use the C
 * comparison (a > b ? a : b), so a NaN wins or loses as the comparison says,
 * exactly as in a scalar loop. fp16 and bf16 are widened to float, combined
 * in float and rounded back to nearest even; float carries more than twice
 * their precision plus two bits, so this double rounding is harmless and the
 * result is the correctly rounded one. The conversions are integer arithmetic
 * on the bit patterns, vectorised like the rest; on x86 CPUs with AVX2 and
 * F16C, chosen at run time, single instructions do the same work. Every path
 * gives the same bits.
 *
 * loomAvg reduces as a sum; reducePostOp divides the finished sum by nranks
 * (C integer division for integer types, float division for float types,
 * fp16/bf16 divided in float). reduceApplyFinal fuses the last sum and the
 * division in one pass; it still rounds the sum to the element type before
 * dividing, so that fused and unfused schedules give the same bits.
 */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "port.h"
#include "reduce.h"

/*
 * One vector is one register of the target: 32 bytes where the compiler may
 * use AVX, else 16 (SSE2 is baseline x86-64; other targets lower generic
 * vectors themselves). Wider generic vectors than the target's registers
 * would change how they are passed between functions (GCC's -Wpsabi).
 */
#if defined(__AVX__)
#define VEC_BYTES 32
#else
#define VEC_BYTES 16
#endif

typedef int8_t vs8 __attribute__((vector_size(VEC_BYTES)));
typedef uint8_t vu8 __attribute__((vector_size(VEC_BYTES)));
typedef int32_t vs32 __attribute__((vector_size(VEC_BYTES)));
typedef uint32_t vu32 __attribute__((vector_size(VEC_BYTES)));
typedef int64_t vs64 __attribute__((vector_size(VEC_BYTES)));
typedef uint64_t vu64 __attribute__((vector_size(VEC_BYTES)));
typedef float vf32 __attribute__((vector_size(VEC_BYTES)));
typedef double vf64 __attribute__((vector_size(VEC_BYTES)));
typedef uint16_t vh16 __attribute__((vector_size(VEC_BYTES)));

/* Inlined whatever the optimisation level, so that constant arguments specialise the code. */
#define FORCE_INLINE static inline __attribute__((always_inline))

/* Every kernel has this shape; nranks is read only by the dividing ones. */
typedef void (*reduceKernel_t)(void *dst, const void *a, const void *b, size_t count, int nranks);

/*
 * One kernel: dst = expression of x (from a) and y (from b), on whole vectors
 * of type VT first, then element by element as T. VEXPR and SEXPR may use
 * x, y and nranks.
 */
#define REDUCE_KERNEL(fn, T, VT, VEXPR, SEXPR)                                                     \
    static void fn(void *dst, const void *a, const void *b, size_t count, int nranks)              \
    {                                                                                              \
        unsigned char *pd = dst;                                                                   \
        const unsigned char *pa = a, *pb = b;                                                      \
        const size_t lanes = sizeof(VT) / sizeof(T);                                               \
        size_t i = 0;                                                                              \
        (void)nranks;                                                                              \
        for (; i + lanes <= count; i += lanes) {                                                   \
            VT x, y;                                                                               \
            memcpy(&x, pa + i * sizeof(T), sizeof(x));                                             \
            memcpy(&y, pb + i * sizeof(T), sizeof(y));                                             \
            x = (VEXPR);                                                                           \
            memcpy(pd + i * sizeof(T), &x, sizeof(x));                                             \
        }                                                                                          \
        for (; i < count; i++) {                                                                   \
            T x, y;                                                                                \
            memcpy(&x, pa + i * sizeof(T), sizeof(x));                                             \
            memcpy(&y, pb + i * sizeof(T), sizeof(y));                                             \
            x = (T)(SEXPR);                                                                        \
            memcpy(pd + i * sizeof(T), &x, sizeof(x));                                             \
        }                                                                                          \
    }

/* Lane-wise a > b ? a : b for vectors of type VT whose comparison mask is VM. */
#define VSELECT(VT, VM, m, p, q) ((VT)(((VM)(p) & (m)) | ((VM)(q) & ~(m))))
#define VMAX(VT, VM) VSELECT(VT, VM, (VM)(x > y), x, y)
#define VMIN(VT, VM) VSELECT(VT, VM, (VM)(x < y), x, y)

/*
 * Sum, product, max and min of one type. Sum and product run on the unsigned
 * view (U, VU) so that integer overflow wraps; max and min on the signed or
 * float view (T, VT) whose comparison is the type's own.
 */
#define ARITH_KERNELS(name, T, VT, U, VU, VM)                                                      \
    REDUCE_KERNEL(name##Sum, U, VU, x + y, x + y)                                                  \
    REDUCE_KERNEL(name##Prod, U, VU, (x * y), (x * y))                                             \
    REDUCE_KERNEL(name##Max, T, VT, VMAX(VT, VM), x > y ? x : y)                                   \
    REDUCE_KERNEL(name##Min, T, VT, VMIN(VT, VM), x < y ? x : y)

/*
 * Average for integers: x86 has no vector integer division, so these stay
 * scalar. The wrapped sum is taken back to T before the C division (which
 * truncates toward zero); nranks is positive, so the usual conversions give
 * the type's own division for every T.
 */
#define INT_AVG_KERNELS(name, T, U)                                                                \
    REDUCE_KERNEL(name##SumDiv, T, T, (T)((T)((U)x + (U)y) / nranks), (T)((U)x + (U)y) / nranks)   \
    REDUCE_KERNEL(name##Div, T, T, (T)(x / nranks), x / nranks)

/* Average for float and double: vector division by the rank count in T. */
#define FLOAT_AVG_KERNELS(name, T, VT)                                                             \
    REDUCE_KERNEL(name##SumDiv, T, VT, (x + y) / (T)nranks, (x + y) / (T)nranks)                   \
    REDUCE_KERNEL(name##Div, T, VT, x / (T)nranks, x / (T)nranks)

ARITH_KERNELS(int8, int8_t, vs8, uint8_t, vu8, vs8)
ARITH_KERNELS(uint8, uint8_t, vu8, uint8_t, vu8, vs8)
ARITH_KERNELS(int32, int32_t, vs32, uint32_t, vu32, vs32)
ARITH_KERNELS(uint32, uint32_t, vu32, uint32_t, vu32, vs32)
ARITH_KERNELS(int64, int64_t, vs64, uint64_t, vu64, vs64)
ARITH_KERNELS(uint64, uint64_t, vu64, uint64_t, vu64, vs64)
ARITH_KERNELS(float32, float, vf32, float, vf32, vs32)
ARITH_KERNELS(float64, double, vf64, double, vf64, vs64)

INT_AVG_KERNELS(int8, int8_t, uint8_t)
INT_AVG_KERNELS(uint8, uint8_t, uint8_t)
INT_AVG_KERNELS(int32, int32_t, uint32_t)
INT_AVG_KERNELS(uint32, uint32_t, uint32_t)
INT_AVG_KERNELS(int64, int64_t, uint64_t)
INT_AVG_KERNELS(uint64, uint64_t, uint64_t)
FLOAT_AVG_KERNELS(float32, float, vf32)
FLOAT_AVG_KERNELS(float64, double, vf64)

/* ---- fp16 and bf16 ------------------------------------------------------------------------ */

/*
 * A step takes one register of 16-bit elements (vh16), widens it into two
 * float registers (lo, hi), combines, and narrows back into one register.
 * Widening interleaves the elements with zeros (shuffles that compile to
 * unpack instructions), placing each element in the low half of a 32-bit lane
 * for fp16 (to be decoded) or the high half for bf16 (which then already is
 * the float); narrowing gathers those halves back. Which 16-bit position is
 * the low half of a 32-bit lane depends on the byte order.
 */
#define HALF_LANES (VEC_BYTES / 2)
typedef int16_t vmask16 __attribute__((vector_size(VEC_BYTES))); /* GCC's shuffle indices */

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LOW_HALF 1
#else
#define LOW_HALF 0
#endif
/* Output position p of a widening shuffle of (x, y): even/odd positions alternate x and y. */
#define WIDEN_INDEX(p, first)                                                                      \
    (((p)&1) == LOW_HALF ? (first) + (p) / 2 : HALF_LANES + (first) + (p) / 2)
/* Output position p of a narrowing shuffle: 16-bit half `half` (0 low, 1 high) of lane p. */
#define NARROW_INDEX(p, half) (2 * (p) + ((half) ^ LOW_HALF))
#if HALF_LANES == 8
#define LANE_ARGS(index, arg)                                                                      \
    index(0, arg), index(1, arg), index(2, arg), index(3, arg), index(4, arg), index(5, arg),      \
        index(6, arg), index(7, arg)
#else
#define LANE_ARGS(index, arg)                                                                      \
    index(0, arg), index(1, arg), index(2, arg), index(3, arg), index(4, arg), index(5, arg),      \
        index(6, arg), index(7, arg), index(8, arg), index(9, arg), index(10, arg),                \
        index(11, arg), index(12, arg), index(13, arg), index(14, arg), index(15, arg)
#endif
/* GCC and clang spell a two-register shuffle with constant indices differently. */
#if defined(__clang__)
#define SHUFFLE16(x, y, index, arg) __builtin_shufflevector(x, y, LANE_ARGS(index, arg))
#else
#define SHUFFLE16(x, y, index, arg) __builtin_shuffle(x, y, (vmask16){LANE_ARGS(index, arg)})
#endif

enum halfFormat { formatFp16, formatBf16 };
/* What a half kernel does with its two widened inputs; combineNone passes x through. */
enum halfCombine { combineSum, combineProd, combineMax, combineMin, combineNone };

struct halfPair {
    vf32 lo, hi;
};

/* Lane-wise mask ? p : q, on the bit patterns. */
static inline vu32 selectU32(vs32 mask, vu32 p, vu32 q)
{
    return (p & (vu32)mask) | (q & ~(vu32)mask);
}

/* Spreads h into two registers of 32-bit lanes, each element in the 16-bit half `half`. */
static inline struct halfPair halfSpread(vh16 h, int half)
{
    const vh16 zero = {0};
    struct halfPair r;
    if (half == 0) {
        r.lo = (vf32)SHUFFLE16(h, zero, WIDEN_INDEX, 0);
        r.hi = (vf32)SHUFFLE16(h, zero, WIDEN_INDEX, HALF_LANES / 2);
    } else {
        r.lo = (vf32)SHUFFLE16(zero, h, WIDEN_INDEX, 0);
        r.hi = (vf32)SHUFFLE16(zero, h, WIDEN_INDEX, HALF_LANES / 2);
    }
    return r;
}

/* The inverse: the 16-bit half `half` of every 32-bit lane of lo, then of hi. */
static inline vh16 halfGather(vu32 lo, vu32 hi, int half)
{
    if (half == 0)
        return SHUFFLE16((vh16)lo, (vh16)hi, NARROW_INDEX, 0);
    return SHUFFLE16((vh16)lo, (vh16)hi, NARROW_INDEX, 1);
}

/*
 * binary16 (zero-extended in a 32-bit lane) -> float, exact. Shifting the
 * exponent and mantissa into float position and adding 112 to the exponent
 * (127 - 15) decodes normal numbers. Infinity and NaN get 112 more, which
 * lands their exponent on all ones with the payload kept. A subnormal m x
 * 2^-24 gets exponent 2^-14 instead, making 2^-14 + m x 2^-24, and 2^-14 is
 * subtracted again, exactly; the constant subtracted from the other lanes is
 * 0, which changes nothing (it quiets a signalling NaN, as any arithmetic
 * would). No float subnormal is ever read, so DAZ mode cannot break it.
 */
static inline vf32 fp16Decode(vu32 h)
{
    vu32 magnitude = h & 0x7fff;
    vu32 sign = (h ^ magnitude) << 16;
    vu32 bits = (magnitude << 13) + (112u << 23);
    vu32 special = (vu32)((vs32)magnitude > 0x7bff);
    vu32 subnormal = (vu32)((vs32)magnitude < 0x0400);
    bits += (special & (112u << 23)) + (subnormal & (1u << 23));
    vf32 value = (vf32)bits - (vf32)(subnormal & (113u << 23));
    return (vf32)((vu32)value | sign);
}

/*
 * float -> binary16, round to nearest even; the result is in the low 16 bits
 * of each lane.
 *   normal result: rebias, then add just under half an ulp (0xfff) plus the
 *     lowest kept bit, so exact halves round to even; a carry out of the
 *     mantissa bumps the exponent as it should. Everything below 65536 lands
 *     at or below 0x7c00 (65520 and up rounding to infinity); larger values,
 *     infinity and NaN are handled apart.
 *   subnormal result (|f| < 2^-14): adding 0.5f places 2^-24, the fp16
 *     subnormal step, at the last bit of the float mantissa, so the FPU does
 *     the rounding; the low mantissa bits are then the answer (1024 means the
 *     smallest normal, whose encoding is also 1024).
 *   NaN: stays NaN with its top payload bits and the quiet bit set.
 */
static inline vu32 fp16Encode(vf32 f)
{
    vu32 bits = (vu32)f;
    vu32 x = bits & 0x7fffffff;
    vu32 sign = (bits ^ x) >> 16;
    vu32 top = x >> 13;
    vu32 normal = (x - (112u << 23) + 0xfff + (top & 1)) >> 13;
    vu32 tiny = (vu32)((vf32)x + 0.5f) - 0x3f000000u;
    vu32 nan = (vu32)((vs32)x > 0x7f800000) & ((top & 0x3ff) | 0x200);
    vu32 r = selectU32((vs32)x < 0x38800000, tiny, normal);
    r = selectU32((vs32)x > 0x477fffff, 0x7c00 | nan, r);
    return r | sign;
}

/*
 * float -> bfloat16, round to nearest even, the result in the high 16 bits:
 * add just under half of the dropped 16 bits plus the lowest kept bit.
 * Overflow carries into an all-ones exponent, which is infinity. A NaN gets
 * its quiet bit set instead, since rounding could carry its payload into inf.
 */
static inline vu32 bf16Encode(vf32 f)
{
    vu32 bits = (vu32)f;
    vu32 rounded = bits + 0x7fff + ((bits >> 16) & 1);
    return selectU32((vs32)(bits & 0x7fffffff) > 0x7f800000, bits | 0x400000, rounded);
}

static inline struct halfPair fp16Widen(vh16 h)
{
    struct halfPair r = halfSpread(h, 0);
    r.lo = fp16Decode((vu32)r.lo);
    r.hi = fp16Decode((vu32)r.hi);
    return r;
}

static inline vh16 fp16Narrow(struct halfPair p)
{
    return halfGather(fp16Encode(p.lo), fp16Encode(p.hi), 0);
}

FORCE_INLINE struct halfPair halfWiden(vh16 h, enum halfFormat format)
{
    return format == formatFp16 ? fp16Widen(h) : halfSpread(h, 1);
}

FORCE_INLINE vh16 halfNarrow(struct halfPair p, enum halfFormat format)
{
    if (format == formatFp16)
        return fp16Narrow(p);
    return halfGather(bf16Encode(p.lo), bf16Encode(p.hi), 1);
}

FORCE_INLINE vf32 halfCombine(vf32 x, vf32 y, enum halfCombine combine)
{
    switch (combine) {
    case combineSum:
        return x + y;
    case combineProd:
        return x * y;
    case combineMax:
        return VMAX(vf32, vs32);
    case combineMin:
        return VMIN(vf32, vs32);
    default:
        return x;
    }
}

/* One register of elements: widen, combine, optionally divide, round back. */
FORCE_INLINE vh16 halfStep(vh16 ha, vh16 hb, enum halfFormat format, enum halfCombine combine,
                           int divide, float divisor)
{
    struct halfPair x = halfWiden(ha, format);
    if (combine != combineNone) {
        struct halfPair y = halfWiden(hb, format);
        x.lo = halfCombine(x.lo, y.lo, combine);
        x.hi = halfCombine(x.hi, y.hi, combine);
    }
    if (divide) {
        /* Round the combined value to the storage type first, as reduceApply would. */
        if (combine != combineNone)
            x = halfWiden(halfNarrow(x, format), format);
        x.lo = x.lo / divisor;
        x.hi = x.hi / divisor;
    }
    return halfNarrow(x, format);
}

/*
 * The whole-buffer loop, inlined into one kernel per (format, combine,
 * divide) so that every switch above is resolved at compile time. The tail
 * goes through zero-padded staging registers so it shares the vector
 * arithmetic and cannot round differently from the body.
 */
FORCE_INLINE void halfLoop(void *dst, const void *a, const void *b, size_t count, int nranks,
                           enum halfFormat format, enum halfCombine combine, int divide)
{
    unsigned char *pd = dst;
    const unsigned char *pa = a, *pb = b;
    const float divisor = (float)nranks;
    size_t i = 0;
    for (; i + HALF_LANES <= count; i += HALF_LANES) {
        vh16 ha, hb;
        memcpy(&ha, pa + 2 * i, sizeof(ha));
        memcpy(&hb, pb + 2 * i, sizeof(hb));
        ha = halfStep(ha, hb, format, combine, divide, divisor);
        memcpy(pd + 2 * i, &ha, sizeof(ha));
    }
    if (i < count) {
        size_t rest = 2 * (count - i);
        vh16 ha = {0}, hb = {0};
        memcpy(&ha, pa + 2 * i, rest);
        memcpy(&hb, pb + 2 * i, rest);
        ha = halfStep(ha, hb, format, combine, divide, divisor);
        memcpy(pd + 2 * i, &ha, rest);
    }
}

/*
 * fp16 and bf16 on x86 with AVX2 and F16C (every x86 CPU since about 2013):
 * the library is built for baseline x86-64, so these kernels carry their own
 * target attribute and are chosen at run time. They give the same bits as
 * the portable path: F16C widening is exact; its narrowing takes the rounding
 * mode, nearest even, from the immediate, overflows to infinity, keeps
 * subnormals, and truncates a NaN's payload with the quiet bit set; bf16 is
 * the same integer arithmetic as bf16Encode; MAXPS / MINPS return the first
 * operand exactly when x > y / x < y, as C does. (fp16 data never makes
 * float subnormals, so DAZ and FTZ cannot tell the paths apart either.)
 * Define LOOM_REDUCE_PORTABLE to build (and so test) the portable path only.
 */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(LOOM_REDUCE_PORTABLE)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>

#define HALF_HW __attribute__((target("avx2,f16c")))
#define HALF_HW_INLINE HALF_HW FORCE_INLINE
#define HALF_HW_LANES 8

HALF_HW_INLINE __m256 halfHwWiden(__m128i h, enum halfFormat format)
{
    if (format == formatFp16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

HALF_HW_INLINE __m128i halfHwNarrow(__m256 x, enum halfFormat format)
{
    if (format == formatFp16)
        return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    __m256i bits = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

HALF_HW_INLINE __m128i halfHwStep(__m128i ha, __m128i hb, enum halfFormat format,
                                  enum halfCombine combine, int divide, __m256 divisor)
{
    __m256 x = halfHwWiden(ha, format);
    __m256 y = halfHwWiden(hb, format);
    switch (combine) {
    case combineSum:
        x = _mm256_add_ps(x, y);
        break;
    case combineProd:
        x = _mm256_mul_ps(x, y);
        break;
    case combineMax:
        x = _mm256_max_ps(x, y);
        break;
    case combineMin:
        x = _mm256_min_ps(x, y);
        break;
    case combineNone:
        break;
    }
    if (divide) {
        if (combine != combineNone)
            x = halfHwWiden(halfHwNarrow(x, format), format);
        x = _mm256_div_ps(x, divisor);
    }
    return halfHwNarrow(x, format);
}

HALF_HW_INLINE void halfHwBody(void *dst, const void *a, const void *b, size_t count, int nranks,
                               enum halfFormat format, enum halfCombine combine, int divide)
{
    unsigned char *pd = dst;
    const unsigned char *pa = a, *pb = b;
    const __m256 divisor = _mm256_set1_ps((float)nranks);
    size_t i = 0;
    for (; i + HALF_HW_LANES <= count; i += HALF_HW_LANES) {
        __m128i ha = _mm_loadu_si128((const __m128i *)(const void *)(pa + 2 * i));
        __m128i hb = _mm_loadu_si128((const __m128i *)(const void *)(pb + 2 * i));
        ha = halfHwStep(ha, hb, format, combine, divide, divisor);
        _mm_storeu_si128((__m128i *)(void *)(pd + 2 * i), ha);
    }
    if (i < count) {
        size_t rest = 2 * (count - i);
        __m128i ha = _mm_setzero_si128(), hb = _mm_setzero_si128();
        memcpy(&ha, pa + 2 * i, rest);
        memcpy(&hb, pb + 2 * i, rest);
        ha = halfHwStep(ha, hb, format, combine, divide, divisor);
        memcpy(pd + 2 * i, &ha, rest);
    }
}

/* One body per (combine, divide) the kernels use, so that nothing is decided per element. */
HALF_HW_INLINE void halfHwFormat(void *dst, const void *a, const void *b, size_t count, int nranks,
                                 enum halfFormat format, enum halfCombine combine, int divide)
{
    if (divide && combine == combineSum)
        halfHwBody(dst, a, b, count, nranks, format, combineSum, 1);
    else if (divide)
        halfHwBody(dst, a, b, count, nranks, format, combineNone, 1);
    else if (combine == combineSum)
        halfHwBody(dst, a, b, count, nranks, format, combineSum, 0);
    else if (combine == combineProd)
        halfHwBody(dst, a, b, count, nranks, format, combineProd, 0);
    else if (combine == combineMax)
        halfHwBody(dst, a, b, count, nranks, format, combineMax, 0);
    else
        halfHwBody(dst, a, b, count, nranks, format, combineMin, 0);
}

static HALF_HW void halfHwRun(void *dst, const void *a, const void *b, size_t count, int nranks,
                              enum halfFormat format, enum halfCombine combine, int divide)
{
    if (format == formatFp16)
        halfHwFormat(dst, a, b, count, nranks, formatFp16, combine, divide);
    else
        halfHwFormat(dst, a, b, count, nranks, formatBf16, combine, divide);
}

/*
 * CPUID: F16C, AVX and OSXSAVE (leaf 1), AVX2 (leaf 7), and XCR0 saying the
 * kernel saves the 256-bit registers. Written out rather than asked of
 * __builtin_cpu_supports, which older clang cannot ask about F16C.
 */
static int halfHwDetect(void)
{
    unsigned int eax, ebx, ecx, edx, xcr0, xcr0High;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return 0;
    const unsigned int osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((ecx & (osxsave | avx | f16c)) != (osxsave | avx | f16c))
        return 0;
    __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0High) : "c"(0));
    (void)xcr0High;
    if ((xcr0 & 0x6) != 0x6)
        return 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx))
        return 0;
    return (ebx >> 5) & 1;
}

/* Runs the AVX2/F16C kernel and returns 1 if this CPU has both. */
static int halfHw(void *dst, const void *a, const void *b, size_t count, int nranks,
                  enum halfFormat format, enum halfCombine combine, int divide)
{
    /* 0: not asked yet, 1: absent, 2: present. Racing first callers store the same answer. */
    static atomic_int state;
    int known = atomic_load_explicit(&state, memory_order_relaxed);
    if (known == 0) {
        known = halfHwDetect() ? 2 : 1;
        atomic_store_explicit(&state, known, memory_order_relaxed);
    }
    if (known != 2)
        return 0;
    halfHwRun(dst, a, b, count, nranks, format, combine, divide);
    return 1;
}
#else
static int halfHw(void *dst, const void *a, const void *b, size_t count, int nranks,
                  enum halfFormat format, enum halfCombine combine, int divide)
{
    (void)dst, (void)a, (void)b, (void)count, (void)nranks, (void)format, (void)combine;
    (void)divide;
    return 0;
}
#endif

#define HALF_KERNEL(fn, format, combine, divide)                                                   \
    static void fn(void *dst, const void *a, const void *b, size_t count, int nranks)              \
    {                                                                                              \
        if (halfHw(dst, a, b, count, nranks, format, combine, divide))                             \
            return;                                                                                \
        halfLoop(dst, a, b, count, nranks, format, combine, divide);                               \
    }

#define HALF_KERNELS(name, format)                                                                 \
    HALF_KERNEL(name##Sum, format, combineSum, 0)                                                  \
    HALF_KERNEL(name##Prod, format, combineProd, 0)                                                \
    HALF_KERNEL(name##Max, format, combineMax, 0)                                                  \
    HALF_KERNEL(name##Min, format, combineMin, 0)                                                  \
    HALF_KERNEL(name##SumDiv, format, combineSum, 1)                                               \
    HALF_KERNEL(name##Div, format, combineNone, 1)

HALF_KERNELS(float16, formatFp16)
HALF_KERNELS(bfloat16, formatBf16)

/* ---- dispatch ----------------------------------------------------------------------------- */

struct reduceKernels {
    reduceKernel_t op[loomNumOps]; /* loomAvg reduces as loomSum */
    reduceKernel_t sumDiv;         /* fused last sum and division, for loomAvg */
    reduceKernel_t div;            /* the division alone, called with a == b == dst */
};

#define KERNEL_ROW(name)                                                                           \
    {                                                                                              \
        .op = {[loomSum] = name##Sum,                                                              \
               [loomProd] = name##Prod,                                                            \
               [loomMax] = name##Max,                                                              \
               [loomMin] = name##Min,                                                              \
               [loomAvg] = name##Sum},                                                             \
        .sumDiv = name##SumDiv, .div = name##Div                                                   \
    }

static const struct reduceKernels kernelTable[loomNumTypes] = {
    [loomInt8] = KERNEL_ROW(int8),       [loomUint8] = KERNEL_ROW(uint8),
    [loomInt32] = KERNEL_ROW(int32),     [loomUint32] = KERNEL_ROW(uint32),
    [loomInt64] = KERNEL_ROW(int64),     [loomUint64] = KERNEL_ROW(uint64),
    [loomFloat16] = KERNEL_ROW(float16), [loomFloat32] = KERNEL_ROW(float32),
    [loomFloat64] = KERNEL_ROW(float64), [loomBfloat16] = KERNEL_ROW(bfloat16),
};

static const struct {
    const char *name;
    size_t size;
} typeInfo[loomNumTypes] = {
    [loomInt8] = {"int8", 1},       [loomUint8] = {"uint8", 1},
    [loomInt32] = {"int32", 4},     [loomUint32] = {"uint32", 4},
    [loomInt64] = {"int64", 8},     [loomUint64] = {"uint64", 8},
    [loomFloat16] = {"float16", 2}, [loomFloat32] = {"float32", 4},
    [loomFloat64] = {"float64", 8}, [loomBfloat16] = {"bfloat16", 2},
};

static const char *const opNames[loomNumOps] = {
    [loomSum] = "sum", [loomProd] = "prod", [loomMax] = "max", [loomMin] = "min", [loomAvg] = "avg",
};

/* Enum values arrive from users through the public API; compare as unsigned to reject negatives. */
static int typeValid(loomDataType_t dt)
{
    return (unsigned)dt < (unsigned)loomNumTypes;
}

static int opValid(loomRedOp_t op)
{
    return (unsigned)op < (unsigned)loomNumOps;
}

size_t reduceTypeSize(loomDataType_t dt)
{
    return typeValid(dt) ? typeInfo[dt].size : 0;
}

const char *reduceTypeName(loomDataType_t dt)
{
    return typeValid(dt) ? typeInfo[dt].name : NULL;
}

const char *reduceOpName(loomRedOp_t op)
{
    return opValid(op) ? opNames[op] : NULL;
}

/* Invalid datatypes and operations are rejected by the API layer; here they do nothing. */
void reduceApply(void *dst, const void *a, const void *b, size_t count, loomDataType_t dt,
                 loomRedOp_t op)
{
    if (count == 0 || !typeValid(dt) || !opValid(op))
        return;
    kernelTable[dt].op[op](dst, a, b, count, 1);
}

/* Dividing by one changes no value of any type, so nranks <= 1 is a no-op (and never divides by 0).
 */
void reducePostOp(void *buf, size_t count, loomDataType_t dt, loomRedOp_t op, int nranks)
{
    if (count == 0 || op != loomAvg || nranks <= 1 || !typeValid(dt))
        return;
    kernelTable[dt].div(buf, buf, buf, count, nranks);
}

void reduceApplyFinal(void *dst, const void *a, const void *b, size_t count, loomDataType_t dt,
                      loomRedOp_t op, int nranks)
{
    if (op != loomAvg || nranks <= 1) {
        reduceApply(dst, a, b, count, dt, op);
        return;
    }
    if (count == 0 || !typeValid(dt))
        return;
    kernelTable[dt].sumDiv(dst, a, b, count, nranks);
}

/*
 * Tiles of a fan-in: small enough that the partial result stays in the
 * first-level cache between one input and the next (4 inputs and the
 * result of one tile fit in 32 KiB).
 */
#define REDUCE_TILE_BYTES 4096

void reduceApplyMany(void *dst, const void *b, const void *const *in, int nin, size_t count,
                     loomDataType_t dt, loomRedOp_t op, int nranks, int final)
{
    if (count == 0 || nin < 1 || !typeValid(dt) || !opValid(op))
        return;
    int divide = final && op == loomAvg && nranks > 1;
    size_t es = typeInfo[dt].size, tile = REDUCE_TILE_BYTES / es;
    for (size_t at = 0; at < count; at += tile) {
        size_t n = count - at < tile ? count - at : tile, off = at * es;
        char *d = (char *)dst + off;
        const char *acc = (const char *)b + off;
        for (int k = 0; k < nin; k++) {
            const char *x = (const char *)in[k] + off;
            if (k == nin - 1 && divide)
                kernelTable[dt].sumDiv(d, x, acc, n, nranks);
            else
                kernelTable[dt].op[op](d, x, acc, n, 1);
            acc = d;
        }
    }
}

/*
 * glibc's memcpy already switches to non-temporal stores past a fraction of
 * the last-level cache, and executor chunks (one FIFO slot) are far below
 * that, so a hand-written streaming copy would gain nothing.
 */
void reduceCopy(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0)
        memcpy(dst, src, bytes);
}

/*
 * A single copy reads a peer's whole block into the user's buffer in one
 * go, far past the cache, and glibc keeps ordinary stores up to three
 * quarters of the last-level cache, so each destination line is first read
 * for ownership. Streaming stores skip that read; they lose while the
 * source still sits in the cache (2 MiB), and win from a few MiB, hence the
 * threshold (docs/performance.md, "Figures from the code's comments").
 */
#ifndef REDUCE_STREAM_BYTES
#define REDUCE_STREAM_BYTES (4u << 20)
#endif

void reduceCopyStream(void *dst, const void *src, size_t bytes)
{
#if defined(__SSE2__)
    if (bytes >= REDUCE_STREAM_BYTES) {
        char *d = dst;
        const char *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        memcpy(d, s, head);
        d += head, s += head, bytes -= head;
        size_t body = bytes & ~(size_t)63;
        for (size_t i = 0; i < body; i += 64) {
            __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
            __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
            __m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
            __m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
            _mm_stream_si128((__m128i *)(void *)(d + i), x0);
            _mm_stream_si128((__m128i *)(void *)(d + i + 16), x1);
            _mm_stream_si128((__m128i *)(void *)(d + i + 32), x2);
            _mm_stream_si128((__m128i *)(void *)(d + i + 48), x3);
        }
        _mm_sfence();
        memcpy(d + body, s + body, bytes - body);
        return;
    }
#endif
    reduceCopy(dst, src, bytes);
}

/* ---- scalar conversions, one value at a time (same results as the vector code) ----------- */

/* The scalar conversions are the port layer's (src/device/port.h), shared with the device code. */
float reduceHalfToFloat(uint16_t h)
{
    return portHalfToFloat(h);
}

uint16_t reduceFloatToHalf(float f)
{
    return portFloatToHalf(f);
}

float reduceBf16ToFloat(uint16_t b)
{
    return portBf16ToFloat(b);
}

uint16_t reduceFloatToBf16(float f)
{
    return portFloatToBf16(f);
}
