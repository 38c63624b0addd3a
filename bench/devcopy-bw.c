/*
 * devcopy-bw — the device-to-device copy bandwidth of one GPU, the yardstick
 * tests/gpu/run prints beside every GPU figure: ranks sharing a GPU move
 * their data with copies and reductions in its memory, so no collective of
 * theirs can beat what one copy engine or kernel moves.
 *
 *   bench/devcopy-bw [DEVICE]     (default 0)
 *
 * For each size from 1 MiB to 256 MiB (x4), cudaMemcpyAsync from one device
 * buffer to another on a stream, twice to warm up, then REPEATS times, each
 * timed with CUDA events; prints the best as bytes copied per second (a copy
 * of N bytes reads N and writes N: the memory traffic is twice that):
 *
 *   devcopy 268435456 bytes: 1234.5 GB/s (best of 10)
 *
 * and last the largest size's figure as the limit. Built with CUDA (never
 * installed); it has not run on a GPU in the session that wrote it.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define REPEATS 10
#define MIN_BYTES ((size_t)1 << 20)
#define MAX_BYTES ((size_t)256 << 20)

static int failed(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    fprintf(stderr, "devcopy-bw: %s: %s\n", what, cudaGetErrorString(e));
    return 1;
}

/* The best of REPEATS copies of `bytes` from src to dst on s, in GB/s; < 0 on error. */
static double bestCopy(char *dst, const char *src, size_t bytes, cudaStream_t s, cudaEvent_t a,
                       cudaEvent_t b)
{
    double best = 0;
    for (int i = 0; i < 2; i++)
        if (failed(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "warm-up copy"))
            return -1;
    for (int i = 0; i < REPEATS; i++) {
        float ms = 0;
        if (failed(cudaEventRecord(a, s), "cudaEventRecord") ||
            failed(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "copy") ||
            failed(cudaEventRecord(b, s), "cudaEventRecord") ||
            failed(cudaEventSynchronize(b), "cudaEventSynchronize") ||
            failed(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime"))
            return -1;
        double gbs = ms > 0 ? (double)bytes / (ms * 1e-3) / 1e9 : 0;
        best = gbs > best ? gbs : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int dev = argc > 1 ? atoi(argv[1]) : 0;
    char *src, *dst;
    cudaStream_t s;
    cudaEvent_t a, b;
    if (failed(cudaSetDevice(dev), "cudaSetDevice") ||
        failed(cudaMalloc((void **)&src, MAX_BYTES), "cudaMalloc") ||
        failed(cudaMalloc((void **)&dst, MAX_BYTES), "cudaMalloc") ||
        failed(cudaMemset(src, 1, MAX_BYTES), "cudaMemset") ||
        failed(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ||
        failed(cudaEventCreate(&a), "cudaEventCreate") ||
        failed(cudaEventCreate(&b), "cudaEventCreate"))
        return 1;
    double last = 0;
    for (size_t bytes = MIN_BYTES; bytes <= MAX_BYTES; bytes *= 4) {
        if ((last = bestCopy(dst, src, bytes, s, a, b)) < 0)
            return 1;
        printf("devcopy %zu bytes: %.1f GB/s (best of %d)\n", bytes, last, REPEATS);
    }
    printf("device copy bandwidth (the limit beside every GPU figure): %.1f GB/s\n", last);
    return 0;
}
