/*
 * check_reduce.c — unit tests of reduce.c: every datatype x operation.
 *
 * Results are checked against a reference written separately here, with no
 * code shared with reduce.c: integers are computed in 64 bits and truncated
 * to the type's width; floating types are computed in double and rounded to
 * the element type by a generic round-to-nearest-even built on frexp, ldexp
 * and nearbyint. (Rounding an fp16/bf16 or float result from double gives the
 * same bits as reduce.c's float arithmetic, since double holds more than
 * twice their precision plus two bits.) Inputs are random, of odd lengths, at
 * odd byte addresses, in place and out of place; bytes around the output
 * are watched for stray writes. Edge cases of fp16/bf16 rounding are spelled
 * out with their expected bit patterns.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "rng.h"

static const size_t lengths[] = {0, 1, 7, 1000, 4099};
static const size_t offsets[] = {0, 1, 3};
static const int rankCounts[] = {1, 3, 8};
enum placement { outOfPlace, dstIsA, dstIsB };
#define GUARD 16
#define GUARD_BYTE 0xa5

/* ---- reference arithmetic ---------------------------------------------------------------------
 */

/* A binary floating format of 1 + expBits + mantBits bits (fp16: 5, 10; bf16: 8, 7). */
struct refFormat {
    int expBits;
    int mantBits;
};
static const struct refFormat refFp16 = {5, 10}, refBf16 = {8, 7};

static double refDecode(struct refFormat fmt, uint16_t h)
{
    int bias = (1 << (fmt.expBits - 1)) - 1;
    int expAll = (1 << fmt.expBits) - 1;
    int e = (h >> fmt.mantBits) & expAll;
    int m = h & ((1 << fmt.mantBits) - 1);
    double v;
    if (e == expAll)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, 1 - bias - fmt.mantBits);
    else
        v = ldexp(m + (1 << fmt.mantBits), e - bias - fmt.mantBits);
    return (h >> (fmt.expBits + fmt.mantBits)) ? -v : v;
}

/* Round v to the format, to nearest even (the default rounding mode of nearbyint). */
static uint16_t refEncode(struct refFormat fmt, double v)
{
    int bias = (1 << (fmt.expBits - 1)) - 1;
    int expAll = (1 << fmt.expBits) - 1;
    int one = 1 << fmt.mantBits;
    uint16_t sign = signbit(v) ? (uint16_t)(1u << (fmt.expBits + fmt.mantBits)) : 0;
    uint16_t inf = (uint16_t)(expAll << fmt.mantBits);
    double a = fabs(v);
    if (isnan(v))
        return (uint16_t)(inf | (one >> 1));
    if (isinf(a))
        return sign | inf;
    if (a < ldexp(1, 1 - bias)) {
        /* Subnormal step 2^(1-bias-mantBits); a result of `one` is the smallest normal. */
        return sign | (uint16_t)nearbyint(ldexp(a, bias - 1 + fmt.mantBits));
    }
    int e2;
    frexp(a, &e2);
    int e = e2 - 1;
    double q = nearbyint(ldexp(a, fmt.mantBits - e));
    if (q == 2 * one) {
        q = one;
        e++;
    }
    if (e + bias >= expAll)
        return sign | inf;
    return sign | (uint16_t)(((e + bias) << fmt.mantBits) | ((int)q - one));
}

static int isFloatType(loomDataType_t dt)
{
    return dt == loomFloat16 || dt == loomFloat32 || dt == loomFloat64 || dt == loomBfloat16;
}

static int isSignedType(loomDataType_t dt)
{
    return dt == loomInt8 || dt == loomInt32 || dt == loomInt64;
}

static size_t refSize(loomDataType_t dt)
{
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return sizes[dt];
}

static double refLoadFloat(loomDataType_t dt, const unsigned char *p)
{
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case loomFloat16:
        memcpy(&h, p, 2);
        return refDecode(refFp16, h);
    case loomBfloat16:
        memcpy(&h, p, 2);
        return refDecode(refBf16, h);
    case loomFloat32:
        memcpy(&f, p, 4);
        return f;
    default:
        memcpy(&d, p, 8);
        return d;
    }
}

static void refStoreFloat(loomDataType_t dt, double v, unsigned char *p)
{
    uint16_t h;
    float f;
    switch (dt) {
    case loomFloat16:
        h = refEncode(refFp16, v);
        memcpy(p, &h, 2);
        break;
    case loomBfloat16:
        h = refEncode(refBf16, v);
        memcpy(p, &h, 2);
        break;
    case loomFloat32:
        f = (float)v;
        memcpy(p, &f, 4);
        break;
    default:
        memcpy(p, &v, 8);
        break;
    }
}

/* Integers travel as 64-bit patterns, sign-extended for signed types. */
static uint64_t refLoadInt(loomDataType_t dt, const unsigned char *p)
{
    uint8_t u8;
    uint32_t u32;
    uint64_t u64;
    switch (refSize(dt)) {
    case 1:
        memcpy(&u8, p, 1);
        return isSignedType(dt) && u8 >= 0x80 ? u8 - 0x100ull : u8;
    case 4:
        memcpy(&u32, p, 4);
        return isSignedType(dt) && u32 >= 0x80000000u ? u32 - 0x100000000ull : u32;
    default:
        memcpy(&u64, p, 8);
        return u64;
    }
}

