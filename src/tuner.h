/*
 * tuner.h — choosing how a collective runs: algorithm, chunk size, channels.
 *
 * The plan (plan.c) asks tunerChoose for every operation; the answer
 * comes from an alpha-beta cost model (tuner.c) within what LOOM_ALGO
 * allows, evaluated once per communicator for every collective and
 * power-of-two size class when it is built (tunerInit), so that a call,
 * the first of its size too, only looks its decision up. loomTuningGet
 * exposes the same model to tools.
 */
#ifndef LOOM_TUNER_H_
#define LOOM_TUNER_H_

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "schedule.h"

/* A decision for one call. */
struct loomTuning {
    loomAlgo_t algo;
    size_t chunkBytes;  /* largest piece one step moves: <= the connector slot */
    int nChannels;      /* lanes the call is cut into, 1 .. comm->nChannels */
    int trees;          /* tree: 2 splits each lane over both trees, 1 uses the first only */
    double predictedUs; /* the model's time for the call */
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
    struct loomTuning table[2][LOOM_COLL_NUM][LOOM_TUNE_CLASSES];
    /* 1: LOOM_ALGO allows none of the algorithms coll has at that size */
    unsigned char fellBack[2][LOOM_COLL_NUM][LOOM_TUNE_CLASSES];
    _Atomic uint64_t logged[LOOM_COLL_NUM];
};

/*
 * Builds comm->tuner from the communicator's shape (ranks, hosts, CPUs,
 * slot size, single copies), which must be final. loomSystemError when out
 * of memory; comm->tuner is then NULL.
 */
loomResult_t tunerInit(struct loomComm *comm);
/* Frees comm->tuner (NULL is fine). */
void tunerFree(struct loomComm *comm);

/*
 * Chooses for one call of `coll` moving `bytes` (count x element size, times
 * nranks for AllGather, ReduceScatter and AlltoAll) on comm: the decision of
 * its size class, a table lookup. Logs the decision (TUNING) the first time
 * each (collective, size class) is met on comm. Never fails: without a
 * usable choice it falls back to the collective's only algorithm. device:
 * the plan runs on device buffers (src/cuda), where Reduce keeps to the
 * ring (its tree needs host scratch).
 */
void tunerChoose(struct loomComm *comm, loomColl_t coll, size_t bytes, int device,
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
 * tunerChoose's answer for a host call of coll moving bytes whose every
 * buffer is loomMemAlloc memory (src/exec/cma.c asked): single copies, through
 * the mappings. Logged (TUNING) as tunerChoose logs.
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

/* Name of an algorithm ("ring", "tree", "direct", "cma"). */
const char *tunerAlgoName(loomAlgo_t algo);

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
