/*
 * toolcomm.h — how a Loom tool joins its job's communicator.
 *
 * Started by mpirun (or srun with PMIx) and built with MPI: rank 0 of
 * MPI_COMM_WORLD creates the unique id and MPI_Bcast hands it to the
 * others. Otherwise, or when LOOM_UNIQUE_ID (loomrun) or LOOM_ROOT_ADDR is
 * set: loomCommInitFromEnv. Started by hand with no launcher's variables at
 * all: a communicator of one rank. Tools use only include/loom.h (and mpi.h).
 */
#ifndef LOOM_TOOLCOMM_H_
#define LOOM_TOOLCOMM_H_

#include "loom.h"

/*
 * Joins the communicator of all the job's ranks. On failure prints a line
 * naming `tool` and the reason to stderr and returns the error.
 */
loomResult_t toolCommInit(int *argc, char ***argv, const char *tool, loomComm_t *comm);
/*
 * How the tool joined: "MPI_Bcast of the unique id", "loomCommInitFromEnv" or
 * "no launcher (a job of one rank)".
 */
const char *toolCommHow(void);
/* Ends MPI if toolCommInit started it (call after loomCommDestroy). */
void toolCommFinalize(void);

#endif /* LOOM_TOOLCOMM_H_ */