/* Keeps the low bits: the value modulo 2^bits. */
static void refStoreInt(loomDataType_t dt, uint64_t v, unsigned char *p)
{
    uint8_t u8 = (uint8_t)(v & 0xff);
    uint32_t u32 = (uint32_t)(v & 0xffffffffu);
    switch (refSize(dt)) {
    case 1:
        memcpy(p, &u8, 1);
        break;
    case 4:
        memcpy(p, &u32, 4);
        break;
    default:
        memcpy(p, &v, 8);
        break;
    }
}

/* The average's last step on one element of the type, in place. */
static void refDivide(loomDataType_t dt, int nranks, unsigned char *p)
{
    if (isFloatType(dt)) {
        refStoreFloat(dt, refLoadFloat(dt, p) / nranks, p);
        return;
    }
    uint64_t v = refLoadInt(dt, p);
    v = isSignedType(dt) ? (uint64_t)((int64_t)v / nranks) : v / (uint64_t)nranks;
    refStoreInt(dt, v, p);
}

/* out = post(a op b) for one element; nranks 0 means no division. */
static void refElement(loomDataType_t dt, loomRedOp_t op, int nranks, const unsigned char *pa,
                       const unsigned char *pb, unsigned char *out)
{
    if (isFloatType(dt)) {
        double a = refLoadFloat(dt, pa), b = refLoadFloat(dt, pb), r;
        switch (op) {
        case loomProd:
            r = a * b;
            break;
        case loomMax:
            r = a > b ? a : b;
            break;
        case loomMin:
            r = a < b ? a : b;
            break;
        default:
            r = a + b;
            break;
        }
        refStoreFloat(dt, r, out);
        if (op == loomAvg && nranks > 0)
            refDivide(dt, nranks, out);
        return;
    }
    uint64_t a = refLoadInt(dt, pa), b = refLoadInt(dt, pb), r;
    int sgn = isSignedType(dt);
    switch (op) {
    case loomProd:
        r = a * b;
        break;
    case loomMax:
        r = (sgn ? (int64_t)a > (int64_t)b : a > b) ? a : b;
        break;
    case loomMin:
        r = (sgn ? (int64_t)a < (int64_t)b : a < b) ? a : b;
        break;
    default:
        r = a + b;
        break;
    }
    refStoreInt(dt, r, out);
    if (op == loomAvg && nranks > 0)
        refDivide(dt, nranks, out);
}

/* Equal bytes, or both NaN for floating types (a NaN's payload is not specified). */
static int refSame(loomDataType_t dt, const unsigned char *expect, const unsigned char *got)
{
    if (memcmp(expect, got, refSize(dt)) == 0)
        return 1;
    return isFloatType(dt) && isnan(refLoadFloat(dt, expect)) && isnan(refLoadFloat(dt, got));
}

/* Random elements; for floats half of them small multiples of 1/8 so sums cancel and tie. */
static void fillRandom(loomDataType_t dt, unsigned char *p, size_t count)
{
    size_t size = refSize(dt);
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rngNext();
        if (isFloatType(dt) && (r & 1))
            refStoreFloat(dt, (double)((int64_t)(r >> 40) % 2001 - 1000) / 8, p + i * size);
        else
            memcpy(p + i * size, &r, size);
    }
}

/* ---- one checked call -------------------------------------------------------------------------
 */

enum call { callApply, callFinal, callPostOp };

struct buffers {
    unsigned char *a, *b, *dst, *expect;
    unsigned char *dstBase;
    size_t bytes;
};

/*
 * Runs one call with a, b and dst at the given byte offsets (dst taking a's
 * or b's storage in place) and checks every element and the guard bytes.
 */
static void checkCall(enum call call, loomDataType_t dt, loomRedOp_t op, int nranks, size_t count,
                      size_t offset, enum placement where)
{
    size_t size = refSize(dt), bytes = count * size;
    unsigned char *baseA = malloc(bytes + 2 * GUARD), *baseB = malloc(bytes + 2 * GUARD);
    unsigned char *baseD = malloc(bytes + 2 * GUARD), *expect = malloc(bytes + 1);
    ck_assert(baseA && baseB && baseD && expect);
    memset(baseA, GUARD_BYTE, bytes + 2 * GUARD);
    memset(baseB, GUARD_BYTE, bytes + 2 * GUARD);
    memset(baseD, GUARD_BYTE, bytes + 2 * GUARD);
    /* Three different misalignments so no two pointers share one. */
    unsigned char *a = baseA + GUARD + offset;
    unsigned char *b = baseB + GUARD - 1 - offset;
    unsigned char *dst = baseD + GUARD - offset;
    unsigned char *guardBase = baseD;
    fillRandom(dt, a, count);
    fillRandom(dt, b, count);
    if (where == dstIsA) {
        dst = a;
        guardBase = baseA;
    } else if (where == dstIsB) {
        dst = b;
        guardBase = baseB;
    }
    for (size_t i = 0; i < count; i++) {
        if (call == callPostOp)
            memcpy(expect + i * size, a + i * size, size);
        else
            refElement(dt, op, call == callFinal ? nranks : 0, a + i * size, b + i * size,
                       expect + i * size);
    }
    if (call == callPostOp) {
        for (size_t i = 0; i < count; i++)
            if (op == loomAvg && nranks > 1)
                refDivide(dt, nranks, expect + i * size);
        dst = a;
        guardBase = baseA;
        reducePostOp(dst, count, dt, op, nranks);
    } else if (call == callFinal) {
        reduceApplyFinal(dst, a, b, count, dt, op, nranks);
    } else {
        reduceApply(dst, a, b, count, dt, op);
    }
    for (size_t i = 0; i < count; i++)
        if (!refSame(dt, expect + i * size, dst + i * size))
            ck_abort_msg("%s %s nranks %d count %zu offset %zu placement %d: element %zu differs",
                         reduceTypeName(dt), reduceOpName(op), nranks, count, offset, (int)where,
                         i);
    size_t start = (size_t)(dst - guardBase);
    for (size_t i = 0; i < start; i++)
        if (guardBase[i] != GUARD_BYTE)
            ck_abort_msg("%s %s: wrote before dst", reduceTypeName(dt), reduceOpName(op));
    for (size_t i = start + bytes; i < bytes + 2 * GUARD; i++)
        if (guardBase[i] != GUARD_BYTE)
            ck_abort_msg("%s %s count %zu: wrote past dst", reduceTypeName(dt), reduceOpName(op),
                         count);
    free(baseA);
    free(baseB);
    free(baseD);
    free(expect);
}

