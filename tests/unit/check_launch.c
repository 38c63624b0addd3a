/*
 * check_launch.c — who a process is, from its launcher's variables
 * (launch.c), and the unique id derived from LOOM_ROOT_ADDR (bootstrap.c).
 *
 * Each test runs in its own forked child (main forces fork mode): a fixture
 * clears every launcher variable there, and the test sets what it needs.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch.h"

static const char *const launcherVars[] = {"LOOM_RANK",
                                           "LOOM_NRANKS",
                                           "LOOM_LOCAL_RANK",
                                           "LOOM_UNIQUE_ID",
                                           "LOOM_ROOT_ADDR",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_MCA_ess_base_jobid",
                                           "PMIX_RANK",
                                           "PMIX_NAMESPACE",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_JOB_ID",
                                           "SLURM_STEP_ID",
                                           "PMI_RANK",
                                           "PMI_SIZE"};

static void clearLauncher(void)
{
    for (size_t i = 0; i < sizeof(launcherVars) / sizeof(launcherVars[0]); i++)
        unsetenv(launcherVars[i]);
}

START_TEST(loomrun_variables)
{
    struct launchIdentity me;
    setenv("LOOM_RANK", "2", 1);
    setenv("LOOM_NRANKS", "4", 1);
    setenv("LOOM_LOCAL_RANK", "1", 1);
    ck_assert_int_eq(launchIdentify(&me), loomSuccess);
    ck_assert_int_eq(me.rank, 2);
    ck_assert_int_eq(me.nranks, 4);
    ck_assert_int_eq(me.localRank, 1);
    ck_assert_str_eq(me.source, "loomrun");
}
END_TEST

START_TEST(open_mpi_variables)
{
    struct launchIdentity me;
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("PMIX_RANK", "5", 1);
    setenv("PMIX_NAMESPACE", "prterun-h1-123@1", 1);
    ck_assert_int_eq(launchIdentify(&me), loomSuccess);
    ck_assert_int_eq(me.rank, 5);
    ck_assert_int_eq(me.nranks, 6);
    ck_assert_int_eq(me.localRank, 1);
    ck_assert_str_eq(me.source, "Open MPI");
    ck_assert_str_eq(me.job, "pmix:prterun-h1-123@1");
}
END_TEST

START_TEST(slurm_variables)
{
    struct launchIdentity me;
    setenv("SLURM_PROCID", "7", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "3", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    ck_assert_int_eq(launchIdentify(&me), loomSuccess);
    ck_assert_int_eq(me.rank, 7);
    ck_assert_int_eq(me.nranks, 8);
    ck_assert_int_eq(me.localRank, 3);
    ck_assert_str_eq(me.source, "Slurm");
    ck_assert_str_eq(me.job, "slurm:4242.0");
}
END_TEST

START_TEST(pmix_rank_takes_size_elsewhere)
{
    struct launchIdentity me;
    setenv("PMIX_RANK", "1", 1);
    ck_assert_int_eq(launchIdentify(&me), loomInvalidUsage); /* no size anywhere */
    setenv("SLURM_NTASKS", "3", 1);
    ck_assert_int_eq(launchIdentify(&me), loomSuccess);
    ck_assert_int_eq(me.rank, 1);
    ck_assert_int_eq(me.nranks, 3);
    ck_assert_int_eq(me.localRank, -1);
    ck_assert_str_eq(me.source, "PMIx");
}
END_TEST

START_TEST(loomrun_comes_first)
{
    struct launchIdentity me;
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    setenv("LOOM_RANK", "1", 1);
    setenv("LOOM_NRANKS", "2", 1);
    ck_assert_int_eq(launchIdentify(&me), loomSuccess);
    ck_assert_int_eq(me.rank, 1);
    ck_assert_str_eq(me.source, "loomrun");
}
END_TEST

