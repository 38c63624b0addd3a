/*
 * net_ib_util.h — the parts of the InfiniBand backend that need no device:
 * the connection record two ranks exchange, GIDs as text, LOOM_IB_HCA
 * matching, and the memory registration cache.
 *
 * They are built whether or not libibverbs is, so the unit tests run them
 * on machines without an RDMA device (check_net.c); net_ib.c uses them.
 *
 * Connection record (IB_CONN_BYTES, big-endian), one per connection and
 * direction, in the pair's record the core carries when it connects the
 * pair (net_ib.c: one per channel and direction):
 *
 *   "LMIB"(4) version(1) flags(1: 1 = valid) lid(2) qpn(4) psn(4) mtu(1)
 *   0(3) gid(16) slots address(8) rkey(4) slot bytes(4) 0(12)     = 64 bytes
 */
#ifndef LOOM_NET_IB_UTIL_H_
#define LOOM_NET_IB_UTIL_H_

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#define IB_CONN_BYTES 64
#define IB_GID_BYTES 16
/* "fe80:0000:0000:0000:0202:c9ff:fe00:0001" and its NUL */
#define IB_GID_STRLEN 40

struct ibConnInfo {
    uint16_t lid;
    uint32_t qpn;
    uint32_t psn; /* 24 bits */
    uint8_t mtu;  /* enum ibv_mtu value, 1..5 */
    uint8_t gid[IB_GID_BYTES];
    uint64_t addr; /* receiver: where its slots are; sender: its failure-notice inbox */
    uint32_t rkey;
    uint32_t slotBytes;
};

/* Writes IB_CONN_BYTES into out. */
void ibConnEncode(const struct ibConnInfo *info, uint8_t *out);
/*
 * Reads a record. Returns loomSuccess, or loomInvalidArgument when the bytes
 * are not a record (wrong magic or version, flags not 1, reserved bytes set,
 * psn over 24 bits, mtu out of range); records nothing.
 */
loomResult_t ibConnDecode(const uint8_t *in, struct ibConnInfo *info);

/* Formats a GID as eight groups of four hex digits into buf (>= IB_GID_STRLEN). */
void ibGidFormat(const uint8_t *gid, char *buf, size_t len);
/* 1 if the GID is all zeros (an unset table entry). */
int ibGidIsZero(const uint8_t *gid);

/* What a GID table entry is, as ibv_query_gid_ex says; IB_GID_UNSET for an empty entry. */
enum { IB_GID_IB, IB_GID_ROCE_V1, IB_GID_ROCE_V2, IB_GID_UNSET };

/*
 * The GID index Loom uses when LOOM_IB_GID_INDEX is unset, from a port's
 * table of n entries (gids[i], types[i]): on RoCE (roce = 1) the first RoCE
 * v2 entry holding an IPv4-mapped address (::ffff:a.b.c.d, routable by any
 * IPv4 network), else the first RoCE v2 entry, else 0 (also on InfiniBand).
 */
int ibGidChoose(const uint8_t (*gids)[IB_GID_BYTES], const int *types, int n, int roce);

/*
 * 1 if device `dev`, port `port`, passes a LOOM_IB_HCA spec in NCCL's
 * syntax: comma-separated names, each with an optional ":port"; names are
 * prefixes unless the list starts with '=' (after an optional '^'); a
 * leading '^' excludes the listed devices instead. NULL or "": all pass.
 */
int ibHcaMatches(const char *spec, const char *dev, int port);

/* ---- registration cache ---- */

/* One registration: the page-aligned range [start, end) and the device's handle. */
struct ibReg {
    uintptr_t start, end;
    void *handle; /* struct ibv_mr *, opaque here */
    uint32_t lkey, rkey;
    int refs;
    uint64_t lastUse;
};

/* Registers [addr, addr + len) with the device; returns loomSuccess or records the error. */
typedef loomResult_t (*ibRegisterFn)(void *ctx, void *addr, size_t len, void **handle,
                                     uint32_t *lkey, uint32_t *rkey);
typedef void (*ibDeregisterFn)(void *ctx, void *handle);

struct ibRegCache {
    struct ibReg *regs;
    int count;
    int capacity; /* most registrations kept; unused ones are dropped, oldest first */
    size_t pageBytes;
    uint64_t clock;
    ibRegisterFn reg;
    ibDeregisterFn dereg;
    void *ctx;
    uint64_t hits, misses; /* for the tests and the INFO line */
};

/* Prepares an empty cache of at most `capacity` registrations. */
loomResult_t ibRegCacheInit(struct ibRegCache *c, int capacity, size_t pageBytes, ibRegisterFn reg,
                            ibDeregisterFn dereg, void *ctx);
/*
 * A registration covering [addr, addr + len): an existing one if any covers
 * it, else a new one of the whole pages around it (dropping the least
 * recently used unreferenced registration if the cache is full). Takes a
 * reference; *out stays valid until ibRegCacheRelease. loomInternalError
 * when the cache is full of referenced registrations.
 */
loomResult_t ibRegCacheGet(struct ibRegCache *c, void *addr, size_t len, struct ibReg **out);
/* Drops the reference Get took; the registration stays cached. */
void ibRegCacheRelease(struct ibRegCache *c, struct ibReg *r);
/* Deregisters everything and frees the cache. */
void ibRegCacheDestroy(struct ibRegCache *c);

#endif /* LOOM_NET_IB_UTIL_H_ */