/* ---- the datatype x operation matrix (loop tests: _i is the datatype) -------------------------
 */

START_TEST(test_apply_matrix)
{
    loomDataType_t dt = (loomDataType_t)_i;
    for (int op = 0; op < loomNumOps; op++)
        for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
            for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++)
                for (int where = outOfPlace; where <= dstIsB; where++)
                    checkCall(callApply, dt, (loomRedOp_t)op, 0, lengths[l], offsets[o],
                              (enum placement)where);
}
END_TEST

START_TEST(test_postop_avg)
{
    loomDataType_t dt = (loomDataType_t)_i;
    for (size_t r = 0; r < sizeof(rankCounts) / sizeof(rankCounts[0]); r++)
        for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
            for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++)
                checkCall(callPostOp, dt, loomAvg, rankCounts[r], lengths[l], offsets[o],
                          outOfPlace);
}
END_TEST

START_TEST(test_postop_other_ops_untouched)
{
    loomDataType_t dt = (loomDataType_t)_i;
    for (int op = 0; op < loomNumOps; op++)
        if (op != loomAvg)
            checkCall(callPostOp, dt, (loomRedOp_t)op, 8, 1000, 1, outOfPlace);
}
END_TEST

START_TEST(test_final_matrix)
{
    loomDataType_t dt = (loomDataType_t)_i;
    for (int op = 0; op < loomNumOps; op++)
        for (size_t r = 0; r < sizeof(rankCounts) / sizeof(rankCounts[0]); r++)
            for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++)
                for (int where = outOfPlace; where <= dstIsB; where++)
                    checkCall(callFinal, dt, (loomRedOp_t)op, rankCounts[r], lengths[l],
                              offsets[(l + (size_t)where) % 3], (enum placement)where);
}
END_TEST

/* The fused pass must give the values of reduceApply followed by reducePostOp (NaN payloads aside).
 */
START_TEST(test_final_equals_unfused)
{
    loomDataType_t dt = (loomDataType_t)_i;
    size_t count = 4099, bytes = count * refSize(dt);
    unsigned char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
    unsigned char *fused = malloc(bytes + 1), *unfused = malloc(bytes + 1);
    ck_assert(a && b && fused && unfused);
    for (size_t r = 0; r < sizeof(rankCounts) / sizeof(rankCounts[0]); r++) {
        fillRandom(dt, a + 1, count);
        fillRandom(dt, b, count);
        reduceApplyFinal(fused + 1, a + 1, b, count, dt, loomAvg, rankCounts[r]);
        reduceApply(unfused, a + 1, b, count, dt, loomAvg);
        reducePostOp(unfused, count, dt, loomAvg, rankCounts[r]);
        for (size_t i = 0; i < count; i++)
            if (!refSame(dt, unfused + i * refSize(dt), fused + 1 + i * refSize(dt)))
                ck_abort_msg("%s nranks %d: element %zu differs", reduceTypeName(dt), rankCounts[r],
                             i);
    }
    free(a);
    free(b);
    free(fused);
    free(unfused);
}
END_TEST

/*
 * A fan-in (reduceApplyMany) gives the bits of the chain of reduceApply
 * calls it stands for, b first, then each input, the last one fused with
 * the post-processing when final: for every operation, 1 to 3 inputs,
 * lengths across tile boundaries, misaligned pointers, dst apart from b or
 * equal to it (in place).
 */
START_TEST(test_many_equals_chain)
{
    loomDataType_t dt = (loomDataType_t)_i;
    size_t es = refSize(dt), most = 4099;
    unsigned char *in[3], *b = malloc(most * es + 1), *chain = malloc(most * es);
    unsigned char *many = malloc(most * es + 1);
    ck_assert(b && chain && many);
    for (int k = 0; k < 3; k++)
        ck_assert((in[k] = malloc(most * es + 1)) != NULL);
    static const size_t counts[] = {1, 7, 1000, 2048, 4099};
    for (int op = 0; op < loomNumOps; op++) {
        for (int nin = 1; nin <= 3; nin++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                size_t count = counts[c];
                int final = (int)((c + (size_t)nin) % 2), inPlace = (int)(c % 2);
                const void *ins[3] = {in[0] + 1, in[1], in[2] + 1};
                for (int k = 0; k < nin; k++)
                    fillRandom(dt, (unsigned char *)ins[k], count);
                fillRandom(dt, b + 1, count);
                reduceApply(chain, ins[0], b + 1, count, dt, (loomRedOp_t)op);
                for (int k = 1; k < nin; k++)
                    reduceApply(chain, ins[k], chain, count, dt, (loomRedOp_t)op);
                if (final)
                    reducePostOp(chain, count, dt, (loomRedOp_t)op, 3);
                unsigned char *dst = inPlace ? b + 1 : many + 1;
                reduceApplyMany(dst, b + 1, ins, nin, count, dt, (loomRedOp_t)op, 3, final);
                for (size_t i = 0; i < count; i++)
                    if (!refSame(dt, chain + i * es, dst + i * es))
                        ck_abort_msg("%s %s, %d inputs, %zu elements%s%s: element %zu differs",
                                     reduceTypeName(dt), reduceOpName((loomRedOp_t)op), nin, count,
                                     final ? ", final" : "", inPlace ? ", in place" : "", i);
            }
        }
    }
    for (int k = 0; k < 3; k++)
        free(in[k]);
    free(b);
    free(chain);
    free(many);
}
END_TEST

