/*
 * launch.c — loomCommInitFromEnv: join the job's communicator from what the
 * launcher put in the environment.
 *
 * loomrun hands every rank the unique id itself (LOOM_UNIQUE_ID). Open MPI's
 * mpirun, Slurm's srun and other launchers know nothing of Loom, so there
 * the user names the rendezvous instead: LOOM_ROOT_ADDR=host:port, the
 * address of the host where rank 0 runs. Rank 0 listens there; every rank
 * derives the same id from the address and the launcher's job id. Rank and
 * size come from the first complete set of these variables:
 *
 *   LOOM_RANK, LOOM_NRANKS, LOOM_LOCAL_RANK                           loomrun
 *   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK   mpirun
 *   PMIX_RANK with the size from OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or LOOM_NRANKS
 *   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID                         srun
 *   PMI_RANK, PMI_SIZE                                                MPICH's Hydra
 *
 * These variables are the job's identity, set by a launcher, not settings a
 * user tunes, so they are read here and not through the parameter table;
 * LOOM_ROOT_ADDR is a setting and comes from the table.
 *
 * Where the launcher runs a PMIx server (Open MPI's mpirun, srun
 * --mpi=pmix) and Loom was built with libpmix, no address is needed: rank 0
 * makes a unique id (random secret and all) and puts it in the job's
 * key-value store, a fence with data collection spreads it, and the other
 * ranks get it from there. LOOM_UNIQUE_ID, then LOOM_ROOT_ADDR, come first
 * when set.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#ifdef HAVE_PMIX
#include <pmix.h>
#endif

#include "bootstrap.h"
#include "debug.h"
#include "launch.h"
#include "param.h"

struct launchVars {
    const char *source;
    const char *rank;
    const char *size[3]; /* the first one set gives the size */
    const char *localRank;
};

static const struct launchVars launchers[] = {
    {"loomrun", "LOOM_RANK", {"LOOM_NRANKS"}, "LOOM_LOCAL_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"}, "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMIx", "PMIX_RANK", {"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "LOOM_NRANKS"}, NULL},
    {"Slurm", "SLURM_PROCID", {"SLURM_NTASKS"}, "SLURM_LOCALID"},
    {"PMI", "PMI_RANK", {"PMI_SIZE"}, NULL},
};

static const char *envGet(const char *name)
{
    const char *v = name ? getenv(name) : NULL;
    return v && *v ? v : NULL;
}

static loomResult_t envCount(const char *name, const char *v, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < 0 || x > 1 << 24)
        return loomSetError(loomInvalidArgument,
                            "loomCommInitFromEnv: %s=%s is not a rank or a rank count", name, v);
    *out = (int)x;
    return loomSuccess;
}

/* The launcher's job id, so that two jobs using one LOOM_ROOT_ADDR do not mix. */
static void launchJob(char *job, size_t len)
{
    const char *ns = envGet("PMIX_NAMESPACE"), *ompi = envGet("OMPI_MCA_ess_base_jobid");
    const char *slurm = envGet("SLURM_JOB_ID"), *step = envGet("SLURM_STEP_ID");
    if (ns)
        snprintf(job, len, "pmix:%s", ns);
    else if (ompi)
        snprintf(job, len, "ompi:%s", ompi);
    else if (slurm)
        snprintf(job, len, "slurm:%s.%s", slurm, step ? step : "");
    else
        job[0] = '\0';
}

loomResult_t launchIdentify(struct launchIdentity *out)
{
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
        const struct launchVars *l = &launchers[i];
        const char *rank = envGet(l->rank), *sizeName = NULL, *size = NULL;
        for (int k = 0; k < 3 && size == NULL; k++)
            if ((size = envGet(l->size[k])) != NULL)
                sizeName = l->size[k];
        if (rank != NULL) /* a malformed rank is named even when its size is missing */
            LOOMCHECK(envCount(l->rank, rank, &out->rank));
        if (rank == NULL || size == NULL)
            continue;
        LOOMCHECK(envCount(sizeName, size, &out->nranks));
        if (out->nranks < 1 || out->rank >= out->nranks)
            return loomSetError(loomInvalidArgument,
                                "loomCommInitFromEnv: %s=%s is not a rank of %s=%s", l->rank, rank,
                                sizeName, size);
        const char *local = envGet(l->localRank);
        out->localRank = -1;
        if (local && envCount(l->localRank, local, &out->localRank) != loomSuccess)
            out->localRank = -1;
        out->source = l->source;
        launchJob(out->job, sizeof(out->job));
        return loomSuccess;
    }
    return loomSetError(loomInvalidUsage,
                        "loomCommInitFromEnv: no launcher variables (LOOM_RANK/LOOM_NRANKS from "
                        "loomrun, OMPI_COMM_WORLD_RANK/SIZE from mpirun, PMIX_RANK, "
                        "SLURM_PROCID/SLURM_NTASKS from srun, PMI_RANK/PMI_SIZE); start the "
                        "program with loomrun -n N, mpirun or srun");
}

