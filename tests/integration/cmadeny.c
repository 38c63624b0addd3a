/*
 * cmadeny.c — an LD_PRELOAD shim for tests/integration/cma.sh: makes
 * process_vm_readv and process_vm_writev fail with EPERM, as under Yama's
 * ptrace_scope >= 1 or a container's seccomp filter, in the ranks named by
 * CMADENY_RANKS (a list of LOOM_RANK values such as "1" or "0,2"; unset: all).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static int denied(void)
{
    const char *ranks = getenv("CMADENY_RANKS"), *me = getenv("LOOM_RANK");
    if (ranks == NULL || *ranks == '\0')
        return 1;
    if (me == NULL)
        return 0;
    size_t len = strlen(me);
    for (const char *p = ranks; *p; p++) {
        if ((p == ranks || p[-1] == ',') && strncmp(p, me, len) == 0 &&
            (p[len] == ',' || p[len] == '\0'))
            return 1;
    }
    return 0;
}

static ssize_t refuse(void)
{
    errno = EPERM;
    return -1;
}

ssize_t process_vm_readv(pid_t pid, const struct iovec *local, unsigned long liovcnt,
                         const struct iovec *remote, unsigned long riovcnt, unsigned long flags)
{
    if (denied())
        return refuse();
    return syscall(SYS_process_vm_readv, pid, local, liovcnt, remote, riovcnt, flags);
}

ssize_t process_vm_writev(pid_t pid, const struct iovec *local, unsigned long liovcnt,
                          const struct iovec *remote, unsigned long riovcnt, unsigned long flags)
{
    if (denied())
        return refuse();
    return syscall(SYS_process_vm_writev, pid, local, liovcnt, remote, riovcnt, flags);
}