/* ---- integers ---------------------------------------------------------------------------------
 */

START_TEST(test_integer_wraparound)
{
    int8_t i8a[] = {127, -128, 16, -128}, i8b[] = {1, -1, 16, -1}, i8[4];
    reduceApply(i8, i8a, i8b, 3, loomInt8, loomSum);
    ck_assert_int_eq(i8[0], -128);
    ck_assert_int_eq(i8[1], 127);
    ck_assert_int_eq(i8[2], 32);
    reduceApply(i8, i8a, i8b, 4, loomInt8, loomProd);
    ck_assert_int_eq(i8[0], 127);
    ck_assert_int_eq(i8[2], 0);    /* 256 wraps to 0 */
    ck_assert_int_eq(i8[3], -128); /* -128 * -1 = 128 wraps to -128 */

    uint8_t u8a[] = {200, 255}, u8b[] = {100, 255}, u8[2];
    reduceApply(u8, u8a, u8b, 2, loomUint8, loomSum);
    ck_assert_uint_eq(u8[0], 44);
    ck_assert_uint_eq(u8[1], 254);
    reduceApply(u8, u8a, u8b, 2, loomUint8, loomProd);
    ck_assert_uint_eq(u8[1], 1); /* 65025 mod 256 */

    int32_t i32a[] = {INT32_MAX, 65536, INT32_MIN}, i32b[] = {1, 65536, -1}, i32[3];
    reduceApply(i32, i32a, i32b, 3, loomInt32, loomSum);
    ck_assert_int_eq(i32[0], INT32_MIN);
    ck_assert_int_eq(i32[2], INT32_MAX);
    reduceApply(i32, i32a, i32b, 3, loomInt32, loomProd);
    ck_assert_int_eq(i32[1], 0);
    ck_assert_int_eq(i32[2], INT32_MIN);

    uint32_t u32a[] = {UINT32_MAX}, u32b[] = {2}, u32[1];
    reduceApply(u32, u32a, u32b, 1, loomUint32, loomSum);
    ck_assert_uint_eq(u32[0], 1);

    int64_t i64a[] = {INT64_MAX, INT64_MIN}, i64b[] = {1, -1}, i64[2];
    reduceApply(i64, i64a, i64b, 2, loomInt64, loomSum);
    ck_assert(i64[0] == INT64_MIN && i64[1] == INT64_MAX);

    uint64_t u64a[] = {UINT64_MAX, 1ull << 32}, u64b[] = {2, 1ull << 32}, u64[2];
    reduceApply(u64, u64a, u64b, 2, loomUint64, loomSum);
    ck_assert(u64[0] == 1);
    reduceApply(u64, u64a, u64b, 2, loomUint64, loomProd);
    ck_assert(u64[1] == 0);
}
END_TEST

START_TEST(test_integer_max_min_signedness)
{
    int8_t i8a[] = {-1, 5}, i8b[] = {1, -5}, i8[2];
    reduceApply(i8, i8a, i8b, 2, loomInt8, loomMax);
    ck_assert(i8[0] == 1 && i8[1] == 5);
    uint8_t u8a[] = {0xff, 5}, u8b[] = {1, 0x80}, u8[2];
    reduceApply(u8, u8a, u8b, 2, loomUint8, loomMax);
    ck_assert(u8[0] == 0xff && u8[1] == 0x80);
    uint32_t u32a[] = {0x80000000u}, u32b[] = {1}, u32[1];
    reduceApply(u32, u32a, u32b, 1, loomUint32, loomMin);
    ck_assert_uint_eq(u32[0], 1);
    int64_t i64a[] = {INT64_MIN}, i64b[] = {0}, i64[1];
    reduceApply(i64, i64a, i64b, 1, loomInt64, loomMin);
    ck_assert(i64[0] == INT64_MIN);
    uint64_t u64a[] = {1ull << 63}, u64b[] = {7}, u64[1];
    reduceApply(u64, u64a, u64b, 1, loomUint64, loomMax);
    ck_assert(u64[0] == 1ull << 63);
}
END_TEST

START_TEST(test_integer_avg)
{
    int8_t i8[] = {-7, 7, -128, 127};
    reducePostOp(i8, 4, loomInt8, loomAvg, 3);
    ck_assert(i8[0] == -2 && i8[1] == 2 && i8[2] == -42 && i8[3] == 42); /* truncation to 0 */
    uint8_t u8[] = {255};
    reducePostOp(u8, 1, loomUint8, loomAvg, 8);
    ck_assert_uint_eq(u8[0], 31);
    int32_t i32[] = {-9, 9};
    reducePostOp(i32, 2, loomInt32, loomAvg, 1);
    ck_assert(i32[0] == -9 && i32[1] == 9);
    reducePostOp(i32, 2, loomInt32, loomAvg, 8);
    ck_assert(i32[0] == -1 && i32[1] == 1);
    uint64_t u64[] = {UINT64_MAX};
    reducePostOp(u64, 1, loomUint64, loomAvg, 3);
    ck_assert(u64[0] == UINT64_MAX / 3);
    /* Fused: the sum wraps in the type first (100 + 100 = -56), then divides. */
    int8_t a[] = {100}, b[] = {100}, r[1];
    reduceApplyFinal(r, a, b, 1, loomInt8, loomAvg, 3);
    ck_assert_int_eq(r[0], -18);
    int8_t wide[] = {50};
    reducePostOp(wide, 1, loomInt8, loomAvg, 200); /* nranks wider than the type */
    ck_assert_int_eq(wide[0], 0);
}
END_TEST

