/*
 * train.c — the shared helpers of train.h: the memory ledger, the timing of
 * Loom calls, error lines.
 *
 * The ledger is how the memory figures loom-train prints are measured: every
 * buffer of model state, activations and temporaries is allocated through
 * ledgerAlloc under its kind, and the ledger keeps the bytes held now and at
 * peak, per kind. Nothing is estimated from the model's shape.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "train.h"

void *ledgerAlloc(struct ledger *l, enum ledgerKind kind, size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "loom-train: cannot allocate %zu bytes: out of memory\n", bytes);
        return NULL;
    }
    if (l != NULL) {
        l->now[kind] += bytes;
        if (l->now[kind] > l->peak[kind])
            l->peak[kind] = l->now[kind];
    }
    return p;
}

void ledgerFree(struct ledger *l, enum ledgerKind kind, void *p, size_t bytes)
{
    if (p == NULL)
        return;
    if (l != NULL)
        l->now[kind] -= bytes;
    free(p);
}

uint64_t nowNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

loomResult_t trainFail(const struct trainer *t, loomResult_t res, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "loom-train: rank %d: ", t->rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return res;
}

loomResult_t trainComm(struct trainer *t, const char *what, loomResult_t res, uint64_t startNs)
{
    t->commNs += nowNs() - startNs;
    if (res != loomSuccess)
        trainFail(t, res, "%s failed: %s: %s", what, loomGetErrorString(res),
                  loomGetLastError(t->comm));
    return res;
}

void freeFinalState(struct finalState *f)
{
    free(f->weights);
    free(f->outputs);
    memset(f, 0, sizeof(*f));
}
