/*
 * check_arith.c — the one device arithmetic (src/device/interp.h, built for
 * the CPU) against reduce.c's SIMD kernels, which stay for the host's speed.
 *
 * The interpreter's reduction (loomDevReduce) runs in the launched device
 * executor and the kernel executor of host buffers; the host-driven CUDA
 * executor's kernels run the same functions, split over a grid
 * (loomDevReduceShare, kernels.cu). reduce.c computes the same values with
 * vectors (and AVX2/F16C for fp16 and bf16 where the CPU has them; see
 * check_reduce_portable for the portable path). For every datatype x
 * operation:
 *
 *   - a (op) b, the fused last step of an Avg (post), the division alone,
 *     and a fan-in of 1 to LOOM_STEP_MAXPEERS messages, for counts 0 to 100
 *     and a few large ones, with the buffers at every byte offset from a
 *     16-byte boundary (16-byte packs when all are aligned, else elements);
 *   - the kernels' split: every thread of a grid in turn, one or two
 *     outputs, in place or not, aligned or not;
 *
 * on random bit patterns, so that subnormals, infinities and NaNs of every
 * float type are among the inputs. The results must be the same bits, with
 * one bound: where reduce.c's result is a NaN, the interpreter's must be a
 * NaN, of any payload. C leaves a NaN's payload open (the compiler may
 * swap the operands of a sum; reduce.c's half kernels re-encode the value
 * they select for max and min, which quiets a signalling NaN, where the
 * interpreter returns the input's bits), and Loom promises none.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "reduce.h"
#include "rng.h"

#define MAXCOUNT 4099
#define BUFBYTES (MAXCOUNT * 8 + 64)
#define GRID 96 /* threads of an emulated launch: several packs per thread */

static const int rankCounts[] = {2, 3, 7};

/*
 * Values where the definitions could part: zeros of both signs (equal, so
 * max and min must pick the same one), infinities, a quiet and a signalling
 * NaN, one, the smallest subnormal; for integers 0, 1, -1, the extremes.
 */
static uint64_t special(loomDataType_t dt, unsigned k)
{
    static const uint64_t f16[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x3c00, 0x0001};
    static const uint64_t bf16[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3f80, 0x0001};
    static const uint64_t f32[] = {0,           0x80000000u, 0x7f800000u, 0xff800000u,
                                   0x7fc00000u, 0x7f800001u, 0x3f800000u, 1};
    static const uint64_t f64[] = {0,
                                   0x8000000000000000ull,
                                   0x7ff0000000000000ull,
                                   0xfff0000000000000ull,
                                   0x7ff8000000000000ull,
                                   0x7ff0000000000001ull,
                                   0x3ff0000000000000ull,
                                   1};
    unsigned bits = 8 * (unsigned)reduceTypeSize(dt);
    uint64_t sign = 1ull << (bits - 1);
    uint64_t ints[] = {0, 1, ~0ull, sign, sign - 1, 2, 3, sign + 1};
    k %= 8;
    switch (dt) {
    case loomFloat16:
        return f16[k];
    case loomBfloat16:
        return bf16[k];
    case loomFloat32:
        return f32[k];
    case loomFloat64:
        return f64[k];
    default:
        return ints[k];
    }
}

/* Random bits (every value of the type), and one element in four a special value. */
static void fill(char *p, size_t count, loomDataType_t dt)
{
    size_t es = reduceTypeSize(dt);
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rngNext(), v = (r & 3) == 0 ? special(dt, (unsigned)(r >> 8)) : r >> 8;
        uint8_t v8 = (uint8_t)v;
        uint16_t v16 = (uint16_t)v;
        uint32_t v32 = (uint32_t)v;
        memcpy(p + i * es,
               es == 1   ? (void *)&v8
               : es == 2 ? (void *)&v16
               : es == 4 ? (void *)&v32
                         : (void *)&v,
               es);
    }
}

/* 1 if the element at p is a NaN of dt (integers never are). */
static int isNan(loomDataType_t dt, const char *p)
{
    double v = 0;
    float f;
    uint16_t h;
    if (dt == loomFloat16 || dt == loomBfloat16) {
        memcpy(&h, p, sizeof(h));
        v = dt == loomFloat16 ? reduceHalfToFloat(h) : reduceBf16ToFloat(h);
    } else if (dt == loomFloat32) {
        memcpy(&f, p, sizeof(f));
        v = f;
    } else if (dt == loomFloat64) {
        memcpy(&v, p, sizeof(v));
    }
    return v != v;
}

/* -1 if got equals want (bits, or both NaN), else the first element that differs. */
static long differs(loomDataType_t dt, const char *got, const char *want, size_t count)
{
    size_t es = reduceTypeSize(dt);
    for (size_t i = 0; i < count; i++) {
        const char *g = got + i * es, *w = want + i * es;
        if (memcmp(g, w, es) != 0 && !(isNan(dt, w) && isNan(dt, g)))
            return (long)i;
    }
    return -1;
}

