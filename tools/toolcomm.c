/*
 * toolcomm.c — how a Loom tool joins its job's communicator (see toolcomm.h).
 *
 * Compiled into each tool that runs as a job; with LOOM_TOOLS_MPI (configure
 * found Open MPI's mpicc) it can bootstrap through MPI. MPI is started only
 * when a launcher's variables say the process runs under one and Loom's own
 * variables are absent, so the same binary still runs under loomrun, by
 * hand (loom-info) or with LOOM_ROOT_ADDR under mpirun, without MPI.
 */
#include "toolcomm.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef LOOM_TOOLS_MPI
#include <mpi.h>
#endif

static int mpiStarted;

#ifdef LOOM_TOOLS_MPI
static int envSet(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0';
}

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
    loomResult_t res = loomCommInitFromEnv(comm);
    if (res != loomSuccess)
        fprintf(stderr, "%s: cannot join the communicator: %s: %s\n", tool, loomGetErrorString(res),
                loomGetLastError(NULL));
    return res;
}

const char *toolCommHow(void)
{
    return mpiStarted ? "MPI_Bcast of the unique id" : "loomCommInitFromEnv";
}

void toolCommFinalize(void)
{
#ifdef LOOM_TOOLS_MPI
    if (mpiStarted)
        MPI_Finalize();
#endif
    mpiStarted = 0;
}
