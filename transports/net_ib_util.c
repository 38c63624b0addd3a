/*
 * net_ib_util.c — InfiniBand helpers that need no device (see net_ib_util.h).
 *
 * The registration cache is a small array searched linearly: a
 * communicator registers a few regions (its connector slots), and a linear
 * scan of a few dozen entries costs less than any tree. Registrations are
 * widened to whole pages, as the device pins whole pages anyway, so
 * neighbouring buffers inside one page share one registration.
 */
#include "net_ib_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "wire.h"

#define IB_CONN_MAGIC "LMIB"
#define IB_CONN_VERSION 1
#define IB_CONN_VALID 1

void ibConnEncode(const struct ibConnInfo *info, uint8_t *out)
{
    memset(out, 0, IB_CONN_BYTES);
    memcpy(out, IB_CONN_MAGIC, 4);
    out[4] = IB_CONN_VERSION;
    out[5] = IB_CONN_VALID;
    wirePut16(out + 6, info->lid);
    wirePut32(out + 8, info->qpn);
    wirePut32(out + 12, info->psn);
    out[16] = info->mtu;
    memcpy(out + 20, info->gid, IB_GID_BYTES);
    wirePut64(out + 36, info->addr);
    wirePut32(out + 44, info->rkey);
    wirePut32(out + 48, info->slotBytes);
}

static int allZero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

loomResult_t ibConnDecode(const uint8_t *in, struct ibConnInfo *info)
{
    if (memcmp(in, IB_CONN_MAGIC, 4) != 0 || in[4] != IB_CONN_VERSION)
        return loomInvalidArgument;
    if (in[5] != IB_CONN_VALID || !allZero(in + 17, 3) || !allZero(in + 52, 12))
        return loomInvalidArgument;
    struct ibConnInfo t;
    t.lid = wireGet16(in + 6);
    t.qpn = wireGet32(in + 8);
    t.psn = wireGet32(in + 12);
    t.mtu = in[16];
    memcpy(t.gid, in + 20, IB_GID_BYTES);
    t.addr = wireGet64(in + 36);
    t.rkey = wireGet32(in + 44);
    t.slotBytes = wireGet32(in + 48);
    if (t.psn > 0xffffff || t.qpn > 0xffffff || t.mtu < 1 || t.mtu > 5)
        return loomInvalidArgument;
    *info = t;
    return loomSuccess;
}

static int gidIsIpv4Mapped(const uint8_t *gid)
{
    return allZero(gid, 10) && gid[10] == 0xff && gid[11] == 0xff;
}

int ibGidChoose(const uint8_t (*gids)[IB_GID_BYTES], const int *types, int n, int roce)
{
    int v2 = -1;
    for (int i = 0; roce && i < n; i++) {
        if (types[i] != IB_GID_ROCE_V2 || ibGidIsZero(gids[i]))
            continue;
        if (gidIsIpv4Mapped(gids[i]))
            return i;
        if (v2 < 0)
            v2 = i;
    }
    return v2 >= 0 ? v2 : 0;
}

void ibGidFormat(const uint8_t *gid, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < IB_GID_BYTES / 2 && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%02x%02x", i ? ":" : "", gid[2 * i],
                         gid[2 * i + 1]);
        used += n > 0 ? (size_t)n : 0;
    }
}

int ibGidIsZero(const uint8_t *gid)
{
    return allZero(gid, IB_GID_BYTES);
}

int ibHcaMatches(const char *spec, const char *dev, int port)
{
    if (spec == NULL || spec[0] == '\0')
        return 1;
    int exclude = 0, exact = 0, found = 0;
    if (*spec == '^')
        exclude = 1, spec++;
    if (*spec == '=')
        exact = 1, spec++;
    while (*spec && !found) {
        size_t itemLen = strcspn(spec, ",");
        size_t nameLen = strcspn(spec, ",:");
        int wantPort = -1;
        if (nameLen < itemLen)
            wantPort = atoi(spec + nameLen + 1);
        int nameOk = exact ? strlen(dev) == nameLen && strncmp(dev, spec, nameLen) == 0
                           : strncmp(dev, spec, nameLen) == 0;
        if (nameLen > 0 && nameOk && (wantPort < 0 || wantPort == port))
            found = 1;
        spec += itemLen;
        if (*spec == ',')
            spec++;
    }
    return exclude ? !found : found;
}

/* ---- registration cache ---- */

loomResult_t ibRegCacheInit(struct ibRegCache *c, int capacity, size_t pageBytes, ibRegisterFn reg,
                            ibDeregisterFn dereg, void *ctx)
{
    memset(c, 0, sizeof(*c));
    c->regs = calloc((size_t)capacity, sizeof(*c->regs));
    if (c->regs == NULL)
        return loomSetError(loomSystemError, "NET/IB: out of memory for the registration cache");
    c->capacity = capacity;
    c->pageBytes = pageBytes;
    c->reg = reg;
    c->dereg = dereg;
    c->ctx = ctx;
    return loomSuccess;
}

/* Index of the least recently used registration nobody holds, or -1. */
static int victim(const struct ibRegCache *c)
{
    int v = -1;
    for (int i = 0; i < c->count; i++)
        if (c->regs[i].refs == 0 && (v < 0 || c->regs[i].lastUse < c->regs[v].lastUse))
            v = i;
    return v;
}

loomResult_t ibRegCacheGet(struct ibRegCache *c, void *addr, size_t len, struct ibReg **out)
{
    uintptr_t lo = (uintptr_t)addr, hi = lo + (len ? len : 1);
    for (int i = 0; i < c->count; i++) {
        struct ibReg *r = &c->regs[i];
        if (r->start <= lo && hi <= r->end) {
            r->refs++;
            r->lastUse = ++c->clock;
            c->hits++;
            *out = r;
            return loomSuccess;
        }
    }
    int slot = c->count;
    if (slot == c->capacity) {
        slot = victim(c);
        if (slot < 0)
            return loomSetError(loomInternalError, "NET/IB: all %d memory registrations are in use",
                                c->capacity);
        if (c->regs[slot].handle != NULL)
            c->dereg(c->ctx, c->regs[slot].handle);
    }
    struct ibReg r = {.start = lo & ~(uintptr_t)(c->pageBytes - 1),
                      .end = (hi + c->pageBytes - 1) & ~(uintptr_t)(c->pageBytes - 1),
                      .refs = 1,
                      .lastUse = ++c->clock};
    loomResult_t res =
        c->reg(c->ctx, (void *)r.start, r.end - r.start, &r.handle, &r.lkey, &r.rkey);
    if (res != loomSuccess) {
        if (slot <
            c->count) /* the victim is gone: leave an empty entry (held ones keep their place) */
            c->regs[slot] = (struct ibReg){0};
        return res;
    }
    c->regs[slot] = r;
    if (slot == c->count)
        c->count++;
    c->misses++;
    *out = &c->regs[slot];
    return loomSuccess;
}

void ibRegCacheRelease(struct ibRegCache *c, struct ibReg *r)
{
    (void)c;
    if (r->refs > 0)
        r->refs--;
}

void ibRegCacheDestroy(struct ibRegCache *c)
{
    for (int i = 0; c->regs && i < c->count; i++)
        if (c->regs[i].handle != NULL)
            c->dereg(c->ctx, c->regs[i].handle);
    free(c->regs);
    memset(c, 0, sizeof(*c));
}
