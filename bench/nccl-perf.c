/*
 * nccl-perf.c — NCCL's AllReduce on one GPU, timed as loom-perf times Loom's,
 * for the comparison in tests/gpu/run.
 *
 * NCCL refuses several ranks on one GPU, so this runs one rank
 * (ncclCommInitAll on device 0) and prints loom-perf's columns for the same
 * sizes: out of place and in place, each the average of -n calls queued on
 * a stream after -w warmups, timed on the host around the calls and one
 * cudaStreamSynchronize, as loom-perf -G 1 -z 0 does. On one rank AllReduce
 * is a copy, so the figures show the fixed cost of a call and the copy
 * bandwidth; the result is checked once per size (#wrong).
 *
 *   bench/nccl-perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double nowUs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static size_t parseSize(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K':
    case 'k':
        v *= 1 << 10;
        break;
    case 'M':
    case 'm':
        v *= 1 << 20;
        break;
    case 'G':
    case 'g':
        v *= 1 << 30;
        break;
    default:
        break;
    }
    return (size_t)v;
}

#define CHECKED(call, what)                                                                        \
    if ((call) != 0) {                                                                             \
        fprintf(stderr, "nccl-perf: %s failed\n", what);                                           \
        return 1;                                                                                  \
    }

/* Average microseconds of one out-of-place (or in-place) AllReduce of count floats. */
static double timeOne(ncclComm_t comm, cudaStream_t s, float *send, float *recv, size_t count,
                      int iters, int warmup)
{
    for (int i = 0; i < warmup; i++)
        ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    double t0 = nowUs();
    for (int i = 0; i < iters; i++)
        ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, s);
    cudaStreamSynchronize(s);
    return (nowUs() - t0) / iters;
}

int main(int argc, char **argv)
{
    size_t minBytes = 8, maxBytes = 256 << 20;
    double factor = 2;
    int iters = 20, warmup = 5, opt, dev = 0, version = 0;
    while ((opt = getopt(argc, argv, "b:e:f:n:w:")) != -1) {
        switch (opt) {
        case 'b':
            minBytes = parseSize(optarg);
            break;
        case 'e':
            maxBytes = parseSize(optarg);
            break;
        case 'f':
            factor = atof(optarg);
            break;
        case 'n':
            iters = atoi(optarg);
            break;
        case 'w':
            warmup = atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: nccl-perf [-b MIN] [-e MAX] [-f FACTOR] [-n N] [-w N]\n");
            return 2;
        }
    }
    if (factor <= 1 || iters < 1 || minBytes < 4 || minBytes > maxBytes) {
        fprintf(stderr, "nccl-perf: bad options\n");
        return 2;
    }
    ncclComm_t comm;
    cudaStream_t s;
    float *send, *recv, *host;
    CHECKED(cudaSetDevice(dev), "cudaSetDevice");
    CHECKED(ncclCommInitAll(&comm, 1, &dev), "ncclCommInitAll");
    CHECKED(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    CHECKED(cudaMalloc((void **)&send, maxBytes), "cudaMalloc");
    CHECKED(cudaMalloc((void **)&recv, maxBytes), "cudaMalloc");
    host = malloc(maxBytes);
    if (host == NULL)
        return 1;
    ncclGetVersion(&version);
    printf("# nccl-perf  NCCL %d  nranks 1  collective allreduce  datatype float  redop sum\n",
           version);
    printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    for (size_t bytes = minBytes; bytes <= maxBytes;) {
        size_t count = bytes / 4;
        for (size_t i = 0; i < count; i++)
            host[i] = (float)(i % 97);
        cudaMemcpy(send, host, count * 4, cudaMemcpyHostToDevice);
        ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, s);
        cudaStreamSynchronize(s);
        memset(host, 0, count * 4);
        cudaMemcpy(host, recv, count * 4, cudaMemcpyDeviceToHost);
        long wrong = 0;
        for (size_t i = 0; i < count; i++)
            wrong += host[i] != (float)(i % 97);
        double out = timeOne(comm, s, send, recv, count, iters, warmup);
        double in = timeOne(comm, s, recv, recv, count, iters, warmup);
        printf(
            "  %10zu  %12zu  %8s  %6s  %6d  %9.2f  %7.2f  %7.2f  %6ld  %9.2f  %7.2f  %7.2f  %6ld\n",
            count * 4, count, "float", "sum", -1, out, (double)(count * 4) / out / 1e3, 0.0, wrong,
            in, (double)(count * 4) / in / 1e3, 0.0, wrong);
        fflush(stdout);
        size_t next = (size_t)((double)bytes * factor);
        bytes = next > bytes ? next : bytes + 1;
    }
    ncclCommDestroy(comm);
    cudaFree(send);
    cudaFree(recv);
    free(host);
    return 0;
}