/* ---- floats ------------------------------------------------------------------------------------
 */

START_TEST(test_float_avg)
{
    float f[] = {1.0f, -2.0f};
    reducePostOp(f, 2, loomFloat32, loomAvg, 3);
    ck_assert(f[0] == 1.0f / 3.0f && f[1] == -2.0f / 3.0f);
    double d[] = {1.0};
    reducePostOp(d, 1, loomFloat64, loomAvg, 3);
    ck_assert(d[0] == 1.0 / 3.0);
    float fa[] = {1.5f}, fb[] = {1.5f}, fr[1];
    reduceApplyFinal(fr, fa, fb, 1, loomFloat32, loomAvg, 8);
    ck_assert(fr[0] == 0.375f);
    uint16_t h[] = {0x3c00, 0x3c00}, hr[2];
    reducePostOp(h, 1, loomFloat16, loomAvg, 3);
    ck_assert_uint_eq(h[0], 0x3555); /* 1/3 rounds down in fp16 */
    uint16_t bf[] = {0x3f80};
    reducePostOp(bf, 1, loomBfloat16, loomAvg, 3);
    ck_assert_uint_eq(bf[0], 0x3eab); /* 1/3 rounds up in bf16 */
    /* The sum rounds to fp16 (overflowing to inf) before the division, fused or not. */
    uint16_t big[] = {0x7bff, 0x7bff};
    reduceApplyFinal(hr, big, big, 2, loomFloat16, loomAvg, 8);
    ck_assert_uint_eq(hr[0], 0x7c00);
}
END_TEST

START_TEST(test_float_max_min_signed_zero_and_inf)
{
    float a[] = {-0.0f, 1.0f, -INFINITY}, b[] = {0.0f, INFINITY, -3.0f}, r[3];
    reduceApply(r, a, b, 3, loomFloat32, loomMax);
    /* -0 > +0 is false, so the C comparison picks b. */
    ck_assert(r[0] == 0.0f && !signbit(r[0]) && isinf(r[1]) && r[2] == -3.0f);
    reduceApply(r, a, b, 3, loomFloat32, loomMin);
    ck_assert(r[0] == 0.0f && !signbit(r[0]) && r[1] == 1.0f && isinf(r[2]) && r[2] < 0);
    double da[] = {2.0, -1.0}, db[] = {3.0, -4.0}, dr[2];
    reduceApply(dr, da, db, 2, loomFloat64, loomMin);
    ck_assert(dr[0] == 2.0 && dr[1] == -4.0);
}
END_TEST

/* ---- fp16 / bf16 -------------------------------------------------------------------------------
 */

/* Runs reduceApply on one fp16/bf16 pair, 9 times over: whole vectors and a staged tail. */
static uint16_t halfOp(loomDataType_t dt, loomRedOp_t op, uint16_t x, uint16_t y)
{
    uint16_t a[9], b[9], r[9];
    for (int i = 0; i < 9; i++) {
        a[i] = x;
        b[i] = y;
    }
    reduceApply(r, a, b, 9, dt, op);
    for (int i = 1; i < 9; i++)
        ck_assert_uint_eq(r[i], r[0]);
    return r[0];
}

static uint16_t halfAvg(loomDataType_t dt, uint16_t x, int nranks)
{
    uint16_t v[9];
    for (int i = 0; i < 9; i++)
        v[i] = x;
    reducePostOp(v, 9, dt, loomAvg, nranks);
    for (int i = 1; i < 9; i++)
        ck_assert_uint_eq(v[i], v[0]);
    return v[0];
}

static int fp16IsNan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

static int bf16IsNan(uint16_t h)
{
    return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
}

