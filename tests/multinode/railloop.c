/*
 * railloop.c — AllReduces in a loop, every result checked; for tests/multinode/rails.sh, which
 * takes a rail down while it runs.
 *
 *   railloop ITERS BYTES
 *
 * Each rank joins with loomCommInitFromEnv (under mpirun: LOOM_ROOT_ADDR), then runs ITERS
 * float sum AllReduces of BYTES, out of place, with inputs that change every iteration and
 * sums that are exact, and compares every element of every result. It prints a line every 10
 * iterations (the test waits for one before it takes the rail down) and exits 0 with
 * "every result right", or 1 with the first wrong element or the error.
 */
#include <stdio.h>
#include <stdlib.h>

#include <loom.h>

static float input(int rank, int iter, size_t i)
{
    return (float)((rank + 1) * (int)((i + (size_t)iter) % 7 + 1));
}

int main(int argc, char **argv)
{
    loomComm_t comm;
    int rank, n;
    char *end = NULL;
    long iters = argc == 3 ? strtol(argv[1], &end, 10) : 0;
    size_t bytes = iters > 0 && *end == '\0' ? strtoull(argv[2], &end, 10) : 0;
    if (argc != 3 || *end != '\0' || iters <= 0 || bytes < sizeof(float)) {
        fprintf(stderr, "usage: railloop ITERS BYTES\n");
        return 2;
    }
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "railloop: init: %s\n", loomGetLastError(NULL));
        return 1;
    }
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &n);
    size_t count = bytes / sizeof(float);
    float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
    if (in == NULL || out == NULL) {
        fprintf(stderr, "railloop: rank %d: out of memory\n", rank);
        return 1;
    }
    for (long it = 0; it < iters; it++) {
        for (size_t i = 0; i < count; i++)
            in[i] = input(rank, (int)it, i);
        if (loomAllReduce(in, out, count, loomFloat32, loomSum, comm, NULL) != loomSuccess) {
            fprintf(stderr, "railloop: rank %d: iteration %ld: %s\n", rank, it,
                    loomGetLastError(comm));
            return 1;
        }
        for (size_t i = 0; i < count; i++) {
            float want = (float)(n * (n + 1) / 2 * (int)((i + (size_t)it) % 7 + 1));
            if (out[i] != want) {
                fprintf(stderr, "railloop: rank %d: iteration %ld: element %zu is %g, not %g\n",
                        rank, it, i, out[i], want);
                return 1;
            }
        }
        if (it % 10 == 0) {
            printf("railloop: rank %d: iteration %ld\n", rank, it);
            fflush(stdout);
        }
    }
    printf("railloop: rank %d: %ld AllReduces of %zu bytes, every result right\n", rank, iters,
           bytes);
    loomCommDestroy(comm);
    free(in);
    free(out);
    return 0;
}
