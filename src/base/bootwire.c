/*
 * bootwire.c — the bootstrap's messages on the wire: unique id, hello,
 * address table and ring frame, coded and checked byte by byte (bootstrap.c
 * sends and receives them; the unit tests and the fuzz target call the
 * coders directly).
 *
 * Wire formats. All integers big-endian; reserved bytes must be zero.
 *
 *   address (20 bytes): family(1: 4|6) 0(1) port(2) ip(16; IPv4 in ip[0..3], rest 0)
 *
 *   unique id (128):    "LMID"(4) version(2) kind(2) secret(32) root address(20)
 *                       FNV-1a-32 of bytes 0..59 (4) zeros(64)
 *   hello (64):         "LMH" version(1) secret(32) rank(4) nranks(4) listen address(20)
 *   table (root->rank): "LMT" version(1) nranks(4) then nranks addresses
 *   ring frame:         "LMAG"(4) collective number(4) length(8) then `length` bytes
 *
 * The kind of an id is 0 for loomGetUniqueId's (a communicator's root), 1
 * for loomCommGetUniqueId's (the meeting of a loomCommGrow, bootgrow.c).
 * The checksum in the id is not security (the secret is): it catches an id
 * cut short or mangled on its way through an environment variable or a file.
 * The collective number in each ring frame catches ranks that called
 * allgather and barrier a different number of times.
 */
#include <stdio.h>
#include <string.h>

#include "bootwire.h"
#include "socket.h"
#include "wire.h"

#define ID_MAGIC 0x4c4d4944u /* "LMID" */
#define ID_VERSION 1
#define ID_CHECKED_BYTES 60
#define ID_USED_BYTES 64
#define HELLO_VERSION 1
#define TABLE_VERSION 1
#define TABLE_HEADER_BYTES 8
#define FRAME_MAGIC 0x4c4d4147u /* "LMAG" */
#define ADDR_BYTES 20

static int allZero(const uint8_t *p, size_t len)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < len; i++)
        acc |= p[i];
    return acc == 0;
}