START_TEST(test_fp16_scalar_edges)
{
    ck_assert_uint_eq(reduceFloatToHalf(1.0f), 0x3c00);
    ck_assert_uint_eq(reduceFloatToHalf(1.0f + 0x1p-11f), 0x3c00);            /* tie, to even */
    ck_assert_uint_eq(reduceFloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);        /* tie, to even */
    ck_assert_uint_eq(reduceFloatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* past the tie */
    ck_assert_uint_eq(reduceFloatToHalf(65504.0f), 0x7bff);
    ck_assert_uint_eq(reduceFloatToHalf(65519.0f), 0x7bff);
    ck_assert_uint_eq(reduceFloatToHalf(65520.0f), 0x7c00); /* tie between max and 2^16 */
    ck_assert_uint_eq(reduceFloatToHalf(1e30f), 0x7c00);
    ck_assert_uint_eq(reduceFloatToHalf(-INFINITY), 0xfc00);
    ck_assert_uint_eq(reduceFloatToHalf(0x1p-24f), 0x0001);
    ck_assert_uint_eq(reduceFloatToHalf(0x1p-25f), 0x0000);            /* tie, to even (0) */
    ck_assert_uint_eq(reduceFloatToHalf(3 * 0x1p-25f), 0x0002);        /* tie, to even (2) */
    ck_assert_uint_eq(reduceFloatToHalf(0x1p-25f + 0x1p-40f), 0x0001); /* past the tie */
    ck_assert_uint_eq(reduceFloatToHalf(0x1p-14f - 0x1p-25f), 0x0400); /* to the smallest normal */
    ck_assert_uint_eq(reduceFloatToHalf(-0x1p-26f), 0x8000);
    ck_assert_uint_eq(reduceFloatToHalf(-0.0f), 0x8000);
    ck_assert_uint_eq(reduceFloatToHalf(0x1p-149f), 0x0000);
    ck_assert(fp16IsNan(reduceFloatToHalf(NAN)));
    ck_assert(fp16IsNan(reduceFloatToHalf(-NAN)));
    uint32_t lowPayload = 0x7f800001u; /* NaN whose payload is all in bits fp16 drops */
    float f;
    memcpy(&f, &lowPayload, sizeof(f));
    ck_assert(fp16IsNan(reduceFloatToHalf(f)));
    ck_assert(reduceHalfToFloat(0x0001) == 0x1p-24f);
    ck_assert(reduceHalfToFloat(0x03ff) == 1023 * 0x1p-24f);
    ck_assert(reduceHalfToFloat(0x7bff) == 65504.0f);
    ck_assert(signbit(reduceHalfToFloat(0x8000)) && reduceHalfToFloat(0x8000) == 0.0f);
    ck_assert(isnan(reduceHalfToFloat(0x7c01)) && isnan(reduceHalfToFloat(0xfe00)));
}
END_TEST

START_TEST(test_fp16_vector_edges)
{
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x3c00, 0x1000), 0x3c00); /* 1 + 2^-11 */
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x3c01, 0x1000), 0x3c02);
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x7bff, 0x4800), 0x7bff); /* 65504 + 8 */
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x7bff, 0x4c00), 0x7c00); /* 65504 + 16 */
    ck_assert_uint_eq(halfOp(loomFloat16, loomProd, 0x7bff, 0x4000), 0x7c00);
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x0001, 0x0001), 0x0002);
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x03ff, 0x0001), 0x0400);
    ck_assert_uint_eq(halfOp(loomFloat16, loomProd, 0x0c00, 0x0800), 0x0000); /* 2^-25: tie */
    ck_assert_uint_eq(halfOp(loomFloat16, loomProd, 0x0c00, 0x0a00), 0x0001); /* 0.75 * 2^-24 */
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x8000, 0x8000), 0x8000);
    ck_assert_uint_eq(halfOp(loomFloat16, loomSum, 0x0000, 0x8000), 0x0000);
    ck_assert_uint_eq(halfOp(loomFloat16, loomProd, 0x8001, 0x0001), 0x8000); /* -2^-48 */
    ck_assert(fp16IsNan(halfOp(loomFloat16, loomSum, 0x7e00, 0x3c00)));
    ck_assert(fp16IsNan(halfOp(loomFloat16, loomSum, 0x7c01, 0x0000))); /* signalling */
    ck_assert(fp16IsNan(halfOp(loomFloat16, loomSum, 0x7c00, 0xfc00)));
    ck_assert(fp16IsNan(halfOp(loomFloat16, loomProd, 0x7c00, 0x0000)));
    ck_assert_uint_eq(halfAvg(loomFloat16, 0x0001, 2), 0x0000); /* 2^-25: tie, to even */
    ck_assert_uint_eq(halfAvg(loomFloat16, 0x0003, 2), 0x0002); /* 1.5 step: tie, to even */
    ck_assert_uint_eq(halfAvg(loomFloat16, 0x8001, 2), 0x8000);
    ck_assert_uint_eq(halfAvg(loomFloat16, 0x0001, 8), 0x0000);
    ck_assert(fp16IsNan(halfAvg(loomFloat16, 0x7e00, 3)));
}
END_TEST

