/*
 * alltoallv.c — loomAlltoAllv with uneven counts, every element checked; a
 * program of one rank, started by loomrun (tests/rdma/suite.sh runs it over
 * InfiniBand, where loom-perf, which has no AlltoAllv, cannot).
 *
 * Rank r sends peer p count(r, p) int32 values, r * 1000003 + p * 1009 + i,
 * at displacements in the order of the peers with a gap of one element
 * between blocks (so displacements matter), at three scales of the counts:
 * below a slot, across a few slots, and across many. Exits 0 when every
 * element arrived, 1 with a line naming the first wrong one otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <loom.h>

static size_t countOf(int from, int to, size_t scale)
{
    return ((size_t)(from * 3 + to * 5) % 7 + 1) * scale;
}

static int32_t valueOf(int from, int to, size_t i)
{
    return (int32_t)(from * 1000003 + to * 1009 + (int)(i % 100000));
}

static int exchange(loomComm_t comm, int rank, int n, size_t scale)
{
    size_t *sc = calloc((size_t)n * 4, sizeof(size_t)), *sd = sc + n, *rc = sc + 2 * n,
           *rd = sc + 3 * n;
    size_t sendTotal = 0, recvTotal = 0;
    for (int p = 0; sc && p < n; p++) {
        sc[p] = countOf(rank, p, scale);
        sd[p] = sendTotal;
        sendTotal += sc[p] + 1;
        rc[p] = countOf(p, rank, scale);
        rd[p] = recvTotal;
        recvTotal += rc[p] + 1;
    }
    int32_t *send = sc ? malloc(sendTotal * sizeof(int32_t)) : NULL;
    int32_t *recv = sc ? malloc(recvTotal * sizeof(int32_t)) : NULL;
    if (send == NULL || recv == NULL) {
        fprintf(stderr, "alltoallv: out of memory\n");
        return 1;
    }
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < sc[p]; i++)
            send[sd[p] + i] = valueOf(rank, p, i);
    for (size_t i = 0; i < recvTotal; i++)
        recv[i] = -1;
    int bad = 0;
    if (loomAlltoAllv(send, sc, sd, recv, rc, rd, loomInt32, comm, NULL) != loomSuccess) {
        fprintf(stderr, "alltoallv: rank %d, scale %zu: %s\n", rank, scale, loomGetLastError(comm));
        bad = 1;
    }
    for (int p = 0; !bad && p < n; p++) {
        for (size_t i = 0; !bad && i < rc[p]; i++) {
            if (recv[rd[p] + i] != valueOf(p, rank, i)) {
                fprintf(stderr,
                        "alltoallv: rank %d, scale %zu: element %zu from rank %d is %d, not %d\n",
                        rank, scale, i, p, recv[rd[p] + i], valueOf(p, rank, i));
                bad = 1;
            }
        }
        if (!bad && recv[rd[p] + rc[p]] != -1) {
            fprintf(stderr,
                    "alltoallv: rank %d, scale %zu: the gap after rank %d's block was written\n",
                    rank, scale, p);
            bad = 1;
        }
    }
    free(send);
    free(recv);
    free(sc);
    return bad;
}

int main(void)
{
    loomComm_t comm;
    int rank, n, bad = 0;
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "alltoallv: init: %s\n", loomGetLastError(NULL));
        return 1;
    }
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &n);
    size_t scales[] = {1, 100, 20000};
    for (int s = 0; s < 3 && !bad; s++)
        bad = exchange(comm, rank, n, scales[s]);
    if (!bad)
        printf("alltoallv: rank %d of %d: every element right\n", rank, n);
    loomCommDestroy(comm);
    return bad;
}
