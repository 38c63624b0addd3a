/*
 * allreduce.c — the smallest complete Loom program.
 *
 * Every rank fills a buffer of 1M floats, the ranks sum them with
 * loomAllReduce, and each rank checks the result. The values are small
 * integers, so the sum is exact in float whatever order the ranks add in.
 *
 *   cc -o allreduce allreduce.c $(pkg-config --cflags --libs loom)
 *   loomrun -n 4 ./allreduce
 */
#include <stdio.h>
#include <stdlib.h>

#include <loom.h>

#define COUNT (1 << 20)

int main(void)
{
    loomComm_t comm;
    int rank, nranks, wrong = 0;
    float *buf = malloc(COUNT * sizeof(*buf));

    if (buf == NULL || loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "init failed: %s\n", loomGetLastError(NULL));
        return 1;
    }
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &nranks);
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = (float)((rank + 1) * (i % 7));

    /* In place: sendbuff == recvbuff. A NULL stream blocks until done. */
    if (loomAllReduce(buf, buf, COUNT, loomFloat32, loomSum, comm, NULL) != loomSuccess) {
        fprintf(stderr, "rank %d: %s\n", rank, loomGetLastError(comm));
        loomCommAbort(comm);
        return 1;
    }
    for (size_t i = 0; i < COUNT; i++)
        wrong += buf[i] != (float)(nranks * (nranks + 1) / 2 * (i % 7));
    printf("rank %d of %d: %s\n", rank, nranks, wrong ? "WRONG" : "ok");

    loomCommDestroy(comm);
    free(buf);
    return wrong ? 1 : 0;
}