START_TEST(test_bf16_edges)
{
    ck_assert_uint_eq(reduceFloatToBf16(1.0f + 0x1p-8f), 0x3f80);
    ck_assert_uint_eq(reduceFloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    ck_assert_uint_eq(reduceFloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    ck_assert_uint_eq(reduceFloatToBf16(3.4028235e38f), 0x7f80); /* FLT_MAX rounds to inf */
    ck_assert_uint_eq(reduceFloatToBf16(-0.0f), 0x8000);
    ck_assert_uint_eq(reduceFloatToBf16(0x1p-133f), 0x0001);
    ck_assert_uint_eq(reduceFloatToBf16(0x1p-134f), 0x0000);
    ck_assert_uint_eq(reduceFloatToBf16(3 * 0x1p-134f), 0x0002);
    uint32_t lowPayload = 0x7f800001u; /* truncation alone would make this inf */
    float f;
    memcpy(&f, &lowPayload, sizeof(f));
    ck_assert(bf16IsNan(reduceFloatToBf16(f)));
    ck_assert(bf16IsNan(reduceFloatToBf16(-NAN)));
    ck_assert(reduceBf16ToFloat(0x7f7f) == 0x1.fep127f);

    ck_assert_uint_eq(halfOp(loomBfloat16, loomSum, 0x3f80, 0x3b80), 0x3f80); /* 1 + 2^-8 */
    ck_assert_uint_eq(halfOp(loomBfloat16, loomSum, 0x3f81, 0x3b80), 0x3f82);
    ck_assert_uint_eq(halfOp(loomBfloat16, loomSum, 0x7f7f, 0x7a80), 0x7f7f); /* max + 2^118 */
    ck_assert_uint_eq(halfOp(loomBfloat16, loomSum, 0x7f7f, 0x7b00), 0x7f80); /* max + 2^119 */
    ck_assert_uint_eq(halfOp(loomBfloat16, loomSum, 0x007f, 0x0001), 0x0080);
    ck_assert_uint_eq(halfOp(loomBfloat16, loomSum, 0x8000, 0x8000), 0x8000);
    ck_assert(bf16IsNan(halfOp(loomBfloat16, loomSum, 0x7fc0, 0x3f80)));
    ck_assert(bf16IsNan(halfOp(loomBfloat16, loomSum, 0x7f81, 0x0000)));
    ck_assert(bf16IsNan(halfOp(loomBfloat16, loomProd, 0xff80, 0x0000)));
    ck_assert_uint_eq(halfAvg(loomBfloat16, 0x0001, 2), 0x0000);
    ck_assert_uint_eq(halfAvg(loomBfloat16, 0x0003, 2), 0x0002);
    ck_assert(bf16IsNan(halfAvg(loomBfloat16, 0xffc1, 8)));
}
END_TEST

/*
 * Every 16-bit pattern: the scalar widening equals the reference value, the
 * scalar narrowing gives the pattern back, and so does the vector path
 * (x + -0 is x for every x, +0 included; x * 1 too), NaN staying NaN.
 */
static void checkAllPatterns(loomDataType_t dt, struct refFormat fmt, float (*widen)(uint16_t),
                             uint16_t (*narrow)(float), uint16_t one)
{
    enum { n = 65536 };
    static uint16_t pattern[n], negZero[n], ones[n], sum[n], prod[n];
    for (int i = 0; i < n; i++) {
        pattern[i] = (uint16_t)i;
        negZero[i] = 0x8000;
        ones[i] = one;
    }
    reduceApply(sum, pattern, negZero, n, dt, loomSum);
    reduceApply(prod, pattern, ones, n, dt, loomProd);
    for (int i = 0; i < n; i++) {
        uint16_t h = (uint16_t)i;
        double expect = refDecode(fmt, h);
        float f = widen(h);
        int nan = isnan(expect);
        /* Plain ifs: in fork mode every passing ck_assert costs a system call. */
        if (nan) {
            if (!isnan(f) || !isnan(refDecode(fmt, narrow(f))))
                ck_abort_msg("%s 0x%04x: NaN lost", reduceTypeName(dt), i);
            if (!isnan(refDecode(fmt, sum[i])) || !isnan(refDecode(fmt, prod[i])))
                ck_abort_msg("%s 0x%04x: NaN lost in the vector path", reduceTypeName(dt), i);
            continue;
        }
        if ((double)f != expect || !signbit(f) != !signbit(expect))
            ck_abort_msg("%s 0x%04x widens to %a, not %a", reduceTypeName(dt), i, (double)f,
                         expect);
        if (narrow(f) != h)
            ck_abort_msg("%s 0x%04x comes back as 0x%04x", reduceTypeName(dt), i, narrow(f));
        if (sum[i] != h)
            ck_abort_msg("%s 0x%04x + -0 = 0x%04x", reduceTypeName(dt), i, sum[i]);
        if (prod[i] != h)
            ck_abort_msg("%s 0x%04x * 1 = 0x%04x", reduceTypeName(dt), i, prod[i]);
    }
}

START_TEST(test_fp16_all_patterns)
{
    checkAllPatterns(loomFloat16, refFp16, reduceHalfToFloat, reduceFloatToHalf, 0x3c00);
}
END_TEST

START_TEST(test_bf16_all_patterns)
{
    checkAllPatterns(loomBfloat16, refBf16, reduceBf16ToFloat, reduceFloatToBf16, 0x3f80);
}
END_TEST

/* Narrowing random floats: every bit pattern class, and values crowded near the fp16 range. */
START_TEST(test_narrow_random_floats)
{
    for (int i = 0; i < 300000; i++) {
        uint64_t r = rngNext();
        uint32_t bits = (uint32_t)r;
        if (i & 1) /* exponents from 2^-30 to 2^17 */
            bits = (bits & 0x807fffffu) | ((uint32_t)(97 + (r >> 32) % 48) << 23);
        float f;
        memcpy(&f, &bits, sizeof(f));
        uint16_t h = reduceFloatToHalf(f), expectH = refEncode(refFp16, f);
        uint16_t b = reduceFloatToBf16(f), expectB = refEncode(refBf16, f);
        if (isnan(f)) {
            if (!fp16IsNan(h) || !bf16IsNan(b))
                ck_abort_msg("NaN 0x%08x lost", bits);
            continue;
        }
        if (h != expectH)
            ck_abort_msg("fp16(%a) = 0x%04x, want 0x%04x", (double)f, h, expectH);
        if (b != expectB)
            ck_abort_msg("bf16(%a) = 0x%04x, want 0x%04x", (double)f, b, expectB);
    }
}
END_TEST

/* The vector path rounds exactly as the scalar conversions do, for every op. */
START_TEST(test_vector_matches_scalar)
{
    enum { n = 1 << 14 };
    static uint16_t a[n], b[n], r[n];
    for (int fmt = 0; fmt < 2; fmt++) {
        loomDataType_t dt = fmt ? loomBfloat16 : loomFloat16;
        float (*widen)(uint16_t) = fmt ? reduceBf16ToFloat : reduceHalfToFloat;
        uint16_t (*narrow)(float) = fmt ? reduceFloatToBf16 : reduceFloatToHalf;
        for (int i = 0; i < n; i++) {
            uint64_t x = rngNext();
            a[i] = (uint16_t)x;
            b[i] = (uint16_t)(x >> 16);
        }
        for (int op = 0; op < loomNumOps; op++) {
            reduceApplyFinal(r, a, b, n, dt, (loomRedOp_t)op, 3);
            for (int i = 0; i < n; i++) {
                float x = widen(a[i]), y = widen(b[i]), z;
                switch (op) {
                case loomProd:
                    z = x * y;
                    break;
                case loomMax:
                    z = x > y ? x : y;
                    break;
                case loomMin:
                    z = x < y ? x : y;
                    break;
                default:
                    z = x + y;
                    break;
                }
                uint16_t expect = narrow(z);
                if (op == loomAvg)
                    expect = narrow(widen(expect) / 3.0f);
                /* Which NaN operand an add returns depends on the instruction's operand order. */
                int same = r[i] == expect || (isnan(widen(r[i])) && isnan(widen(expect)));
                if (!same)
                    ck_abort_msg("%s %s 0x%04x 0x%04x: 0x%04x, want 0x%04x", reduceTypeName(dt),
                                 reduceOpName((loomRedOp_t)op), a[i], b[i], r[i], expect);
            }
        }
    }
}
END_TEST

/* ---- names, sizes, copy, invalid values -------------------------------------------------------
 */

START_TEST(test_names_and_sizes)
{
    static const char *const types[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                        "uint64", "float16", "float32", "float64", "bfloat16"};
    static const char *const ops[] = {"sum", "prod", "max", "min", "avg"};
    for (int dt = 0; dt < loomNumTypes; dt++) {
        ck_assert_str_eq(reduceTypeName((loomDataType_t)dt), types[dt]);
        ck_assert_uint_eq(reduceTypeSize((loomDataType_t)dt), refSize((loomDataType_t)dt));
    }
    for (int op = 0; op < loomNumOps; op++)
        ck_assert_str_eq(reduceOpName((loomRedOp_t)op), ops[op]);
    ck_assert_ptr_null(reduceTypeName(loomNumTypes));
    ck_assert_ptr_null(reduceTypeName((loomDataType_t)-1));
    ck_assert_uint_eq(reduceTypeSize(loomNumTypes), 0);
    ck_assert_uint_eq(reduceTypeSize((loomDataType_t)-1), 0);
    ck_assert_ptr_null(reduceOpName(loomNumOps));
    ck_assert_ptr_null(reduceOpName((loomRedOp_t)-1));
}
END_TEST

START_TEST(test_invalid_values_do_nothing)
{
    int32_t a[] = {1}, b[] = {2}, r[] = {42};
    reduceApply(r, a, b, 1, loomNumTypes, loomSum);
    reduceApply(r, a, b, 1, loomInt32, loomNumOps);
    reduceApplyFinal(r, a, b, 1, loomInt32, loomNumOps, 4);
    reducePostOp(r, 1, loomNumTypes, loomAvg, 4);
    reducePostOp(r, 1, loomInt32, loomAvg, 0); /* no division by zero */
    reduceApply(NULL, NULL, NULL, 0, loomFloat32, loomSum);
    ck_assert_int_eq(r[0], 42);
}
END_TEST

START_TEST(test_copy)
{
    size_t sizes[] = {0, 1, 31, 4099, 1 << 20};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t bytes = sizes[s];
        unsigned char *src = malloc(bytes + 8), *dst = malloc(bytes + 8);
        ck_assert(src && dst);
        for (size_t i = 0; i < bytes + 8; i++)
            src[i] = (unsigned char)rngNext();
        memset(dst, GUARD_BYTE, bytes + 8);
        reduceCopy(dst + 3, src + 1, bytes);
        ck_assert(memcmp(dst + 3, src + 1, bytes) == 0);
        ck_assert(dst[2] == GUARD_BYTE && dst[3 + bytes] == GUARD_BYTE);
        free(src);
        free(dst);
    }
    reduceCopy(NULL, NULL, 0);
}
END_TEST

static Suite *reduceSuite(void)
{
    Suite *s = suite_create("reduce");
    struct {
        const char *name;
        const TTest *test;
        int loop; /* run once per datatype */
    } cases[] = {
        {"apply_matrix", test_apply_matrix, 1},
        {"postop_avg", test_postop_avg, 1},
        {"postop_other_ops_untouched", test_postop_other_ops_untouched, 1},
        {"final_matrix", test_final_matrix, 1},
        {"final_equals_unfused", test_final_equals_unfused, 1},
        {"many_equals_chain", test_many_equals_chain, 1},
        {"integer_wraparound", test_integer_wraparound, 0},
        {"integer_max_min_signedness", test_integer_max_min_signedness, 0},
        {"integer_avg", test_integer_avg, 0},
        {"float_avg", test_float_avg, 0},
        {"float_max_min", test_float_max_min_signed_zero_and_inf, 0},
        {"fp16_scalar_edges", test_fp16_scalar_edges, 0},
        {"fp16_vector_edges", test_fp16_vector_edges, 0},
        {"bf16_edges", test_bf16_edges, 0},
        {"fp16_all_patterns", test_fp16_all_patterns, 0},
        {"bf16_all_patterns", test_bf16_all_patterns, 0},
        {"narrow_random_floats", test_narrow_random_floats, 0},
        {"vector_matches_scalar", test_vector_matches_scalar, 0},
        {"names_and_sizes", test_names_and_sizes, 0},
        {"invalid_values_do_nothing", test_invalid_values_do_nothing, 0},
        {"copy", test_copy, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        if (cases[i].loop)
            tcase_add_loop_test(tc, cases[i].test, 0, loomNumTypes);
        else
            tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    SRunner *runner = srunner_create(reduceSuite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
