/*
 * tuner.h — choosing how a collective runs: the decision record.
 *
 * The plan (plan.c) asks tunerChoose for every operation; the answer, one
 * struct loomTuning, says everything about how the call runs: algorithm,
 * chunk, channels, protocol, executor and whether its single copies go
 * through loomMemAlloc mappings. Algorithm, chunk and channels come from an
 * alpha-beta cost model (tuner.c) within what LOOM_ALGO allows, evaluated
 * once per communicator for every collective and power-of-two size class
 * when it is built (tunerInit); the executor, the protocol and when the
 * ranks ask about mappings come from what the communicator has and the
 * settings (LOOM_EXECUTOR, LOOM_PROTO, LOOM_ALGO, LOOM_CMA_MIN_BYTES) read
 * then too. So a call, the first of its size too, only looks its decision
 * up, and nothing below the tuner reads a setting to route a call.
 * loomTuningGet exposes the same model to tools.
 */
#ifndef LOOM_TUNER_H_
#define LOOM_TUNER_H_

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "executor.h"
#include "schedule.h"

/* A decision for one call: everything that says how it runs. */
struct loomTuning {
    loomAlgo_t algo;
    size_t chunkBytes;  /* largest piece one step moves: <= the slot (LL: LOOM_LL_BYTES) */
    int nChannels;      /* lanes the call is cut into, 1 .. comm->nChannels */
    int trees;          /* tree: 2 splits each lane over both trees, 1 uses the first only */
    double predictedUs; /* the model's time for the call (-1: not the model's choice) */
    int proto;          /* LOOM_PROTO_* (src/device/interp.h): LL only where the interpreter runs */
    int executor;       /* LOOM_EXECUTOR_* (src/exec/executor.h) */
    int mapped; /* 1: single copies through loomMemAlloc mappings (tunerChooseMapped), asked anew
                 * at every call, so not a plan to repeat without asking */
};

/* What the model needs to know about a communicator. */
struct loomTuneShape {
    int nranks;
    int nHosts;         /* hosts the ranks are on (0 or 1: one); the others cross the network */
    const int *hostOf;  /* [nranks] each rank's host, or NULL: hosts filled in rank order */
    int localRanks;     /* ranks on the host with the most ranks per CPU */
    int cpus;           /* CPUs those ranks may use between them */
    size_t slotBytes;   /* connector slot size: the largest chunk */
    int nChannels;      /* channels the communicator has */
    int channelsSet;    /* 1: LOOM_NCHANNELS was set, so all of them are used */
    int cmaOk;          /* single copies possible (comm->cmaOk, host buffers) */
    size_t cmaMinBytes; /* and allowed from this size (LOOM_CMA_MIN_BYTES) */
};

/* Size classes: class k holds the sizes [2^k, 2^(k+1)) bytes (0 and 1 byte: class 0). */
#define LOOM_TUNE_CLASSES 48 /* the last holds everything from 128 TiB */

/*
 * A communicator's tuner (comm->tuner): the shape the model sees, the same
 * on every rank, and its decision for each collective and size class,
 * evaluated at the class's smallest size, on host buffers ([0]) and device
 * buffers ([1]). `logged` marks the (collective, class) pairs whose
 * decision was logged. Written at init, read by the thread that plans.
 */
struct loomTunerState {
    struct loomTuneShape shape;
    int executor[2];   /* LOOM_EXECUTOR_* of host ([0]) and device ([1]) buffers */
    size_t llMaxBytes; /* LL up to this size where the interpreter runs (SIZE_MAX: always) */
    int ll;            /* 0: never LL (the interpreter does not run, or LOOM_PROTO=Simple) */
    size_t askMinBytes[LOOM_COLL_NUM]; /* tunerAsksMapped: from this size; SIZE_MAX: never */
    struct loomTuning table[2][LOOM_COLL_NUM][LOOM_TUNE_CLASSES];
    /* 1: LOOM_ALGO allows none of the algorithms coll has at that size */
    unsigned char fellBack[2][LOOM_COLL_NUM][LOOM_TUNE_CLASSES];
    _Atomic uint64_t logged[LOOM_COLL_NUM];
};

/*
 * Builds comm->tuner from the communicator's shape (ranks, hosts, CPUs,
 * slot size, single copies), which must be final, and from which executors
 * serve it (served[LOOM_EXECUTOR_*]: what each one's serves said; init.c
 * asks them). loomSystemError when out of memory; comm->tuner is then NULL.
 */