static int hexValue(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static loomResult_t idFromHex(const char *hex, loomUniqueId *id)
{
    if (strlen(hex) != 2 * sizeof(id->internal))
        return loomSetError(loomInvalidUsage,
                            "loomCommInitFromEnv: LOOM_UNIQUE_ID is malformed; expected %zu hex "
                            "digits as loomrun sets it",
                            2 * sizeof(id->internal));
    for (size_t i = 0; i < sizeof(id->internal); i++) {
        int hi = hexValue(hex[2 * i]), lo = hexValue(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return loomSetError(loomInvalidArgument,
                                "loomCommInitFromEnv: LOOM_UNIQUE_ID has a non-hex character at "
                                "%zu",
                                2 * i + (hi < 0 ? 0 : 1));
        id->internal[i] = (char)(hi << 4 | lo);
    }
    return loomSuccess;
}

#ifdef HAVE_PMIX
#define PMIX_ID_KEY "loom.uniqueid"

static loomResult_t pmixFailed(const char *call, pmix_status_t rc)
{
    return loomSetError(loomSystemError, "loomCommInitFromEnv: %s: %s", call,
                        PMIx_Error_string(rc));
}

/* Rank 0 makes the id and puts it in the store; a fence with data collection spreads it. */
static loomResult_t pmixExchange(const pmix_proc_t *me, loomUniqueId *id)
{
    pmix_value_t val;
    pmix_info_t info;
    bool collect = true;
    pmix_status_t rc;
    if (me->rank == 0) {
        LOOMCHECK(bootstrapGetUniqueId(id));
        PMIX_VALUE_CONSTRUCT(&val);
        val.type = PMIX_BYTE_OBJECT;
        val.data.bo.bytes = id->internal;
        val.data.bo.size = sizeof(id->internal);
        if ((rc = PMIx_Put(PMIX_GLOBAL, PMIX_ID_KEY, &val)) != PMIX_SUCCESS)
            return pmixFailed("PMIx_Put", rc);
        if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
            return pmixFailed("PMIx_Commit", rc);
    }
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS)
        return pmixFailed("PMIx_Fence", rc);
    if (me->rank == 0)
        return loomSuccess;
    pmix_proc_t root;
    pmix_value_t *got = NULL;
    PMIX_LOAD_PROCID(&root, me->nspace, 0);
    if ((rc = PMIx_Get(&root, PMIX_ID_KEY, NULL, 0, &got)) != PMIX_SUCCESS)
        return loomSetError(loomSystemError,
                            "loomCommInitFromEnv: rank %u found no unique id from rank 0 in the "
                            "PMIx store (%s); is rank 0 a Loom program too?",
                            me->rank, PMIx_Error_string(rc));
    int ok = got->type == PMIX_BYTE_OBJECT && got->data.bo.size == sizeof(id->internal);
    if (ok)
        memcpy(id->internal, got->data.bo.bytes, sizeof(id->internal));
    PMIX_VALUE_RELEASE(got);
    if (!ok)
        return loomSetError(loomSystemError,
                            "loomCommInitFromEnv: the PMIx store holds something else under \"%s\"",
                            PMIX_ID_KEY);
    return loomSuccess;
}

/* Under a PMIx launcher, the id through its store: *found 1 then. */
static loomResult_t pmixUniqueId(const struct launchIdentity *l, loomUniqueId *id, int *found)
{
    pmix_proc_t me;
    *found = 0;
    if (envGet("PMIX_NAMESPACE") == NULL || envGet("PMIX_RANK") == NULL)
        return loomSuccess;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return pmixFailed("PMIx_Init", rc);
    loomResult_t res = loomSuccess;
    if ((int)me.rank != l->rank)
        res = loomSetError(loomInvalidUsage,
                           "loomCommInitFromEnv: PMIx says rank %u, %s says rank %d; set "
                           "LOOM_ROOT_ADDR to join by address instead",
                           me.rank, l->source, l->rank);
    if (res == loomSuccess)
        res = pmixExchange(&me, id);
    PMIx_Finalize(NULL, 0);
    *found = res == loomSuccess;
    return res;
}
#else
static loomResult_t pmixUniqueId(const struct launchIdentity *l, loomUniqueId *id, int *found)
{
    (void)l, (void)id;
    *found = 0;
    return loomSuccess;
}
#endif

loomResult_t loomCommInitFromEnv(loomComm_t *comm)
{
    struct launchIdentity me;
    loomUniqueId id;
    debugInit();
    if (comm == NULL)
        return loomSetError(loomInvalidArgument, "loomCommInitFromEnv: comm is NULL");
    LOOMCHECK(launchIdentify(&me));
    const char *hex = envGet("LOOM_UNIQUE_ID");
    const char *rootAddr = paramStr(LOOM_PARAM_ROOT_ADDR);
    int pmix = 0;
    if (hex != NULL) {
        LOOMCHECK(idFromHex(hex, &id));
    } else if (rootAddr[0] != '\0') {
        LOOMCHECK(bootstrapRootAddrId(rootAddr, me.job, me.rank == 0, &id));
    } else {
        LOOMCHECK(pmixUniqueId(&me, &id, &pmix));
        if (!pmix)
            return loomSetError(loomInvalidUsage,
                                "loomCommInitFromEnv: rank %d of %d (from %s) has no "
                                "LOOM_UNIQUE_ID (loomrun sets it), no LOOM_ROOT_ADDR and no PMIx "
                                "server to ask (%s); under mpirun or srun set "
                                "LOOM_ROOT_ADDR=host:port, an address of the host where rank 0 "
                                "runs",
                                me.rank, me.nranks, me.source,
#ifdef HAVE_PMIX
                                "PMIX_NAMESPACE is unset"
#else
                                "this Loom was built without libpmix"
#endif
            );
    }
    INFO(LOOM_INIT, "rank %d of %d (local rank %d) from %s%s%s", me.rank, me.nranks, me.localRank,
         me.source,
         hex    ? ""
         : pmix ? ", unique id from rank 0 through PMIx"
                : ", rendezvous at LOOM_ROOT_ADDR=",
         hex || pmix ? "" : rootAddr);
    return loomCommInitRankConfig(comm, me.nranks, id, me.rank, NULL);
}
