/*
 * lastsend.c — a sender that leaves while its receiver is stopped; a
 * program of one rank, started by loomrun -n 2 on one machine
 * (tests/integration/net.sh runs it over TCP with two sockets a peer).
 *
 *   lastsend BYTES
 *
 * After an AllGather of their pids, rank 1 stops itself (SIGSTOP). Rank 0
 * waits until it is stopped, sends it BYTES, destroys its communicator,
 * wakes rank 1 (SIGCONT) and exits. Rank 1 then finds everything in the
 * kernel at once: the data on every socket and, behind it, the end of each
 * socket. What rank 0 sent before it left must arrive: with a message cut
 * over several sockets, the end of socket 0 must not hide the rest of the
 * message still waiting on socket 1. BYTES must fit in the kernel's socket
 * buffers (rank 0's send returns only once its data is there). Exits 0
 * when every byte arrived, 1 with a line saying what went wrong.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <loom.h>

static uint8_t byteAt(size_t i)
{
    return (uint8_t)(i * 131 + (i >> 13) * 7 + 1);
}

/* 1 once process pid is stopped, 0 if it is not within 10 s. */
static int waitStopped(pid_t pid)
{
    char path[64], state = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (int ms = 0; ms < 10000; ms++) {
        FILE *f = fopen(path, "r");
        /* "pid (comm) S ...": the state follows the last ')' */
        if (f != NULL && fscanf(f, "%*d (%*[^)]) %c", &state) == 1 && state == 'T') {
            fclose(f);
            return 1;
        }
        if (f != NULL)
            fclose(f);
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    return 0;
}

static int sender(loomComm_t comm, uint8_t *buf, size_t bytes, pid_t receiver)
{
    for (size_t i = 0; i < bytes; i++)
        buf[i] = byteAt(i);
    if (!waitStopped(receiver)) {
        fprintf(stderr, "lastsend: rank 0: rank 1 (pid %d) did not stop\n", (int)receiver);
        return 1;
    }
    int bad = 0;
    if (loomSend(buf, bytes, loomUint8, 1, comm, NULL) != loomSuccess) {
        fprintf(stderr, "lastsend: rank 0: send: %s\n", loomGetLastError(comm));
        bad = 1;
    }
    loomCommDestroy(comm); /* closes the sockets: their ends follow the data */
    kill(receiver, SIGCONT);
    return bad;
}

static int receiver(loomComm_t comm, uint8_t *buf, size_t bytes)
{
    raise(SIGSTOP);
    if (loomRecv(buf, bytes, loomUint8, 0, comm, NULL) != loomSuccess) {
        fprintf(stderr, "lastsend: rank 1: receive: %s\n", loomGetLastError(comm));
        loomCommDestroy(comm);
        return 1;
    }
    loomCommDestroy(comm);
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != byteAt(i)) {
            fprintf(stderr, "lastsend: rank 1: byte %zu is %u, not %u\n", i, buf[i], byteAt(i));
            return 1;
        }
    printf("lastsend: rank 1: all %zu bytes arrived\n", bytes);
    return 0;
}

int main(int argc, char **argv)
{
    loomComm_t comm;
    int rank, n;
    char *end = NULL;
    size_t bytes = argc == 2 ? strtoull(argv[1], &end, 10) : 0;
    if (argc != 2 || *end != '\0' || bytes == 0) {
        fprintf(stderr, "usage: lastsend BYTES (run by loomrun -n 2)\n");
        return 2;
    }
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "lastsend: init: %s\n", loomGetLastError(NULL));
        return 1;
    }
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &n);
    int64_t pids[2] = {0, 0}, mine = (int64_t)getpid();
    uint8_t *buf = malloc(bytes);
    if (n != 2 || buf == NULL ||
        loomAllGather(&mine, pids, 1, loomInt64, comm, NULL) != loomSuccess) {
        fprintf(stderr, "lastsend: rank %d: needs 2 ranks (has %d), memory and an AllGather: %s\n",
                rank, n, loomGetLastError(comm));
        return 1;
    }
    int bad = rank == 0 ? sender(comm, buf, bytes, (pid_t)pids[1]) : receiver(comm, buf, bytes);
    free(buf);
    return bad;
}
