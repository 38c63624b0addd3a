/*
 * memcpy-bw — the single-core memcpy bandwidth of this machine, the yardstick
 * bench/vs-mpi sets Loom's large-message bus bandwidth against.
 *
 *   bench/memcpy-bw [BYTES]     (default 64 MiB; suffixes K M G)
 *
 * Copies BYTES from one buffer to another with memcpy on one thread, far
 * beyond the caches, and prints the best of 10 copies as bytes copied per
 * second (so a copy that reads and writes N bytes in t seconds is N/t):
 *
 *   memcpy 67108864 bytes: 9.87 GB/s (best of 10)
 *
 * Both buffers are written once first so no page is faulted in while timed.
 * Built with the project (never installed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPEATS 10

static double nowSec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parseBytes(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mult = 1;
    if (end == s)
        return -1;
    switch (*end) {
    case 'K':
    case 'k':
        mult = 1ULL << 10;
        end++;
        break;
    case 'M':
    case 'm':
        mult = 1ULL << 20;
        end++;
        break;
    case 'G':
    case 'g':
        mult = 1ULL << 30;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0' || v == 0 || v > (1ULL << 40) / mult)
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

int main(int argc, char **argv)
{
    size_t bytes = 64u << 20;
    if (argc > 2 || (argc == 2 && parseBytes(argv[1], &bytes) != 0)) {
        fprintf(stderr, "usage: memcpy-bw [BYTES]   (1 .. 1T, suffixes K M G)\n");
        return 2;
    }
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (src == NULL || dst == NULL) {
        fprintf(stderr, "memcpy-bw: cannot allocate 2 x %zu bytes\n", bytes);
        return 1;
    }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    double best = 1e30;
    for (int i = 0; i < REPEATS; i++) {
        src[(size_t)i % bytes] = (char)i; /* the copies differ: nothing to elide */
        double t0 = nowSec();
        memcpy(dst, src, bytes);
        double t = nowSec() - t0;
        if (t < best)
            best = t;
    }
    volatile char sink = dst[bytes / 2];
    (void)sink;
    printf("memcpy %zu bytes: %.2f GB/s (best of %d)\n", bytes, (double)bytes / best / 1e9,
           REPEATS);
    free(src);
    free(dst);
    return 0;
}
