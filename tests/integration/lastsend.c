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
 *
 *   lastsend --reuse BYTES
 *
 * A caller that overwrites and unmaps its buffer the moment a call returns,
 * while its messages are still on their way (large ones go to the socket
 * straight from the caller's buffer). With rank 1 stopped, rank 0 sends it
 * BYTES with loomSend and BYTES more with loomBroadcast (root 0, in place):
 * both return as soon as their messages are handed over (BYTES must fit in
 * half the FIFO, LOOM_BUFFSIZE, and be much more than the kernel's socket
 * buffers hold). Right after each returns, rank 0 fills its buffer with 0xEE
 * and unmaps it, then wakes rank 1, which receives both and checks every
 * byte. A backend still sending from the buffer after the call returned
 * sends 0xEE (rank 1 says which byte) or fails on the unmapped memory.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <loom.h>

static uint8_t byteAt(size_t i, int call)
{
    return (uint8_t)(i * 131 + (i >> 13) * 7 + 1 + call * 17);
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
        buf[i] = byteAt(i, 0);
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
        if (buf[i] != byteAt(i, 0)) {
            fprintf(stderr, "lastsend: rank 1: byte %zu is %u, not %u\n", i, buf[i], byteAt(i, 0));
            return 1;
        }
    printf("lastsend: rank 1: all %zu bytes arrived\n", bytes);
    return 0;
}

/* One call of rank 0 on a fresh mapping, overwritten and unmapped as soon as it returns. */
static int sendOne(loomComm_t comm, size_t bytes, int call)
{
    uint8_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("lastsend --reuse: rank 0: mmap");
        return 1;
    }
    for (size_t i = 0; i < bytes; i++)
        buf[i] = byteAt(i, call);
    loomResult_t res = call == 0 ? loomSend(buf, bytes, loomUint8, 1, comm, NULL)
                                 : loomBroadcast(buf, buf, bytes, loomUint8, 0, comm, NULL);
    memset(buf, 0xEE, bytes);
    munmap(buf, bytes);
    if (res != loomSuccess) {
        fprintf(stderr, "lastsend --reuse: rank 0: %s: %s\n", call == 0 ? "send" : "broadcast",
                loomGetLastError(comm));
        return 1;
    }
    return 0;
}

static int reuseSender(loomComm_t comm, size_t bytes, pid_t receiver)
{
    if (!waitStopped(receiver)) {
        fprintf(stderr, "lastsend --reuse: rank 0: rank 1 (pid %d) did not stop\n", (int)receiver);
        return 1;
    }
    int bad = sendOne(comm, bytes, 0) || sendOne(comm, bytes, 1);
    kill(receiver, SIGCONT);
    loomCommDestroy(comm);
    return bad;
}

static int reuseReceiver(loomComm_t comm, size_t bytes)
{
    uint8_t *buf = malloc(bytes);
    int bad = buf == NULL;
    raise(SIGSTOP);
    for (int call = 0; call < 2 && !bad; call++) {
        memset(buf, 0, bytes);
        loomResult_t res = call == 0 ? loomRecv(buf, bytes, loomUint8, 0, comm, NULL)
                                     : loomBroadcast(NULL, buf, bytes, loomUint8, 0, comm, NULL);
        if (res != loomSuccess) {
            fprintf(stderr, "lastsend --reuse: rank 1: %s: %s\n",
                    call == 0 ? "receive" : "broadcast", loomGetLastError(comm));
            bad = 1;
        }
        for (size_t i = 0; i < bytes && !bad; i++) {
            if (buf[i] != byteAt(i, call)) {
                fprintf(stderr, "lastsend --reuse: rank 1: %s: byte %zu of %zu is %u, not %u\n",
                        call == 0 ? "receive" : "broadcast", i, bytes, buf[i], byteAt(i, call));
                bad = 1;
            }
        }
    }
    loomCommDestroy(comm);
    free(buf);
    if (!bad)
        printf("lastsend --reuse: rank 1: both calls' %zu bytes arrived whole\n", bytes);
    return bad;
}

int main(int argc, char **argv)
{
    loomComm_t comm;
    int rank, n;
    char *end = NULL;
    int reuse = argc == 3 && strcmp(argv[1], "--reuse") == 0;
    size_t bytes = argc == 2 + reuse ? strtoull(argv[1 + reuse], &end, 10) : 0;
    if (argc != 2 + reuse || *end != '\0' || bytes == 0) {
        fprintf(stderr, "usage: lastsend [--reuse] BYTES (run by loomrun -n 2)\n");
        return 2;
    }
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "lastsend: init: %s\n", loomGetLastError(NULL));
        return 1;
    }
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &n);
    int64_t pids[2] = {0, 0}, mine = (int64_t)getpid();
    uint8_t *buf = reuse ? NULL : malloc(bytes);
    if (n != 2 || (buf == NULL && !reuse) ||
        loomAllGather(&mine, pids, 1, loomInt64, comm, NULL) != loomSuccess) {
        fprintf(stderr, "lastsend: rank %d: needs 2 ranks (has %d), memory and an AllGather: %s\n",
                rank, n, loomGetLastError(comm));
        return 1;
    }
    int bad;
    if (reuse)
        bad = rank == 0 ? reuseSender(comm, bytes, (pid_t)pids[1]) : reuseReceiver(comm, bytes);
    else
        bad = rank == 0 ? sender(comm, buf, bytes, (pid_t)pids[1]) : receiver(comm, buf, bytes);
    free(buf);
    return bad;
}
