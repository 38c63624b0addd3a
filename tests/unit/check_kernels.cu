/*
 * check_kernels.cu — the arithmetic of the CUDA reduction kernels, run on
 * the CPU, against reduce.c.
 *
 * reduce.cuh holds what one GPU thread of a kernel does (reduceRange); nvcc
 * compiles it here for the host, where the half types and their operations
 * are emulated in float with the same rounding, and the test runs it thread
 * after thread over a grid-stride loop, as a launch would. For every
 * datatype x operation, with and without the local input (a plain copy that
 * finishes an Avg), with the post-processing or not, one or two outputs, in
 * place or not, aligned for 16-byte packs or not, and counts that leave
 * tails, the result must equal reduce.c's bit for bit. This checks the
 * definitions and the indexing of the device code; the GPU's own
 * instructions only run in tests/gpu/run.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.cuh"
extern "C" {
#include "reduce.h"
}

#define MAXCOUNT 4099
#define GRID 96 /* threads of the emulated launch: several packs per thread */

static unsigned int seed = 12345;

static unsigned int next(void)
{
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
}

/* Random finite values of type dt (no NaN or infinity in the inputs). */
static void fill(unsigned char *p, size_t count, loomDataType_t dt)
{
    size_t es = reduceTypeSize(dt);
    for (size_t i = 0; i < count; i++) {
        unsigned char *e = p + i * es;
        for (size_t k = 0; k < es; k++)
            e[k] = (unsigned char)next();
        if (dt == loomFloat16)
            e[1] = (unsigned char)((e[1] & 0x83) | ((next() % 29) << 2)); /* exponent < 31 */
        if (dt == loomBfloat16)
            e[1] = (unsigned char)((e[1] & 0x80) | (0x30 + next() % 30)); /* |x| ~ 2^-31..2^29 */
        if (dt == loomFloat32) {
            float f = ((float)(next() % 20001) - 10000.0f) / 7.0f;
            memcpy(e, &f, sizeof(f));
        }
        if (dt == loomFloat64) {
            double d = ((double)(next() % 200001) - 100000.0) / 3.0;
            memcpy(e, &d, sizeof(d));
        }
    }
}

/* What reduce.c computes for the same arguments. */
static void reference(const loomReduceArgs &a, loomDataType_t dt, loomRedOp_t op, void *out)
{
    size_t bytes = a.count * reduceTypeSize(dt);
    if (a.b == NULL) {
        memcpy(out, a.a, bytes);
        if (a.final)
            reducePostOp(out, a.count, dt, op, a.nranks);
    } else if (a.final) {
        reduceApplyFinal(out, a.a, a.b, a.count, dt, op, a.nranks);
    } else {
        reduceApply(out, a.a, a.b, a.count, dt, op);
    }
}

template <typename T, int Op> static void runGrid(const loomReduceArgs &a)
{
    for (size_t tid = 0; tid < GRID; tid++)
        loomdev::reduceRange<T, Op>(a, tid, GRID);
}

#define DISPATCH_OP(T, tname, OPE, oname)                                                          \
    if (op == OPE) {                                                                               \
        runGrid<T, OPE>(a);                                                                        \
        return;                                                                                    \
    }
#define DISPATCH_TYPE(E, tname, T)                                                                 \
    if (dt == E) {                                                                                 \
        LOOM_KERNEL_OPS(DISPATCH_OP, T, tname)                                                     \
    }

/* The kernel of (dt, op), emulated. */
static void kernel(const loomReduceArgs &a, loomDataType_t dt, loomRedOp_t op)
{
    LOOM_KERNEL_TYPES(DISPATCH_TYPE)
    ck_abort_msg("no kernel for type %d op %d", (int)dt, (int)op);
}

struct variant {
    int withB, final, twoOutputs, inPlace, misalign;
};

static void checkOne(loomDataType_t dt, loomRedOp_t op, size_t count, const variant &v)
{
    static unsigned char a[MAXCOUNT * 8 + 64], b[MAXCOUNT * 8 + 64];
    static unsigned char out0[MAXCOUNT * 8 + 64], out1[MAXCOUNT * 8 + 64], want[MAXCOUNT * 8];
    size_t es = reduceTypeSize(dt), bytes = count * es, off = v.misalign ? es : 0;
    /* 16-byte aligned starts, moved by one element when misaligned. */
    unsigned char *pa = a + 16 - (uintptr_t)a % 16 + off, *pb = b + 16 - (uintptr_t)b % 16 + off;
    unsigned char *p0 = out0 + 16 - (uintptr_t)out0 % 16 + off;
    unsigned char *p1 = out1 + 16 - (uintptr_t)out1 % 16 + off;
    fill(pa, count, dt);
    fill(pb, count, dt);
    loomReduceArgs args = {p0,     v.twoOutputs ? p1 : NULL, pa, v.withB ? pb : NULL, count, 3,
                           v.final};
    reference(args, dt, op, want);
    if (v.inPlace)
        args.out0 = pa; /* out0 == a, as a reduction into the receive buffer does */
    kernel(args, dt, op);
    ck_assert_msg(memcmp(args.out0, want, bytes) == 0,
                  "%s %s count %zu b %d final %d in place %d misaligned %d: wrong out0",
                  reduceTypeName(dt), reduceOpName(op), count, v.withB, v.final, v.inPlace,
                  v.misalign);
    if (v.twoOutputs)
        ck_assert_msg(memcmp(p1, want, bytes) == 0, "%s %s count %zu: wrong out1",
                      reduceTypeName(dt), reduceOpName(op), count);
}

START_TEST(test_every_type_and_op)
{
    static const size_t counts[] = {1, 7, 33, 1000, MAXCOUNT};
    loomDataType_t dt = (loomDataType_t)_i;
    for (int op = 0; op < loomNumOps; op++) {
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            for (int bits = 0; bits < 32; bits++) {
                variant v = {bits & 1, (bits >> 1) & 1, (bits >> 2) & 1, (bits >> 3) & 1,
                             (bits >> 4) & 1};
                if (v.inPlace && !v.withB)
                    continue;
                checkOne(dt, (loomRedOp_t)op, counts[c], v);
            }
        }
    }
}
END_TEST

/* Halves at the edges: subnormals, the largest finite values, sums that overflow. */
START_TEST(test_half_edges)
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
            loomReduceArgs args = {out, NULL, a, b, 64, 3, 1};
            reference(args, types[t], (loomRedOp_t)op, want);
            kernel(args, types[t], (loomRedOp_t)op);
            ck_assert_msg(memcmp(out, want, sizeof(out)) == 0, "%s %s: wrong at the edges",
                          reduceTypeName(types[t]), reduceOpName((loomRedOp_t)op));
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("host emulation");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_every_type_and_op, 0, loomNumTypes);
    tcase_add_test(tc, test_half_edges);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
