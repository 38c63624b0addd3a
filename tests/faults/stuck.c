/*
 * stuck.c — jobs that hang or fail in known ways, for the flight recorder's
 * test (tests/faults/status.sh); a program of one rank, started by
 * loomrun -n 3.
 *
 *   stuck MODE PIDDIR
 *
 * Every rank joins, writes its pid to PIDDIR/rank.R, and runs 5 AllReduces
 * of 1024 floats (collectives #0..#4). Then, by MODE:
 *
 *   sleep     rank 1 sleeps outside any call (until killed) while the others
 *             call AllReduce #5 and wait in it for rank 1 (until LOOM_TIMEOUT).
 *   mismatch  rank 2 calls Broadcast #5 where the others call AllReduce #5;
 *             whatever that call returns, every rank then sleeps (until killed),
 *             so its recorder can be read.
 *   loop      AllReduces of 1 Mi floats until one fails (the test kills a rank).
 *
 * A rank exits 1 when a call fails (after the sleep, for mismatch), 0 never.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <loom.h>

#define SMALL 1024
#define LARGE (1u << 20)

static void writePid(const char *dir, int rank)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/rank.%d", dir, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0 ||
        rename(tmp, path) != 0) {
        perror("stuck: pid file");
        exit(1);
    }
}

static int failed(loomComm_t comm, loomResult_t res, const char *what)
{
    fprintf(stderr, "stuck: %s: %s: %s\n", what, loomGetErrorString(res), loomGetLastError(comm));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: stuck sleep|mismatch|loop PIDDIR\n");
        return 2;
    }
    const char *mode = argv[1];
    loomComm_t comm;
    loomResult_t res = loomCommInitFromEnv(&comm);
    if (res != loomSuccess) {
        fprintf(stderr, "stuck: init: %s\n", loomGetLastError(NULL));
        return 1;
    }
    int rank;
    loomCommUserRank(comm, &rank);
    float *buf = calloc(LARGE, sizeof(float));
    if (buf == NULL)
        return 1;
    writePid(argv[2], rank);
    for (int i = 0; i < 5; i++)
        if ((res = loomAllReduce(buf, buf, SMALL, loomFloat32, loomSum, comm, NULL)) != loomSuccess)
            return failed(comm, res, "warm-up AllReduce");
    if (strcmp(mode, "sleep") == 0) {
        if (rank == 1)
            for (;;)
                pause();
        res = loomAllReduce(buf, buf, SMALL, loomFloat32, loomSum, comm, NULL);
        return res == loomSuccess ? 0 : failed(comm, res, "AllReduce #5");
    }
    if (strcmp(mode, "mismatch") == 0) {
        if (rank == 2)
            res = loomBroadcast(buf, buf, SMALL, loomFloat32, 0, comm, NULL);
        else
            res = loomAllReduce(buf, buf, SMALL, loomFloat32, loomSum, comm, NULL);
        if (res != loomSuccess)
            failed(comm, res, "call #5");
        for (;;)
            pause();
    }
    for (;;)
        if ((res = loomAllReduce(buf, buf, LARGE, loomFloat32, loomSum, comm, NULL)) != loomSuccess)
            return failed(comm, res, "AllReduce loop");
}