static void expectSame(loomDataType_t dt, loomRedOp_t op, const char *got, const char *want,
                       size_t count, const char *what, int offA, int offB, int offD)
{
    long at = differs(dt, got, want, count);
    ck_assert_msg(at < 0,
                  "%s %s %s: count %zu, offsets a %d b %d dst %d: element %ld differs from "
                  "reduce.c",
                  reduceTypeName(dt), reduceOpName(op), what, count, offA, offB, offD, at);
}

static char bufA[LOOM_STEP_MAXPEERS][BUFBYTES], bufB[BUFBYTES], bufWant[BUFBYTES], bufGot[BUFBYTES],
    bufGot2[BUFBYTES];

/* The buffer at `off` bytes past a 16-byte boundary. */
static char *at16(char *buf, int off)
{
    return buf + (16 - (uintptr_t)buf % 16) % 16 + off;
}

/* a (op) b, the fused last Avg step and the division alone, at offsets (oa, ob, od). */
static void checkPair(loomDataType_t dt, loomRedOp_t op, size_t count, int oa, int ob, int od)
{
    size_t es = reduceTypeSize(dt), bytes = count * es;
    char *a = at16(bufA[0], oa), *b = at16(bufB, ob), *got = at16(bufGot, od);
    char *got2 = at16(bufGot2, od);
    char *outs[2] = {got, got2};
    const char *ins[1] = {a};
    fill(a, count, dt);
    fill(b, count, dt);

    reduceApply(bufWant, a, b, count, dt, op);
    loomDevReduce(dt, op, outs, 2, ins, 1, b, count, 0, 1);
    expectSame(dt, op, got, bufWant, count, "a (op) b", oa, ob, od);
    expectSame(dt, op, got2, bufWant, count, "a (op) b, second output", oa, ob, od);
    if (op != loomAvg)
        return;
    for (size_t r = 0; r < sizeof(rankCounts) / sizeof(rankCounts[0]); r++) {
        int n = rankCounts[r];
        reduceApplyFinal(bufWant, a, b, count, dt, op, n);
        loomDevReduce(dt, op, outs, 1, ins, 1, b, count, 1, n);
        expectSame(dt, op, got, bufWant, count, "last step of an Avg", oa, ob, od);
        memcpy(bufWant, a, bytes);
        reducePostOp(bufWant, count, dt, op, n);
        loomDevReduce(dt, op, outs, 1, ins, 1, NULL, count, 1, n);
        expectSame(dt, op, got, bufWant, count, "division alone", oa, ob, od);
    }
}

/* A fan-in of k messages into b, as the executors' fan-in steps do it. */
static void checkFanIn(loomDataType_t dt, loomRedOp_t op, size_t count, int k, int off, int post)
{
    const char *ins[LOOM_STEP_MAXPEERS];
    char *b = at16(bufB, off), *got = at16(bufGot, off);
    for (int j = 0; j < k; j++) {
        char *in = at16(bufA[j], off);
        fill(in, count, dt);
        ins[j] = in;
    }
    fill(b, count, dt);
    reduceApplyMany(bufWant, b, (const void *const *)ins, k, count, dt, op, 3, post);
    loomDevReduce(dt, op, &got, 1, ins, k, b, count, post, 3);
    expectSame(dt, op, got, bufWant, count, post ? "fan-in, last step" : "fan-in", off, off, off);
}

/* Counts 0 to 100 and a few large ones (a remainder after the packs, whole packs, odd). */
static const size_t largeCounts[] = {1000, 1024, 4097, MAXCOUNT};

static void eachCount(void (*check)(loomDataType_t, loomRedOp_t, size_t, int), loomDataType_t dt,
                      loomRedOp_t op, int arg)
{
    for (size_t c = 0; c <= 100; c++)
        check(dt, op, c, arg);
    for (size_t c = 0; c < sizeof(largeCounts) / sizeof(largeCounts[0]); c++)
        check(dt, op, largeCounts[c], arg);
}

/* Offsets: all aligned; all at the same byte past it (1 to 15); each pointer on its own. */
static void pairAtOffsets(loomDataType_t dt, loomRedOp_t op, size_t count, int unused)
{
    (void)unused;
    for (int off = 0; off < 16; off++)
        checkPair(dt, op, count, off, off, off);
    checkPair(dt, op, count, 8, 0, 0);
    checkPair(dt, op, count, 0, 2, 0);
    checkPair(dt, op, count, 0, 0, 4);
}

static void fanInAtOffsets(loomDataType_t dt, loomRedOp_t op, size_t count, int unused)
{
    (void)unused;
    for (int k = 1; k <= LOOM_STEP_MAXPEERS; k++) {
        for (int off = 0; off < 16; off += 5) { /* 0 (packs), 5, 10, 15 */
            checkFanIn(dt, op, count, k, off, 0);
            if (op == loomAvg)
                checkFanIn(dt, op, count, k, off, 1);
        }
    }
}

