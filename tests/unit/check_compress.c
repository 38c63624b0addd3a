/*
 * check_compress.c — the conversions of network compression (compress.c):
 * float32 to bfloat16 to nearest even and stochastically, and back.
 * What the wire does to whole collectives is tests/integration/compress.sh's.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "reduce.h"

static float fromBits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}

/* Nearest even agrees with reduce.c's bfloat16 (the one loomBfloat16 reductions use). */
START_TEST(nearest_even_is_reduce_bf16)
{
    enum { N = 4096 };
    float src[N];
    uint16_t got[N];
    for (int i = 0; i < N; i++) /* every rounding case: below, at and above a half, odd and even */
        src[i] = fromBits(0x3f800000u + (uint32_t)(i / 8) * 0x10000u + (uint32_t)(i % 8) * 0x3fffu);
    src[0] = INFINITY, src[1] = -INFINITY, src[2] = NAN, src[3] = 3.4e38f;
    compressPack(got, src, N, COMPRESS_BF16);
    int bad = 0; /* counted, not asserted one by one: each ck_assert talks to Check's parent */
    for (int i = 0; i < N; i++)
        bad += got[i] != reduceFloatToBf16(src[i]);
    ck_assert_int_eq(bad, 0);
    ck_assert_uint_eq(compressParse("bf16"), COMPRESS_BF16);
    ck_assert_uint_eq(compressParse("bf16-sr"), COMPRESS_BF16_SR);
    ck_assert_int_eq(compressParse("fp8"), -1);
}
END_TEST

/* A bfloat16 value widens exactly and packs back to itself, in both modes. */
START_TEST(bf16_values_round_trip)
{
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof(*h)), *back = malloc(N * sizeof(*back));
    float *f = malloc(N * sizeof(*f));
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    compressUnpack(f, h, N);
    for (int mode = COMPRESS_BF16; mode <= COMPRESS_BF16_SR; mode++) {
        compressPack(back, f, N, mode);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            int nan = (i & 0x7fff) > 0x7f80;
            bad += nan ? !(isnan(f[i]) && (back[i] & 0x7fc0) == 0x7fc0) : back[i] != h[i];
        }
        ck_assert_msg(bad == 0, "mode %d: %d values did not come back", mode, bad);
    }
    free(h);
    free(back);
    free(f);
}
END_TEST

/*
 * Stochastic rounding gives one of the two neighbours, the upper one as
 * often as the dropped bits say: 1 + 0.3 ulp is 1 + ulp 30% of the time.
 */
START_TEST(stochastic_is_unbiased)
{
    enum { N = 1 << 16 };
    float *src = malloc(N * sizeof(*src));
    uint16_t *got = malloc(N * sizeof(*got));
    float ulp = ldexpf(1.0f, -7), x = 1.0f + 0.3f * ulp;
    for (int i = 0; i < N; i++)
        src[i] = (i & 1) ? -x : x;
    compressPack(got, src, N, COMPRESS_BF16_SR);
    long up = 0, other = 0;
    double sum = 0;
    for (int i = 0; i < N; i++) {
        float v = reduceBf16ToFloat(got[i]);
        other += fabsf(v) != 1.0f && fabsf(v) != 1.0f + ulp;
        up += fabsf(v) != 1.0f;
        sum += fabs((double)v);
    }
    ck_assert_int_eq(other, 0);
    /* 30% of 65536 is 19661, one standard deviation 117: 6 of them apart fails. */
    ck_assert_msg(labs(up - 19661) < 700, "%ld of %d rounded up", up, N);
    ck_assert(fabs(sum / N - x) < 1e-4);
    ck_assert_uint_eq(reduceFloatToBf16(x), 0x3f80); /* nearest even always goes down */
    free(src);
    free(got);
}
END_TEST

static Suite *compressSuite(void)
{
    Suite *s = suite_create("compress");
    TCase *tc = tcase_create("conversions");
    tcase_add_test(tc, nearest_even_is_reduce_bf16);
    tcase_add_test(tc, bf16_values_round_trip);
    tcase_add_test(tc, stochastic_is_unbiased);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(compressSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