loomResult_t tunerInit(struct loomComm *comm, const int served[LOOM_EXECUTOR_NUM]);
/* Frees comm->tuner (NULL is fine). */
void tunerFree(struct loomComm *comm);

/*
 * 1 if LOOM_EXECUTOR asks for the kernel executor (read once per process):
 * init then sets it up (src/exec/kexec.c), where every link is shared memory.
 */
int tunerKernelWanted(void);

/*
 * The executor (LOOM_EXECUTOR_*) of comm's calls on host (device 0) or
 * device buffers. A group takes it where all its communicators agree, else
 * the host-driven one of its buffers (plan.c).
 */
int tunerExecutor(const struct loomComm *comm, int device);

/*
 * Chooses for one call of `coll` moving `bytes` (count x element size, times
 * nranks for AllGather, ReduceScatter and AlltoAll) on comm, run by
 * `executor` (LOOM_EXECUTOR_*, the call's or its group's): the decision of
 * its size class, a table lookup. Logs the decision (TUNING) the first time
 * each (collective, size class) is met on comm. Never fails: without a
 * usable choice it falls back to the collective's only algorithm. On device
 * buffers (the CUDA executors) Reduce keeps to the ring (its tree needs host
 * scratch). The protocol is comm's, whatever the group: LL where comm's
 * calls run the interpreter and the size is small or LOOM_PROTO=LL (not for
 * AlltoAllv, whose size differs between ranks, unless forced), but never on
 * the host-driven CUDA executor, which has no lines.
 */
void tunerChoose(struct loomComm *comm, loomColl_t coll, size_t bytes, int executor,
                 struct loomTuning *out);

/*
 * The model itself, for a shape: the choice among the algorithms in
 * `allowed` (bits 1 << loomAlgo_t; 0 means what LOOM_ALGO allows for coll).
 * Returns 0, or -1 when no allowed algorithm implements coll (then *out
 * holds the collective's default algorithm).
 */
int tunerModel(const struct loomTuneShape *shape, loomColl_t coll, size_t bytes, uint32_t allowed,
               struct loomTuning *out);

/* What LOOM_ALGO allows for coll when nothing narrower is asked (tunerChoose's). */
uint32_t tunerDefaultAllowed(loomColl_t coll);

/*
 * Whether the ranks ask each other, before an ungrouped host call of coll
 * moving bytes, whether every buffer its single copies would read is
 * loomMemAlloc memory (cmaAllMapped, src/exec/cma.c): for AllReduce,
 * ReduceScatter, AllGather, Broadcast and Reduce of at least 512 KiB and
 * LOOM_CMA_MIN_BYTES, where each rank has a core, unless LOOM_ALGO rules cma
 * out (or names it: then the tuner takes it anyway). Every rank of a call
 * decides alike. A lookup in what tunerInit worked out.
 */
int tunerAsksMapped(const struct loomComm *comm, loomColl_t coll, size_t bytes);

/*
 * tunerChoose's answer for a host call of coll moving bytes whose every
 * buffer is loomMemAlloc memory (the ranks asked, tunerAsksMapped): single
 * copies, through the mappings (mapped = 1). Logged (TUNING) as tunerChoose
 * logs.
 */
void tunerChooseMapped(struct loomComm *comm, loomColl_t coll, size_t bytes,
                       struct loomTuning *out);

/* 1 if LOOM_ALGO allows algo for coll. */
int tunerAllows(loomColl_t coll, loomAlgo_t algo);

/*
 * 1 if a call of coll whose every rank passes loomMemAlloc buffers may run
 * its single-copy schedule through the peers' mappings (src/exec/cma.c) although
 * LOOM_ALGO does not name cma: it is unset, or does not rule cma out for coll.
 */
int tunerZeroCopy(loomColl_t coll);

/*
 * Parses a LOOM_ALGO value (NCCL's syntax: "ring", "^tree", "tree,ring",
 * "allreduce:tree;broadcast:ring") into the algorithms allowed for each
 * collective (bits 1 << loomAlgo_t). Returns 0, or -1 with the reason in why
 * (allowed is then left with every algorithm). Exposed for the unit tests.
 */
int tunerParseAlgo(const char *spec, uint32_t allowed[LOOM_COLL_NUM], char *why, size_t whyLen);
/* The same, but with cma allowed by default for every collective: where it is
 * still allowed, tunerZeroCopy says yes. */
int tunerParseZeroCopy(const char *spec, uint32_t allowed[LOOM_COLL_NUM], char *why, size_t whyLen);

#endif /* LOOM_TUNER_H_ */
