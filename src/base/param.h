/*
 * param.h — the table of environment parameters.
 *
 * Every tunable of Loom is one row of the table in param.c: name, type,
 * default, help. The table is read from the environment once (paramInit, on
 * first use); a bad value gives a WARN naming the variable and the default is
 * kept. Nothing else in Loom calls getenv() for a LOOM_* setting.
 */
#ifndef LOOM_PARAM_H_
#define LOOM_PARAM_H_

#include <stdint.h>

typedef enum {
    LOOM_PARAM_DEBUG = 0,       /* string: NONE WARN INFO TRACE */
    LOOM_PARAM_DEBUG_SUBSYS,    /* string: comma list */
    LOOM_PARAM_DEBUG_FILE,      /* string */
    LOOM_PARAM_ALGO,            /* string */
    LOOM_PARAM_NCHANNELS,       /* int */
    LOOM_PARAM_BUFFSIZE,        /* int (bytes) */
    LOOM_PARAM_TIMEOUT,         /* int (seconds) */
    LOOM_PARAM_SHM_DISABLE,     /* int 0/1 */
    LOOM_PARAM_P2P_DISABLE,     /* int 0/1 */
    LOOM_PARAM_NET,             /* string */
    LOOM_PARAM_SOCKET_IFNAME,   /* string */
    LOOM_PARAM_IB_HCA,          /* string */
    LOOM_PARAM_HOSTID,          /* string */
    LOOM_PARAM_SPIN,            /* int: spin iterations before yielding */
    LOOM_PARAM_CUDA_LIB,        /* string: the CUDA driver library to load */
    LOOM_PARAM_IB_DISABLE,      /* int 0/1 */
    LOOM_PARAM_IB_GID_INDEX,    /* int */
    LOOM_PARAM_SOCKET_NSOCKS,   /* int: TCP sockets per connection */
    LOOM_PARAM_SOCKET_NTHREADS, /* int: helper threads moving large TCP messages */
    LOOM_PARAM_NET_TLS,         /* int 0/1: TLS 1.3 on every TCP connection */
    LOOM_PARAM_ROOT_ADDR,       /* string: host:port of the rendezvous (loomCommInitFromEnv) */
    LOOM_PARAM_CMA_DISABLE,     /* int 0/1: no single-copy collectives (process_vm_readv) */
    LOOM_PARAM_CMA_MIN_BYTES,   /* int: smallest collective that runs single-copy */
    LOOM_PARAM_CONNECT_ALL,     /* int 0/1: connect every peer pair at init */
    LOOM_PARAM_EXECUTOR,        /* string: kernel, host, auto */
    LOOM_PARAM_PROTO,           /* string: Simple, LL */
    LOOM_PARAM_KERNEL_THREADS,  /* int: threads of a block of the kernel executor on the CPU */
    LOOM_PARAM_IB_TC,           /* int: InfiniBand traffic class (RoCE: DSCP << 2) */
    LOOM_PARAM_IB_SL,           /* int: InfiniBand service level */
    LOOM_PARAM_IB_TIMEOUT,      /* int: queue pair ACK timeout exponent */
    LOOM_PARAM_IB_RETRY_CNT,    /* int: queue pair retries */
    LOOM_PARAM_IB_MTU,          /* string: 256 .. 4096, unset: the port's */
    LOOM_PARAM_IB_QPS_PER_CONNECTION, /* int: queue pairs a connection stripes over */
    LOOM_PARAM_DUMP_DIR,              /* string: where failing ranks write their recorder */
    LOOM_PARAM_NET_COMPRESS,          /* string: none, bf16, bf16-sr */
    LOOM_PARAM_NUM
} loomParamId_t;

/* Reads the environment into the table (once; later calls do nothing). Thread safe. */
void paramInit(void);
/* Value of an integer parameter (paramInit is called if needed). */
int64_t paramInt(loomParamId_t id);
/* 1 if the parameter was taken from the environment (a valid value was set). */
int paramIsSet(loomParamId_t id);
/* Value of a string parameter, "" when unset and without default (never NULL). */
const char *paramStr(loomParamId_t id);

/*
 * Prints a warning about the configuration on stderr, with the log prefix,
 * whatever LOOM_DEBUG says (LOOM_DEBUG may itself be the bad setting). For
 * settings whose values are checked outside this table (LOOM_ALGO).
 */
void paramWarn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Parses `text` as an integer parameter value: decimal, optional K/M/G
 * suffix (powers of 1024) for sizes, within [min, max]. Returns 0 and
 * stores *out on success, -1 on a bad value. Exposed for the unit tests.
 */
int paramParseInt(const char *text, int64_t min, int64_t max, int64_t *out);

#endif /* LOOM_PARAM_H_ */
