/*
 * cudart.c — Loom as a CUDA runtime application uses it: cudaSetDevice,
 * cudaMalloc, a cudaStream_t, and loomStreamCreateCuda on it.
 *
 * Loom speaks the driver API; applications speak the runtime's. This
 * program checks that what the runtime hands out (its primary context, its
 * streams, its device pointers) works as is. Each rank (loomrun -n N) uses
 * GPU LOOM_LOCAL_RANK modulo the GPUs it sees, so several ranks may share
 * one, fills a buffer with rank-dependent values on the GPU through the
 * stream, AllReduces it in place on the same stream, copies the result back
 * on the stream and checks it after one cudaStreamSynchronize. Exits 0 when
 * every element is right, 1 otherwise, 77 when there is no GPU.
 *
 *   loomrun -n 2 tests/gpu/cudart
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom.h"

#define COUNT (8 << 20)

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "cudart: %s: %s\n", what, why);
    return 1;
}

int main(void)
{
    int ndev = 0, rank = 0, nranks = 1, wrong = 0;
    const char *local = getenv("LOOM_LOCAL_RANK");
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: cudart: no GPU\n");
        return 77;
    }
    if (cudaSetDevice((local ? atoi(local) : 0) % ndev) != cudaSuccess)
        return fail("cudaSetDevice", cudaGetErrorString(cudaGetLastError()));
    loomComm_t comm;
    loomStream_t ls;
    cudaStream_t cs;
    float *d, *h;
    if (loomCommInitFromEnv(&comm) != loomSuccess)
        return fail("loomCommInitFromEnv", loomGetLastError(NULL));
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &nranks);
    if (cudaStreamCreate(&cs) != cudaSuccess || cudaMalloc((void **)&d, COUNT * 4) != cudaSuccess ||
        cudaMallocHost((void **)&h, COUNT * 4) != cudaSuccess)
        return fail("CUDA setup", cudaGetErrorString(cudaGetLastError()));
    if (loomStreamCreateCuda(&ls, cs) != loomSuccess)
        return fail("loomStreamCreateCuda", loomGetLastError(NULL));
    for (size_t i = 0; i < COUNT; i++)
        h[i] = (float)((i % 61) * (rank + 1));
    cudaMemcpyAsync(d, h, COUNT * 4, cudaMemcpyHostToDevice, cs);
    if (loomAllReduce(d, d, COUNT, loomFloat32, loomSum, comm, ls) != loomSuccess)
        return fail("loomAllReduce", loomGetLastError(comm));
    cudaMemcpyAsync(h, d, COUNT * 4, cudaMemcpyDeviceToHost, cs);
    if (cudaStreamSynchronize(cs) != cudaSuccess)
        return fail("cudaStreamSynchronize", cudaGetErrorString(cudaGetLastError()));
    for (size_t i = 0; i < COUNT; i++)
        wrong += h[i] != (float)((i % 61) * nranks * (nranks + 1) / 2);
    printf("cudart: rank %d of %d: %s\n", rank, nranks, wrong ? "WRONG" : "ok");
    loomStreamDestroy(ls);
    cudaStreamDestroy(cs);
    cudaFree(d);
    cudaFreeHost(h);
    loomCommDestroy(comm);
    return wrong ? 1 : 0;
}