START_TEST(bad_values_are_rejected)
{
    struct launchIdentity me;
    ck_assert_int_eq(launchIdentify(&me), loomInvalidUsage);
    setenv("SLURM_PROCID", "4", 1);
    setenv("SLURM_NTASKS", "4", 1);
    ck_assert_int_eq(launchIdentify(&me), loomInvalidArgument); /* rank not below size */
    setenv("SLURM_PROCID", "x1", 1);
    ck_assert_int_eq(launchIdentify(&me), loomInvalidArgument);
    setenv("SLURM_PROCID", "-1", 1);
    ck_assert_int_eq(launchIdentify(&me), loomInvalidArgument);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "0", 1);
    ck_assert_int_eq(launchIdentify(&me), loomInvalidArgument);
}
END_TEST

/* ---- ids from LOOM_ROOT_ADDR ---- */

START_TEST(root_addr_id_is_shared_and_job_specific)
{
    loomUniqueId a, b, c;
    struct bootstrapId da, dc;
    ck_assert_int_eq(bootstrapRootAddrId("10.1.2.3:29500", "ompi:7", 0, &a), loomSuccess);
    ck_assert_int_eq(bootstrapRootAddrId("10.1.2.3:29500", "ompi:7", 0, &b), loomSuccess);
    ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0);
    ck_assert_int_eq(bootstrapDecodeId(&a, &da), loomSuccess);
    ck_assert_int_eq(da.root.family, 4);
    ck_assert_int_eq(da.root.port, 29500);
    ck_assert_int_eq(da.root.ip[0], 10);
    ck_assert_int_eq(da.root.ip[3], 3);
    ck_assert_int_eq(bootstrapRootAddrId("10.1.2.3:29500", "ompi:8", 0, &c), loomSuccess);
    ck_assert_int_eq(bootstrapDecodeId(&c, &dc), loomSuccess);
    ck_assert_int_ne(memcmp(da.secret, dc.secret, sizeof(da.secret)), 0);
}
END_TEST

START_TEST(root_addr_forms)
{
    loomUniqueId id;
    struct bootstrapId d;
    ck_assert_int_eq(bootstrapRootAddrId("[::1]:80", "", 0, &id), loomSuccess);
    ck_assert_int_eq(bootstrapDecodeId(&id, &d), loomSuccess);
    ck_assert_int_eq(d.root.family, 6);
    ck_assert_int_eq(d.root.ip[15], 1);
    ck_assert_int_eq(bootstrapRootAddrId("localhost:65535", NULL, 0, &id), loomSuccess);
    static const char *const bad[] = {"10.1.2.3",        "10.1.2.3:",      ":29500",
                                      "10.1.2.3:0",      "10.1.2.3:65536", "10.1.2.3:12x",
                                      "nohost.invalid:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(bootstrapRootAddrId(bad[i], "", 0, &id) == loomInvalidArgument, "%s accepted",
                      bad[i]);
}
END_TEST

START_TEST(root_addr_root_listens_once)
{
    loomUniqueId a, b;
    char addr[32];
    /* A port of our own, most likely free: the test may run beside other test runs. */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", 20000 + (int)getpid() % 20000);
    ck_assert_int_eq(bootstrapRootAddrId("127.0.0.1:0", "", 1, &a), loomInvalidArgument);
    ck_assert_int_eq(bootstrapRootAddrId(addr, "t", 1, &a), loomSuccess);
    /* The root listens on the port; a second root on the same port cannot. */
    ck_assert_int_eq(bootstrapRootAddrId(addr, "t", 1, &b), loomSystemError);
    ck_assert_int_eq(bootstrapRootAddrId(addr, "t", 0, &b), loomSuccess);
    ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0);
}
END_TEST

static void addTest(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, clearLauncher, NULL);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *launchSuite(void)
{
    Suite *s = suite_create("launch");
    addTest(s, "loomrun_variables", loomrun_variables);
    addTest(s, "open_mpi_variables", open_mpi_variables);
    addTest(s, "slurm_variables", slurm_variables);
    addTest(s, "pmix_rank_takes_size_elsewhere", pmix_rank_takes_size_elsewhere);
    addTest(s, "loomrun_comes_first", loomrun_comes_first);
    addTest(s, "bad_values_are_rejected", bad_values_are_rejected);
    addTest(s, "root_addr_id_is_shared_and_job_specific", root_addr_id_is_shared_and_job_specific);
    addTest(s, "root_addr_forms", root_addr_forms);
    addTest(s, "root_addr_root_listens_once", root_addr_root_listens_once);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(launchSuite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
