/*
 * tcp-zerocopy — whether MSG_ZEROCOPY pays on a link: TCP in both directions
 * at once (as a 2-host AllReduce moves its bytes), each side sending from
 * one buffer with plain send() or with MSG_ZEROCOPY, and the CPU each side
 * spent on it.
 *
 *   tcp-zerocopy -s [-p PORT] [-z] [-t SEC] [-b CHUNK]     serve one client
 *   tcp-zerocopy -c HOST [-p PORT] [-z] [-t SEC] [-b CHUNK]
 *
 * Each side has two threads: one sends CHUNK bytes (default 512 KiB, a
 * network slot of Loom's) at a time, round robin over a 64 MiB buffer, for
 * SEC seconds (default 4); the other receives. With -z the sender sets
 * SO_ZEROCOPY and sends with MSG_ZEROCOPY, and reaps the completions from
 * the socket's error queue (MSG_ERRQUEUE), counting those the kernel says
 * it copied anyway (SO_EE_CODE_ZEROCOPY_COPIED: what it does when the
 * receiver is on this machine, veth included). Prints GB/s sent and
 * received and the process's CPU seconds per GB moved. Compare -z and not
 * on the same link, in turn.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

#define BUF_BYTES (64u << 20)

static int zc, seconds = 4;
static size_t chunk = 512 * 1024;
static double sentBytes, recvBytes;
static unsigned long completions, copied;

static double nowSec(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Reads the zero-copy completions queued on fd; returns the sends they cover. */
static unsigned long reap(int fd)
{
    unsigned long done = 0;
    for (;;) {
        char control[128];
        struct msghdr m = {.msg_control = control, .msg_controllen = sizeof(control)};
        if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            return done;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            struct sock_extended_err *e = (struct sock_extended_err *)CMSG_DATA(c);
            if (e->ee_errno != 0 || e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            unsigned long n = (unsigned long)(e->ee_data - e->ee_info) + 1;
            done += n;
            completions += n;
            if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                copied += n;
        }
    }
}

static void *sender(void *arg)
{
    int fd = *(int *)arg;
    char *buf = malloc(BUF_BYTES);
    size_t off = 0;
    unsigned long issued = 0, reaped = 0;
    memset(buf, 1, BUF_BYTES);
    double end = nowSec() + seconds;
    while (nowSec() < end) {
        ssize_t s = send(fd, buf + off, chunk, MSG_NOSIGNAL | (zc ? MSG_ZEROCOPY : 0));
        if (s < 0 && errno == ENOBUFS) { /* too many completions pending: reap first */
            struct pollfd p = {.fd = fd, .events = 0};
            poll(&p, 1, 10);
            reaped += reap(fd);
            continue;
        }
        if (s <= 0)
            break;
        issued += zc;
        sentBytes += (double)s;
        off = (off + chunk) % BUF_BYTES;
        if (zc)
            reaped += reap(fd);
    }
    while (zc && reaped < issued) { /* the buffer may not be freed before its completions */
        struct pollfd p = {.fd = fd, .events = 0};
        if (poll(&p, 1, 1000) <= 0)
            break;
        reaped += reap(fd);
    }
    shutdown(fd, SHUT_WR);
    free(buf);
    return NULL;
}

static void *receiver(void *arg)
{
    int fd = *(int *)arg;
    char *buf = malloc(chunk);
    ssize_t r;
    while ((r = recv(fd, buf, chunk, 0)) > 0)
        recvBytes += (double)r;
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *host = NULL;
    int serve = 0, port = 29640, opt, fd;
    while ((opt = getopt(argc, argv, "sc:p:zt:b:")) != -1) {
        switch (opt) {
        case 's':
            serve = 1;
            break;
        case 'c':
            host = optarg;
            break;
        case 'p':
            port = atoi(optarg);
            break;
        case 'z':
            zc = 1;
            break;
        case 't':
            seconds = atoi(optarg);
            break;
        case 'b':
            chunk = (size_t)atol(optarg);
            break;
        default:
            fprintf(stderr, "usage: tcp-zerocopy -s|-c HOST [-p PORT] [-z] [-t SEC] [-b CHUNK]\n");
            return 2;
        }
    }
    if (serve == (host != NULL) || chunk == 0 || chunk > BUF_BYTES || seconds < 1) {
        fprintf(stderr, "tcp-zerocopy: say -s or -c HOST; CHUNK 1..64 MiB, SEC >= 1\n");
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (serve) {
        int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        a.sin_addr.s_addr = INADDR_ANY;
        if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0) {
            perror("tcp-zerocopy: listen");
            return 1;
        }
        fd = accept(l, NULL, NULL);
        close(l);
    } else {
        struct addrinfo *ai, hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
        if (getaddrinfo(host, NULL, &hints, &ai) != 0) {
            fprintf(stderr, "tcp-zerocopy: cannot resolve %s\n", host);
            return 1;
        }
        a.sin_addr = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        freeaddrinfo(ai);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        for (int i = 0; i < 50 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0; i++) {
            close(fd);
            usleep(100000);
            fd = socket(AF_INET, SOCK_STREAM, 0);
        }
    }
    int one = 1;
    if (fd < 0 || (zc && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0)) {
        perror("tcp-zerocopy: socket");
        return 1;
    }
    pthread_t ts, tr;
    double t0 = nowSec();
    pthread_create(&ts, NULL, sender, &fd);
    pthread_create(&tr, NULL, receiver, &fd);
    pthread_join(ts, NULL);
    pthread_join(tr, NULL);
    double t = nowSec() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("%s: sent %.3f GB/s, received %.3f GB/s, %.2f CPU s per GB moved; zero-copy "
           "completions %lu, of which copied by the kernel %lu\n",
           zc ? "MSG_ZEROCOPY" : "send()", sentBytes / t / 1e9, recvBytes / t / 1e9,
           cpu / ((sentBytes + recvBytes) / 1e9), completions, copied);
    close(fd);
    return 0;
}