static uint32_t fnv1a(const uint8_t *p, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

static int addrValid(const struct bootstrapAddr *a)
{
    return (a->family == 4 || a->family == 6) && a->port != 0;
}

int bootwireAddrSame(const struct bootstrapAddr *a, const struct bootstrapAddr *b)
{
    size_t iplen = a->family == 4 ? 4 : 16;
    return a->family == b->family && a->port == b->port && memcmp(a->ip, b->ip, iplen) == 0;
}

static void addrEncode(const struct bootstrapAddr *a, uint8_t *p)
{
    memset(p, 0, ADDR_BYTES);
    p[0] = a->family;
    wirePut16(p + 2, a->port);
    memcpy(p + 4, a->ip, a->family == 4 ? 4 : 16);
}

/* Returns NULL, or why the bytes are not an address. */
static const char *addrDecode(const uint8_t *p, struct bootstrapAddr *a)
{
    if (p[0] != 4 && p[0] != 6)
        return "unknown address family";
    if (p[1] != 0 || (p[0] == 4 && !allZero(p + 8, 12)))
        return "reserved address bytes are set";
    if (wireGet16(p + 2) == 0)
        return "port 0";
    memset(a, 0, sizeof(*a));
    a->family = p[0];
    a->port = wireGet16(p + 2);
    memcpy(a->ip, p + 4, a->family == 4 ? 4 : 16);
    return NULL;
}

void bootwireAddrFormat(const struct bootstrapAddr *a, char *buf, size_t len)
{
    union socketAddress sa;
    if (socketAddrFromBootstrap(a, &sa) == loomSuccess)
        socketAddrFormat(&sa, buf, len);
    else
        snprintf(buf, len, "?");
}

static size_t idEncode(const struct bootstrapId *id, int kind, loomUniqueId *out)
{
    uint8_t buf[LOOM_UNIQUE_ID_BYTES];

    if (id == NULL || out == NULL || !addrValid(&id->root))
        return 0;
    memset(buf, 0, sizeof(buf));
    wirePut32(buf, ID_MAGIC);
    wirePut16(buf + 4, ID_VERSION);
    wirePut16(buf + 6, (uint16_t)kind);
    memcpy(buf + 8, id->secret, BOOTSTRAP_SECRET_BYTES);
    addrEncode(&id->root, buf + 40);
    wirePut32(buf + ID_CHECKED_BYTES, fnv1a(buf, ID_CHECKED_BYTES));
    memcpy(out->internal, buf, sizeof(buf));
    return LOOM_UNIQUE_ID_BYTES;
}

size_t bootstrapEncodeId(const struct bootstrapId *id, loomUniqueId *out)
{
    return idEncode(id, BOOTWIRE_ID_INIT, out);
}

size_t bootwireIdEncodeKind(const struct bootstrapId *id, int kind, loomUniqueId *out)
{
    return idEncode(id, kind, out);
}

const char *bootwireIdDecodeKind(const loomUniqueId *in, int *kind, struct bootstrapId *id)
{
    const uint8_t *p = (const uint8_t *)in->internal;
    struct bootstrapId tmp;

    if (wireGet32(p) != ID_MAGIC)
        return "not a Loom unique id (bad magic)";
    if (wireGet16(p + 4) != ID_VERSION)
        return "made by an incompatible Loom version";
    if (wireGet16(p + 6) > BOOTWIRE_ID_GROW ||
        !allZero(p + ID_USED_BYTES, LOOM_UNIQUE_ID_BYTES - ID_USED_BYTES))
        return "corrupt (reserved bytes are set)";
    if (wireGet32(p + ID_CHECKED_BYTES) != fnv1a(p, ID_CHECKED_BYTES))
        return "corrupt or truncated (checksum mismatch)";
    const char *why = addrDecode(p + 40, &tmp.root);
    if (why != NULL)
        return why;
    memcpy(tmp.secret, p + 8, BOOTSTRAP_SECRET_BYTES);
    *kind = wireGet16(p + 6);
    *id = tmp;
    return NULL;
}

/* Returns NULL, or why `in` is not a unique id this library made for a communicator's init. */
const char *bootwireIdDecode(const loomUniqueId *in, struct bootstrapId *id)
{
    int kind;
    struct bootstrapId tmp;
    const char *why = bootwireIdDecodeKind(in, &kind, &tmp);
    if (why != NULL)
        return why;
    if (kind != BOOTWIRE_ID_INIT)
        return "it is a grow id from loomCommGetUniqueId, for loomCommGrow (a new communicator "
               "takes an id from loomGetUniqueId)";
    *id = tmp;
    return NULL;
}

loomResult_t bootstrapDecodeId(const loomUniqueId *in, struct bootstrapId *id)
{
    if (in == NULL || id == NULL || bootwireIdDecode(in, id) != NULL)
        return loomInvalidArgument;
    return loomSuccess;
}

size_t bootstrapEncodeHello(const struct bootstrapHello *h, uint8_t *buf, size_t len)
{
    if (h == NULL || buf == NULL || len < BOOTSTRAP_HELLO_BYTES)
        return 0;
    memcpy(buf, "LMH", 3);
    buf[3] = HELLO_VERSION;
    memcpy(buf + 4, h->secret, BOOTSTRAP_SECRET_BYTES);
    wirePut32(buf + 36, (uint32_t)h->rank);
    wirePut32(buf + 40, (uint32_t)h->nranks);
    addrEncode(&h->addr, buf + 44);
    return BOOTSTRAP_HELLO_BYTES;
}

loomResult_t bootstrapDecodeHello(const uint8_t *buf, size_t len, struct bootstrapHello *h)
{
    struct bootstrapHello tmp;

    if (buf == NULL || h == NULL || len < BOOTSTRAP_HELLO_BYTES)
        return loomInvalidArgument;
    if (memcmp(buf, "LMH", 3) != 0 || buf[3] != HELLO_VERSION)
        return loomInvalidArgument;
    tmp.rank = (int32_t)wireGet32(buf + 36);
    tmp.nranks = (int32_t)wireGet32(buf + 40);
    if (tmp.nranks < 1 || tmp.nranks > BOOTSTRAP_MAX_RANKS || tmp.rank < 0 ||
        tmp.rank >= tmp.nranks)
        return loomInvalidArgument;
    if (addrDecode(buf + 44, &tmp.addr) != NULL)
        return loomInvalidArgument;
    memcpy(tmp.secret, buf + 4, BOOTSTRAP_SECRET_BYTES);
    *h = tmp;
    return loomSuccess;
}

size_t bootstrapTableBytes(int nranks)
{
    return TABLE_HEADER_BYTES + (size_t)nranks * ADDR_BYTES;
}

size_t bootstrapEncodeTable(const struct bootstrapAddr *addrs, int nranks, uint8_t *buf, size_t len)
{
    if (addrs == NULL || buf == NULL || nranks < 1 || nranks > BOOTSTRAP_MAX_RANKS ||
        len < bootstrapTableBytes(nranks))
        return 0;
    memcpy(buf, "LMT", 3);
    buf[3] = TABLE_VERSION;
    wirePut32(buf + 4, (uint32_t)nranks);
    for (int r = 0; r < nranks; r++)
        addrEncode(&addrs[r], buf + TABLE_HEADER_BYTES + (size_t)r * ADDR_BYTES);
    return bootstrapTableBytes(nranks);
}

/* Returns NULL, or why buf is not the table of nranks addresses (the rank is in *bad). */
const char *bootwireTableDecode(const uint8_t *buf, size_t len, int nranks,
                                struct bootstrapAddr *addrs, int *bad)
{
    *bad = -1;
    if (nranks < 1 || nranks > BOOTSTRAP_MAX_RANKS || len < TABLE_HEADER_BYTES)
        return "truncated header";
    if (memcmp(buf, "LMT", 3) != 0 || buf[3] != TABLE_VERSION ||
        wireGet32(buf + 4) != (uint32_t)nranks)
        return "malformed header";
    if (len != bootstrapTableBytes(nranks))
        return "wrong length";
    for (int r = 0; r < nranks; r++) {
        if (addrDecode(buf + TABLE_HEADER_BYTES + (size_t)r * ADDR_BYTES, &addrs[r]) != NULL) {
            *bad = r;
            return "malformed address";
        }
    }
    return NULL;
}

loomResult_t bootstrapDecodeTable(const uint8_t *buf, size_t len, int nranks,
                                  struct bootstrapAddr *addrs)
{
    int bad;
    if (buf == NULL || addrs == NULL || bootwireTableDecode(buf, len, nranks, addrs, &bad) != NULL)
        return loomInvalidArgument;
    return loomSuccess;
}

size_t bootstrapEncodeFrame(uint32_t seq, uint64_t bytes, uint8_t *buf, size_t len)
{
    if (buf == NULL || len < BOOTSTRAP_FRAME_BYTES)
        return 0;
    wirePut32(buf, FRAME_MAGIC);
    wirePut32(buf + 4, seq);
    wirePut64(buf + 8, bytes);
    return BOOTSTRAP_FRAME_BYTES;
}

loomResult_t bootstrapDecodeFrame(const uint8_t *buf, size_t len, uint32_t *seq, uint64_t *bytes)
{
    if (buf == NULL || seq == NULL || bytes == NULL || len < BOOTSTRAP_FRAME_BYTES ||
        wireGet32(buf) != FRAME_MAGIC)
        return loomInvalidArgument;
    *seq = wireGet32(buf + 4);
    *bytes = wireGet64(buf + 8);
    return loomSuccess;
}

int bootstrapSecretEqual(const uint8_t *a, const uint8_t *b)
{
    /* Accumulate every difference so the time taken says nothing about where they differ. */
    volatile uint8_t diff = 0;
    for (int i = 0; i < BOOTSTRAP_SECRET_BYTES; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}
