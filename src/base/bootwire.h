/*
 * bootwire.h — what bootstrap.c needs of the message coding in bootwire.c
 * beyond the coders bootstrap.h exports for the tests.
 */
#ifndef LOOM_BOOTWIRE_H_
#define LOOM_BOOTWIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"

/* Largest communicator the rendezvous accepts (the table is 20 bytes a rank). */
#define BOOTSTRAP_MAX_RANKS (1 << 20)

/* 1 if a and b are the same address. */
int bootwireAddrSame(const struct bootstrapAddr *a, const struct bootstrapAddr *b);
/* "ip:port" (or "[v6]:port") of a, into buf. */
void bootwireAddrFormat(const struct bootstrapAddr *a, char *buf, size_t len);
/* Kinds of unique id: loomGetUniqueId's, loomCommGetUniqueId's. */
#define BOOTWIRE_ID_INIT 0
#define BOOTWIRE_ID_GROW 1
/* bootstrapEncodeId for an id of either kind. */
size_t bootwireIdEncodeKind(const struct bootstrapId *id, int kind, loomUniqueId *out);
/* NULL, or why `in` is not a unique id this library made, of either kind (*kind, *id on NULL). */
const char *bootwireIdDecodeKind(const loomUniqueId *in, int *kind, struct bootstrapId *id);
/* NULL, or why `in` is not a unique id this library made (*id is set only on NULL). */
const char *bootwireIdDecode(const loomUniqueId *in, struct bootstrapId *id);
/* NULL, or why buf is not the table of nranks addresses (the bad rank, or -1, in *bad). */
const char *bootwireTableDecode(const uint8_t *buf, size_t len, int nranks,
                                struct bootstrapAddr *addrs, int *bad);

#endif /* LOOM_BOOTWIRE_H_ */
