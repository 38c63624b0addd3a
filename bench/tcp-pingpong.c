/*
 * tcp-pingpong — the round trip of a small message over plain TCP: the
 * floor under any library's small-message time across hosts, measured on
 * the same link (bench/net-vs-link prints Loom's time against it).
 *
 *   tcp-pingpong -s [-p PORT]                       serve one client, then exit
 *   tcp-pingpong -c HOST [-p PORT] [-b BYTES] [-n ITERS] [-w WARMUP] [-S]
 *
 * The client sends BYTES (default 8), the server sends them back, ITERS
 * times (default 10000, after WARMUP = 1000 untimed), both with TCP_NODELAY
 * and blocking calls: one thread a side, woken by the kernel as data
 * arrives, as a latency-minded program does. Prints the median, 10th and
 * 90th percentile of the round trips in microseconds.
 *
 * -S: both sides spin instead: nonblocking recv() in a loop, yielding the
 * core between tries (a spin that does not yield on 2 shared cores keeps
 * the peer off one: 3.5-4 ms round trips), for up to SPIN_US before they
 * block in poll(). A blocking wait pays the wake-up of
 * a sleeping thread (on an idle VM a halted vCPU's, ~100 us a round trip
 * here), which a spinning one does not: the pair of figures brackets what
 * the link itself costs, and a library that polls is measured against the
 * second.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SPIN_US 1000.0       /* a spinning wait's bound before it blocks (-S) */
#define SPIN_FLAG (1u << 31) /* in the size the client announces: the server spins too */

static double nowUs(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* Sends (out) or receives len bytes; a spinning receive polls for SPIN_US before it blocks. */
static int moveAll(int fd, char *buf, size_t len, int out, int spin)
{
    size_t done = 0;
    double since = spin ? nowUs() : 0;
    while (done < len) {
        ssize_t r = out ? send(fd, buf + done, len - done, MSG_NOSIGNAL)
                        : recv(fd, buf + done, len - done, spin ? MSG_DONTWAIT : 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && spin && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (nowUs() - since > SPIN_US) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                poll(&p, 1, -1);
                since = nowUs();
            } else {
                sched_yield(); /* on a shared core, the peer (or anyone) may need it */
            }
            continue;
        }
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

static int cmpDouble(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void noDelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int serve(const char *port)
{
    struct addrinfo hints = {.ai_family = AF_INET,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *ai;
    if (getaddrinfo(NULL, port, &hints, &ai) != 0) {
        fprintf(stderr, "tcp-pingpong: bad port %s\n", port);
        return 1;
    }
    int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, 1) != 0) {
        fprintf(stderr, "tcp-pingpong: cannot listen on port %s: %s\n", port, strerror(errno));
        return 1;
    }
    freeaddrinfo(ai);
    int fd = accept(ls, NULL, NULL);
    close(ls);
    if (fd < 0)
        return 1;
    noDelay(fd);
    uint32_t bytes;
    if (moveAll(fd, (char *)&bytes, sizeof(bytes), 0, 0) != 0)
        return 1;
    int spin = (bytes & SPIN_FLAG) != 0;
    bytes &= ~SPIN_FLAG;
    if (bytes == 0 || bytes > (1u << 24))
        return 1;
    char *buf = malloc(bytes);
    while (buf && moveAll(fd, buf, bytes, 0, spin) == 0 && moveAll(fd, buf, bytes, 1, spin) == 0) {
    }
    free(buf);
    close(fd);
    return 0;
}

static int client(const char *host, const char *port, uint32_t bytes, int iters, int warmup,
                  int spin)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        fprintf(stderr, "tcp-pingpong: cannot resolve %s\n", host);
        return 1;
    }
    int fd = -1;
    for (int tries = 0; tries < 100; tries++) { /* the server may still be starting */
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
        usleep(20000);
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        fprintf(stderr, "tcp-pingpong: cannot connect to %s:%s\n", host, port);
        return 1;
    }
    noDelay(fd);
    char *buf = calloc(1, bytes);
    double *rtt = calloc((size_t)iters, sizeof(double));
    uint32_t hello = bytes | (spin ? SPIN_FLAG : 0);
    if (buf == NULL || rtt == NULL || moveAll(fd, (char *)&hello, sizeof(hello), 1, 0) != 0)
        return 1;
    for (int i = -warmup; i < iters; i++) {
        double t0 = nowUs();
        if (moveAll(fd, buf, bytes, 1, spin) != 0 || moveAll(fd, buf, bytes, 0, spin) != 0) {
            fprintf(stderr, "tcp-pingpong: the server went away\n");
            return 1;
        }
        if (i >= 0)
            rtt[i] = nowUs() - t0;
    }
    close(fd);
    qsort(rtt, (size_t)iters, sizeof(double), cmpDouble);
    printf("tcp-pingpong: %u B round trip to %s%s: median %.1f us, p10 %.1f, p90 %.1f (%d "
           "round trips)\n",
           bytes, host, spin ? ", spinning" : "", rtt[iters / 2], rtt[iters / 10],
           rtt[iters * 9 / 10], iters);
    free(rtt);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *host = NULL, *port = "29600";
    int server = 0, iters = 10000, warmup = 1000, spin = 0, opt;
    uint32_t bytes = 8;
    while ((opt = getopt(argc, argv, "sc:p:b:n:w:Sh")) != -1) {
        switch (opt) {
        case 's':
            server = 1;
            break;
        case 'c':
            host = optarg;
            break;
        case 'p':
            port = optarg;
            break;
        case 'b':
            bytes = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'n':
            iters = atoi(optarg);
            break;
        case 'w':
            warmup = atoi(optarg);
            break;
        case 'S':
            spin = 1;
            break;
        default:
            fprintf(stderr, "usage: tcp-pingpong -s [-p PORT] | -c HOST [-p PORT] [-b BYTES] "
                            "[-n ITERS] [-w WARMUP] [-S]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (server == (host != NULL) || bytes == 0 || bytes > (1u << 24) || iters < 10 || warmup < 0) {
        fprintf(stderr, "tcp-pingpong: give -s or -c HOST; 1 <= BYTES <= 16 MiB, ITERS >= 10\n");
        return 2;
    }
    return server ? serve(port) : client(host, port, bytes, iters, warmup, spin);
}
