/*
 * mem.h — loomMemAlloc blocks seen from peers: what a single-copy offer says
 * about the memory it points into, and the views a reader maps of it.
 */
#ifndef LOOM_MEM_H
#define LOOM_MEM_H

#include <stddef.h>
#include <stdint.h>

struct loomComm;

/*
 * What an OFFER step writes in its FIFO slot. `addr` comes first and is the
 * only field written after publication: withdrawOffers (exec.c) zeroes it,
 * and a PUSH claims it (LOOM_OFFER_CLAIMED) before it writes, so that a
 * sender that withdraws waits for a write already under way. The rest say
 * whether the elements lie in a loomMemAlloc block of the sender, so that
 * the peer can map that block and copy with plain loads and stores instead
 * of process_vm_readv and process_vm_writev.
 */
#define LOOM_OFFER_CLAIMED (1ULL << 63) /* above every user-space address */
struct loomOffer {
    uint64_t addr;     /* the sender's elements; 0 once withdrawn */
    int64_t memFd;     /* the sender's descriptor of the block holding them, or -1 */
    uint64_t memDev;   /* that block's device and inode numbers: the reader checks what it */
    uint64_t memIno;   /* opened */
    uint64_t memOff;   /* addr's offset in the block */
    uint64_t memBytes; /* the block's size */
    uint64_t memGen;   /* the sender's count of loomMemFree calls so far */
};

/* An offer travels in one FIFO slot, at least 64 bytes (LOOM_BUFFSIZE >= 512, 8 slots). */
_Static_assert(sizeof(struct loomOffer) <= 64, "a single-copy offer must fit the smallest slot");

/* Fills o for `bytes` at p: its address, and its block when p..p+bytes lies in one. */
void memOfferFill(const void *p, size_t bytes, struct loomOffer *o);

/*
 * The first byte of the offered elements (`bytes` of them) in this
 * process's view of the peer's block, mapped on first use and kept per
 * communicator; NULL when the offer names no block, the block cannot be
 * mapped, or `write` asks for a view that could only be mapped read-only
 * (the caller then uses process_vm_readv / writev). Call memPeerSeen with
 * the offer's memGen first: this never drops a view, so the views one call
 * gathers stay mapped while it uses them.
 */
char *memPeerView(struct loomComm *comm, int peer, const struct loomOffer *o, size_t bytes,
                  int write);

/* Drops the views of the peer's blocks made before its loomMemFree count became `gen`. */
void memPeerSeen(struct loomComm *comm, int peer, uint64_t gen);

/* Unmaps every view the communicator holds (communicator teardown). */
void memPeerViewsFree(struct loomComm *comm);

#endif
