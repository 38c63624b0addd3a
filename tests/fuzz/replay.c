/*
 * replay.c — runs the fuzz target over a corpus, without libFuzzer.
 *
 *   replay                  every file in $top_srcdir/tests/fuzz/corpus/bootstrap
 *   replay PATH...          these files, or every file in these directories
 *   replay --write-seeds DIR  writes the hand-made seed inputs into DIR
 *
 * make check runs the first form: each input the fuzzer ever kept (and each
 * that once crashed, after the fix) is replayed as a regression test. The
 * target aborts on a broken invariant; a corpus without at least one message
 * of each kind that its decoder accepts is a failure too, so the test cannot
 * pass by finding nothing to check.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bootstrap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern unsigned long fuzzBootstrapAccepted[4]; /* hello, id, table, frame */

static int replayFile(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *p = realloc(buf, cap);
            if (p == NULL) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = p;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int entryCompare(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of dir in name order; returns how many, or -1. */
static int replayDir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    char **names = NULL;
    int n = 0, done = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char **p = realloc(names, (size_t)(n + 1) * sizeof(*names));
        if (p == NULL)
            break;
        names = p;
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(*names), entryCompare);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        done += replayFile(path) == 0;
        free(names[i]);
    }
    free(names);
    return done;
}

static int replayPath(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s does not exist\n", path);
        return -1;
    }
    return S_ISDIR(st.st_mode) ? replayDir(path) : (replayFile(path) == 0 ? 1 : -1);
}

/* ---- seeds ---- */

static void seedWrite(const char *dir, const char *name, uint8_t sel, const uint8_t *msg,
                      size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(&sel, 1, 1, f) != 1 || fwrite(msg, 1, len, f) != len) {
        fprintf(stderr, "replay: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static struct bootstrapAddr seedAddr(int family, int i)
{
    struct bootstrapAddr a;
    memset(&a, 0, sizeof(a));
    a.family = (uint8_t)family;
    a.port = (uint16_t)(40000 + i);
    for (int k = 0; k < (family == 4 ? 4 : 16); k++)
        a.ip[k] = (uint8_t)(k == 0 ? 127 : i + k);
    return a;
}

static void writeSeeds(const char *dir)
{
    uint8_t buf[8 + 5 * 20 + 1];
    for (int family = 4; family <= 6; family += 2) {
        char name[32];
        struct bootstrapHello h = {.rank = 2, .nranks = 5, .addr = seedAddr(family, 1)};
        for (int i = 0; i < BOOTSTRAP_SECRET_BYTES; i++)
            h.secret[i] = (uint8_t)(i * 13 + 1);
        size_t n = bootstrapEncodeHello(&h, buf, sizeof(buf));
        snprintf(name, sizeof(name), "hello-v%d", family);
        seedWrite(dir, name, 0, buf, n);
        snprintf(name, sizeof(name), "hello-v%d-cut", family);
        seedWrite(dir, name, 0, buf, n - 1);

        struct bootstrapId id = {.root = seedAddr(family, 2)};
        memcpy(id.secret, h.secret, sizeof(id.secret));
        loomUniqueId uid;
        bootstrapEncodeId(&id, &uid);
        snprintf(name, sizeof(name), "id-v%d", family);
        seedWrite(dir, name, 1, (const uint8_t *)uid.internal, sizeof(uid.internal));

        struct bootstrapAddr addrs[5];
        for (int r = 0; r < 5; r++)
            addrs[r] = seedAddr(r % 2 ? 10 - family : family, r);
        buf[0] = 4; /* nranks - 1 */
        n = bootstrapEncodeTable(addrs, 5, buf + 1, sizeof(buf) - 1);
        snprintf(name, sizeof(name), "table5-v%d", family);
        seedWrite(dir, name, 2, buf, n + 1);
    }
    size_t n = bootstrapEncodeFrame(7, 1 << 20, buf, sizeof(buf));
    seedWrite(dir, "frame", 3, buf, n);
    memset(buf, 0xff, sizeof(buf)); /* huge lengths, rank -1, every reserved bit set */
    seedWrite(dir, "ones-hello", 0, buf, BOOTSTRAP_HELLO_BYTES);
    seedWrite(dir, "ones-frame", 3, buf, BOOTSTRAP_FRAME_BYTES);
    seedWrite(dir, "empty", 0, buf, 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) {
        writeSeeds(argv[2]);
        return 0;
    }
    int total = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            int n = replayPath(argv[i]);
            if (n < 0)
                return 1;
            total += n;
        }
    } else {
        const char *top = getenv("top_srcdir");
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/bootstrap", top ? top : ".");
        total = replayPath(dir);
    }
    const unsigned long *ok = fuzzBootstrapAccepted;
    printf("replay: %d inputs, no crash, every invariant held; accepted: %lu hello, %lu id, %lu "
           "table, %lu frame\n",
           total < 0 ? 0 : total, ok[0], ok[1], ok[2], ok[3]);
    /* Without an accepted message of each kind the round-trip checks never ran. */
    return total > 0 && ok[0] && ok[1] && ok[2] && ok[3] ? 0 : 1;
}
