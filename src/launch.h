/*
 * launch.h — who this process is in its job, as its launcher says
 * (loomrun, Open MPI's mpirun, Slurm's srun, another PMIx or PMI launcher).
 */
#ifndef LOOM_LAUNCH_H_
#define LOOM_LAUNCH_H_

#include "loom.h"

struct launchIdentity {
    int rank;
    int nranks;
    int localRank;      /* -1 when the launcher does not say */
    const char *source; /* "loomrun", "Open MPI", "PMIx", "Slurm", "PMI" */
    char job[128];      /* the launcher's job id ("" if none): tells jobs apart */
};

/*
 * Reads the first complete set of launcher variables (see launch.c).
 * Returns loomInvalidUsage, naming the variables looked for, when there is
 * none, and loomInvalidArgument for a value that is not a rank or a count
 * or a rank not below the count.
 */
loomResult_t launchIdentify(struct launchIdentity *out);

#endif /* LOOM_LAUNCH_H_ */
