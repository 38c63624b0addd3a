/*
 * toolcomm.c — how a Loom tool joins its job's communicator (see toolcomm.h).
 *
 * Compiled into each tool that runs as a job; with LOOM_TOOLS_MPI (configure
 * found Open MPI's mpicc) it can bootstrap through MPI. MPI is started only
 * when a launcher's variables say the process runs under one and Loom's own
 * variables are absent, so the same binary still runs under loomrun, by
 * hand (loom-info) or with LOOM_ROOT_ADDR under mpirun, without MPI.
 *
 * Started by hand with no launcher at all (none of Loom's, MPI's, PMIx's or
 * Slurm's rank variables), a tool is a job of one rank, as an nccl-tests
 * binary started as one process is: it makes its own unique id and a 1-rank
 * communicator, rather than stopping with loomCommInitFromEnv's error.
 */
#include "toolcomm.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef LOOM_TOOLS_MPI
#include <mpi.h>
#endif

static int mpiStarted, alone;

static int envSet(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0';
}

/*
 * No launcher started this process: none of the variables loomCommInitFromEnv
 * reads to find the job (the rank variables of launch.c's table and Loom's
 * own rendezvous) is set.
 */
static int noLauncher(void)
{
    static const char *const vars[] = {
        "LOOM_UNIQUE_ID", "LOOM_ROOT_ADDR", "LOOM_RANK", "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",      "SLURM_PROCID",   "PMI_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        if (envSet(vars[i])) {
            return 0;
        }
    }
    return 1;
}

/* A job of one rank: this process makes the unique id and is rank 0 of 1. */
static loomResult_t aloneJoin(const char *tool, loomComm_t *comm)
{
    loomUniqueId id;
    loomResult_t res = loomGetUniqueId(&id);
    if (res == loomSuccess) {
        res = loomCommInitRank(comm, 1, id, 0);
    }
    if (res != loomSuccess) {
        fprintf(stderr, "%s: cannot create a 1-rank communicator: %s: %s\n", tool,
                loomGetErrorString(res), loomGetLastError(NULL));
    }
    alone = res == loomSuccess;
    return res;
}

#ifdef LOOM_TOOLS_MPI

static int underMpiLauncher(void)
{
    if (envSet("LOOM_UNIQUE_ID") || envSet("LOOM_ROOT_ADDR"))
        return 0;
    return envSet("OMPI_COMM_WORLD_SIZE") || envSet("PMIX_RANK") || envSet("PMI_RANK");
}

static loomResult_t mpiJoin(int *argc, char ***argv, const char *tool, loomComm_t *comm)
{
    int rank, size;
    loomUniqueId id;
    loomResult_t res = loomSuccess;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "%s: MPI_Init failed\n", tool);
        return loomSystemError;
    }
    mpiStarted = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0)
        res = loomGetUniqueId(&id);
    /* Rank 0 broadcasts its result too, so a failure there stops everyone. */
    MPI_Bcast(&res, (int)sizeof(res), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (res != loomSuccess) {
        if (rank == 0)
            fprintf(stderr, "%s: loomGetUniqueId failed: %s\n", tool, loomGetLastError(NULL));
        return res;
    }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    res = loomCommInitRank(comm, size, id, rank);
    if (res != loomSuccess)
        fprintf(stderr, "%s: rank %d of %d cannot join the communicator: %s: %s\n", tool, rank,
                size, loomGetErrorString(res), loomGetLastError(NULL));
    return res;
}
#endif

loomResult_t toolCommInit(int *argc, char ***argv, const char *tool, loomComm_t *comm)
{
#ifdef LOOM_TOOLS_MPI
    if (underMpiLauncher())
        return mpiJoin(argc, argv, tool, comm);
#else
    (void)argc;
    (void)argv;
#endif
    if (noLauncher()) {
        return aloneJoin(tool, comm);
    }
    loomResult_t res = loomCommInitFromEnv(comm);
    if (res != loomSuccess)
        fprintf(stderr, "%s: cannot join the communicator: %s: %s\n", tool, loomGetErrorString(res),
                loomGetLastError(NULL));
    return res;
}

const char *toolCommHow(void)
{
    if (alone) {
        return "no launcher (a job of one rank)";
    }
    return mpiStarted ? "MPI_Bcast of the unique id" : "loomCommInitFromEnv";
}

void toolCommFinalize(void)
{
#ifdef LOOM_TOOLS_MPI
    if (mpiStarted)
        MPI_Finalize();
#endif
    mpiStarted = alone = 0;
}
