/*
 * canary.c — sends a known plaintext across hosts, for tests/multinode/tls.sh.
 *
 * Joins with loomCommInitFromEnv; rank 0 broadcasts BYTES bytes that repeat
 * CANARY, rounds times, and every rank checks what it got. The test captures
 * the bridge meanwhile and looks for CANARY in the capture: there without
 * LOOM_NET_TLS, not there with it. Prints "canary: ok" when every byte came
 * through, or the call's error in one line and exits 1.
 *
 *   canary [BYTES [ROUNDS]]   (default 4 MiB, 3)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"

static const char canary[] = "LOOM-PLAINTEXT-CANARY-7f3a9c";

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)4 << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    loomComm_t comm;
    int rank;
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "canary: cannot join: %s\n", loomGetLastError(NULL));
        return 1;
    }
    loomCommUserRank(comm, &rank);
    char *buf = malloc(bytes), *want = malloc(bytes);
    if (buf == NULL || want == NULL)
        return 1;
    for (size_t i = 0; i < bytes; i++)
        want[i] = canary[i % (sizeof(canary) - 1)];
    for (int r = 0; r < rounds; r++) {
        memset(buf, 0, bytes);
        if (rank == 0)
            memcpy(buf, want, bytes);
        if (loomBroadcast(buf, buf, bytes, loomInt8, 0, comm, NULL) != loomSuccess) {
            fprintf(stderr, "canary: rank %d: broadcast: %s\n", rank, loomGetLastError(NULL));
            return 1;
        }
        if (memcmp(buf, want, bytes) != 0) {
            fprintf(stderr, "canary: rank %d: round %d: the bytes differ\n", rank, r);
            return 1;
        }
    }
    loomCommDestroy(comm);
    printf("canary: ok (rank %d, %d x %zu bytes)\n", rank, rounds, bytes);
    free(buf);
    free(want);
    return 0;
}