START_TEST(pair_matches_reduce)
{
    for (int op = 0; op < loomNumOps; op++)
        eachCount(pairAtOffsets, (loomDataType_t)_i, (loomRedOp_t)op, 0);
}
END_TEST

START_TEST(fanin_matches_reduce)
{
    for (int op = 0; op < loomNumOps; op++)
        eachCount(fanInAtOffsets, (loomDataType_t)_i, (loomRedOp_t)op, 0);
}
END_TEST

/* ---- the kernels' split over a grid (kernels.cu, loomDevReduceShare) ---- */

struct variant {
    int withB, final, twoOutputs, inPlace, misalign;
};

/* What one launch of loomReduce_<dt>_<op> computes, its threads one after another. */
static void launch(loomDataType_t dt, loomRedOp_t op, char *out0, char *out1, const char *a,
                   const char *b, size_t count, int final, int nranks)
{
    char *o[2] = {out0, out1};
    loomDevKernel_t f = loomDevKernelOf(dt, op);
    for (uint64_t t = 0; t < GRID; t++)
        loomDevReduceShare(f, reduceTypeSize(dt), o, out1 ? 2 : 1, a, b, count,
                           final && op == loomAvg, nranks, t, GRID);
}

static void checkLaunch(loomDataType_t dt, loomRedOp_t op, size_t count, const struct variant *v)
{
    size_t es = reduceTypeSize(dt), bytes = count * es;
    int off = v->misalign ? (int)es : 0; /* elements stay aligned to their size, as on a GPU */
    char *a = at16(bufA[0], off), *b = at16(bufB, off);
    char *p0 = at16(bufGot, off), *p1 = at16(bufGot2, off);
    fill(a, count, dt);
    fill(b, count, dt);
    if (!v->withB) {
        memcpy(bufWant, a, bytes);
        if (v->final)
            reducePostOp(bufWant, count, dt, op, 3);
    } else if (v->final) {
        reduceApplyFinal(bufWant, a, b, count, dt, op, 3);
    } else {
        reduceApply(bufWant, a, b, count, dt, op);
    }
    if (v->inPlace)
        p0 = a; /* out0 == a, as a reduction into the receive buffer does */
    launch(dt, op, p0, v->twoOutputs ? p1 : NULL, a, v->withB ? b : NULL, count, v->final, 3);
    expectSame(dt, op, p0, bufWant, count, v->inPlace ? "launch, in place" : "launch", off, off,
               off);
    if (v->twoOutputs)
        expectSame(dt, op, p1, bufWant, count, "launch, second output", off, off, off);
}

START_TEST(launch_matches_reduce)
{
    static const size_t counts[] = {0, 1, 7, 33, 1000, MAXCOUNT};
    loomDataType_t dt = (loomDataType_t)_i;
    for (int op = 0; op < loomNumOps; op++) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            for (int bits = 0; bits < 32; bits++) {
                struct variant v = {bits & 1, (bits >> 1) & 1, (bits >> 2) & 1, (bits >> 3) & 1,
                                    (bits >> 4) & 1};
                if ((v.inPlace && !v.withB) || (!v.withB && !v.final))
                    continue; /* the executor copies those with cuMemcpyAsync */
                checkLaunch(dt, (loomRedOp_t)op, counts[c], &v);
            }
        }
    }
}
END_TEST

/* Halves at the edges: subnormals, the largest finite values, sums that overflow. */
START_TEST(half_edges)
{
    static const uint16_t fp16[] = {0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x8001, 0x3c00, 0x0000};
    static const uint16_t bf16[] = {0x0001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x8001, 0x3f80, 0x8000};
    const uint16_t *tables[2] = {fp16, bf16};
    loomDataType_t types[2] = {loomFloat16, loomBfloat16};
    for (int t = 0; t < 2; t++) {
        uint16_t a[64], b[64], out[64], want[64];
        for (int i = 0; i < 64; i++) {
            a[i] = tables[t][i % 8];
            b[i] = tables[t][(i / 8) % 8];
        }
        for (int op = 0; op < loomNumOps; op++) {
            reduceApplyFinal(want, a, b, 64, types[t], (loomRedOp_t)op, 3);
            launch(types[t], (loomRedOp_t)op, (char *)out, NULL, (const char *)a, (const char *)b,
                   64, 1, 3);
            ck_assert_msg(memcmp(out, want, sizeof(out)) == 0, "%s %s: wrong at the edges",
                          reduceTypeName(types[t]), reduceOpName((loomRedOp_t)op));
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arith");
    TCase *tc = tcase_create("interpreter against reduce.c");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, pair_matches_reduce, 0, loomNumTypes);
    tcase_add_loop_test(tc, fanin_matches_reduce, 0, loomNumTypes);
    tcase_add_loop_test(tc, launch_matches_reduce, 0, loomNumTypes);
    tcase_add_test(tc, half_edges);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
