/*
 * Exercises a net plugin through hccl/hccl_net.h exactly as libhccl uses it: dlopen, the entry
 * point, init, then two processes (listener and connector, handle passed through a pipe) that
 * exchange tagged messages and RMA writes, checking every byte, plus calls with bad arguments
 * that must fail cleanly.
 *
 * Usage: net_plugin PLUGIN.so [expect-no-device]
 * Exit status 0 when every check passed; every failed check prints one line.
 */
#define _POSIX_C_SOURCE 200809L
#include "hccl/hccl_net.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const hcclNetPlugin_v1_t *P;
static int failures;
static int rank; /* 0 listens, 1 connects */
static char log_seen[4096];

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s\n", rank, __FILE__,       \
                    __LINE__, #cond);                                                   \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

#define MUST(call)                                                                      \
    do {                                                                                \
        hcclNetResult_t rc_ = (call);                                                   \
        if (rc_ != HCCL_NET_SUCCESS) {                                                  \
            fprintf(stderr, "rank %d: %s:%d: %s returned %d\n", rank, __FILE__,         \
                    __LINE__, #call, (int)rc_);                                         \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static void on_log(void *ctx, int level, const char *msg)
{
    (void)ctx;
    if (level <= HCCL_NET_LOG_INFO && strlen(log_seen) + strlen(msg) + 2 < sizeof(log_seen)) {
        strcat(log_seen, msg);
        strcat(log_seen, "\n");
    }
    if (getenv("NET_PLUGIN_TEST_VERBOSE"))
        fprintf(stderr, "rank %d [%d] %s\n", rank, level, msg);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A hang guard only: every wait below normally ends in milliseconds. */
#define DEADLINE_S 120.0

static void fail_timeout(const char *what)
{
    fprintf(stderr, "rank %d: timed out waiting for %s\n", rank, what);
    exit(1);
}

/* Waits for a request; returns the plugin's final result and the bytes. */
static hcclNetResult_t wait_req(void *req, size_t *bytes)
{
    double end = now() + DEADLINE_S;
    int done = 0;
    while (now() < end) {
        hcclNetResult_t rc = P->test(req, &done, bytes);
        if (rc != HCCL_NET_SUCCESS || done)
            return rc;
    }
    fail_timeout("a request");
    return HCCL_NET_E_INTERNAL;
}

/* Posts with retries while the plugin answers HCCL_NET_AGAIN. */
#define POST(expr)                                                                      \
    do {                                                                                \
        double end_ = now() + DEADLINE_S;                                               \
        hcclNetResult_t rc_;                                                            \
        while ((rc_ = (expr)) == HCCL_NET_AGAIN && now() < end_)                        \
            ;                                                                           \
        if (rc_ != HCCL_NET_SUCCESS) {                                                  \
            fprintf(stderr, "rank %d: %s:%d: %s returned %d\n", rank, __FILE__,         \
                    __LINE__, #expr, (int)rc_);                                         \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

static unsigned char pattern(int from, size_t size, size_t i, int salt)
{
    return (unsigned char)(i * 131u + size * 7u + (unsigned)from * 29u + (unsigned)salt * 17u + (i >> 8));
}

static void fill(unsigned char *b, size_t n, int from, int salt)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(from, n, i, salt);
}

static int check_bytes(const unsigned char *b, size_t n, int from, int salt)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(from, n, i, salt)) {
            fprintf(stderr, "rank %d: byte %zu of %zu differs (salt %d)\n", rank, i, n, salt);
            return 0;
        }
    return 1;
}

static void *bogus[] = {(void *)1, (void *)0x1000, (void *)-1, (void *)&failures};

/* Calls with bad arguments before init and after. */
static void bad_arguments_before_init(void)
{
    int n = -1;
    hcclNetConfig_t bad = {300, HCCL_NET_UNSET};
    CHECK(P->devices(&n) == HCCL_NET_E_NOT_INITIALIZED);
    CHECK(P->init(&bad, on_log, NULL) == HCCL_NET_E_INVALID);
    bad.trafficClass = HCCL_NET_UNSET;
    bad.serviceLevel = 16;
    CHECK(P->init(&bad, on_log, NULL) == HCCL_NET_E_INVALID);
    CHECK(P->devices(&n) == HCCL_NET_E_NOT_INITIALIZED);
}

static void bad_arguments_after_init(int ndev)
{
    hcclNetProperties_t props;
    hcclNetHandle_t h;
    void *x = NULL;
    int flag = 0;
    uint32_t imm = 0;
    size_t bytes = 0;
    char buf[8];
    hcclNetMrDesc_t d;

    CHECK(P->devices(NULL) == HCCL_NET_E_INVALID);
    CHECK(P->getProperties(-1, &props) == HCCL_NET_E_INVALID);
    CHECK(P->getProperties(ndev, &props) == HCCL_NET_E_INVALID);
    CHECK(P->getProperties(0, NULL) == HCCL_NET_E_INVALID);
    CHECK(P->listen(ndev, &h, &x) == HCCL_NET_E_INVALID);
    CHECK(P->listen(0, NULL, &x) == HCCL_NET_E_INVALID);
    CHECK(P->listen(0, &h, NULL) == HCCL_NET_E_INVALID);
    /* A handle that is not one. */
    memset(&h, 0xa5, sizeof(h));
    CHECK(P->connect(0, &h, &x) == HCCL_NET_E_INVALID);
    memset(&h, 0, sizeof(h));
    CHECK(P->connect(0, &h, &x) == HCCL_NET_E_INVALID);
    CHECK(P->connect(0, NULL, &x) == HCCL_NET_E_INVALID);
    for (size_t i = 0; i < sizeof(bogus) / sizeof(bogus[0]) + 1; i++) {
        void *b = i < sizeof(bogus) / sizeof(bogus[0]) ? bogus[i] : NULL;
        CHECK(P->accept(b, &x) == HCCL_NET_E_INVALID);
        CHECK(P->closeListen(b) == HCCL_NET_E_INVALID);
        CHECK(P->connectTest(b, &flag) == HCCL_NET_E_INVALID);
        CHECK(P->regMr(b, buf, sizeof(buf), &x) == HCCL_NET_E_INVALID);
        CHECK(P->deregMr(b) == HCCL_NET_E_INVALID);
        CHECK(P->getMrDesc(b, &d) == HCCL_NET_E_INVALID);
        CHECK(P->isend(b, buf, sizeof(buf), 1, NULL, &x) == HCCL_NET_E_INVALID);
        CHECK(P->irecv(b, buf, sizeof(buf), 1, NULL, &x) == HCCL_NET_E_INVALID);
        CHECK(P->iwrite(b, buf, sizeof(buf), NULL, &d, 0, 1, &x) == HCCL_NET_E_INVALID);
        CHECK(P->pollImm(b, &imm, &flag) == HCCL_NET_E_INVALID);
        CHECK(P->test(b, &flag, &bytes) == HCCL_NET_E_INVALID);
        CHECK(P->closeComm(b) == HCCL_NET_E_INVALID);
    }
}

/* Calls with bad arguments on a live comm; the comm must stay usable afterwards. */
static void bad_arguments_on_comm(void *comm, void *lc, int flags)
{
    char buf[64];
    void *req = NULL, *mh = NULL;
    hcclNetMrDesc_t d;
    int flag;
    uint32_t imm;

    CHECK(P->isend(comm, NULL, 8, 1, NULL, &req) == HCCL_NET_E_INVALID);
    CHECK(P->irecv(comm, NULL, 8, 1, NULL, &req) == HCCL_NET_E_INVALID);
    CHECK(P->isend(comm, buf, 8, 1, NULL, NULL) == HCCL_NET_E_INVALID);
    CHECK(P->connectTest(comm, NULL) == HCCL_NET_E_INVALID);
    CHECK(P->pollImm(comm, NULL, &flag) == HCCL_NET_E_INVALID);
    CHECK(P->pollImm(comm, &imm, NULL) == HCCL_NET_E_INVALID);
    CHECK(P->test(NULL, &flag, NULL) == HCCL_NET_E_INVALID);
    /* Handles of the wrong kind. */
    CHECK(P->isend(lc, buf, 8, 1, NULL, &req) == HCCL_NET_E_INVALID);
    CHECK(P->accept(comm, &req) == HCCL_NET_E_INVALID);
    CHECK(P->test(comm, &flag, NULL) == HCCL_NET_E_INVALID);
    CHECK(P->regMr(comm, NULL, 8, &mh) == HCCL_NET_E_INVALID);
    CHECK(P->regMr(comm, buf, 0, &mh) == HCCL_NET_E_INVALID);
    CHECK(P->regMr(comm, buf, 8, NULL) == HCCL_NET_E_INVALID);
    MUST(P->regMr(comm, buf + 16, 16, &mh));
    CHECK(P->isend(comm, mh, 8, 1, comm, &req) == HCCL_NET_E_INVALID); /* comm as mhandle */
    /* Buffers outside the registration they name. */
    CHECK(P->isend(comm, buf, 8, 1, mh, &req) == HCCL_NET_E_INVALID);
    CHECK(P->irecv(comm, buf + 24, 16, 1, mh, &req) == HCCL_NET_E_INVALID);
    CHECK(P->irecv(comm, buf + 16, 17, 1, mh, &req) == HCCL_NET_E_INVALID);
    CHECK(P->irecv(comm, (void *)-8, 16, 1, mh, &req) == HCCL_NET_E_INVALID);
    if (flags & HCCL_NET_FLAG_RMA) {
        MUST(P->getMrDesc(mh, &d));
        CHECK(d.size == 16);
        CHECK(P->getMrDesc(mh, NULL) == HCCL_NET_E_INVALID);
        CHECK(P->iwrite(comm, buf + 16, 8, mh, NULL, 0, 1, &req) == HCCL_NET_E_INVALID);
        CHECK(P->iwrite(comm, buf + 16, 8, mh, &d, 9, 1, &req) == HCCL_NET_E_INVALID);
        CHECK(P->iwrite(comm, buf + 16, 8, mh, &d, UINT64_MAX - 2, 1, &req) == HCCL_NET_E_INVALID);
    } else {
        CHECK(P->iwrite(comm, buf + 16, 8, mh, &d, 0, 1, &req) == HCCL_NET_E_NOT_SUPPORTED);
    }
    MUST(P->deregMr(mh));
    CHECK(P->deregMr(mh) == HCCL_NET_E_INVALID);
    CHECK(P->getMrDesc(mh, &d) == HCCL_NET_E_INVALID);
    CHECK(P->isend(comm, buf + 16, 8, 1, mh, &req) == HCCL_NET_E_INVALID);
}

/* Tagged messages of many sizes, both directions, bit-checked. */
static void exchange(void *comm, int flags, size_t max_msg)
{
    static const size_t sizes[] = {0, 1, 8, 4095, 65536, (1u << 20) + 3, (8u << 20) + 7};
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    int peer = 1 - rank;
    for (size_t k = 0; k < n; k++) {
        size_t s = sizes[k];
        if (s + 1 > max_msg) {
            /* Above the device's largest message: refused, not truncated or split. */
            unsigned char one = 0;
            void *req = NULL;
            CHECK(P->isend(comm, &one, s, (uint32_t)k, NULL, &req) == HCCL_NET_E_INVALID);
            continue;
        }
        unsigned char *out = malloc(s + 1), *in = malloc(s + 1);
        void *mo = NULL, *mi = NULL, *rs = NULL, *rr = NULL;
        size_t got = (size_t)-1, sent = (size_t)-1;
        fill(out, s, rank, (int)k);
        memset(in, 0, s + 1);
        /* Registered buffers on odd sizes (required on devices that say so). */
        if ((k % 2 || (flags & HCCL_NET_FLAG_REG_REQUIRED)) && s > 0) {
            MUST(P->regMr(comm, out, s, &mo));
            MUST(P->regMr(comm, in, s + 1, &mi));
        }
        /* One byte more room than the message: the reported size is the message's. */
        POST(P->irecv(comm, in, s + 1, (uint32_t)k, mi, &rr));
        POST(P->isend(comm, out, s, (uint32_t)k, mo, &rs));
        CHECK(wait_req(rs, &sent) == HCCL_NET_SUCCESS);
        CHECK(wait_req(rr, &got) == HCCL_NET_SUCCESS);
        CHECK(sent == s);
        CHECK(got == s);
        CHECK(check_bytes(in, s, peer, (int)k));
        CHECK(in[s] == 0);
        /* A finished request is gone. */
        CHECK(P->test(rr, &(int){0}, NULL) == HCCL_NET_E_INVALID);
        if (mo) {
            MUST(P->deregMr(mo));
            MUST(P->deregMr(mi));
        }
        free(out);
        free(in);
    }
}

/* Messages of one tag match in order; different tags match by tag, not by order (with
 * HCCL_NET_FLAG_IN_ORDER: all messages match in order). */
static void ordering(void *comm, int flags)
{
    uint64_t out[4], in[4] = {0};
    void *rs[4], *rr[4];
    int peer = 1 - rank;
    for (int i = 0; i < 4; i++)
        out[i] = 1000u * (unsigned)rank + (unsigned)i;
    /* Sends go 20, 20, 21, 21; receives of tag 21 are posted before those of tag 20 unless
     * the device matches in order. */
    if (flags & HCCL_NET_FLAG_IN_ORDER) {
        for (int i = 0; i < 4; i++)
            POST(P->irecv(comm, &in[i], 8, i < 2 ? 20 : 21, NULL, &rr[i]));
    } else {
        POST(P->irecv(comm, &in[2], 8, 21, NULL, &rr[2]));
        POST(P->irecv(comm, &in[3], 8, 21, NULL, &rr[3]));
        POST(P->irecv(comm, &in[0], 8, 20, NULL, &rr[0]));
        POST(P->irecv(comm, &in[1], 8, 20, NULL, &rr[1]));
    }
    for (int i = 0; i < 4; i++)
        POST(P->isend(comm, &out[i], 8, i < 2 ? 20 : 21, NULL, &rs[i]));
    for (int i = 0; i < 4; i++) {
        CHECK(wait_req(rs[i], NULL) == HCCL_NET_SUCCESS);
        CHECK(wait_req(rr[i], NULL) == HCCL_NET_SUCCESS);
        CHECK(in[i] == 1000u * (unsigned)peer + (unsigned)i);
    }
}

/* isendHead: one message of a head and the data behind it, received as if joined; the head is
 * the caller's again once the call returns. Refused with bad heads, and where registration is
 * required. */
static void send_head(void *comm, int flags, size_t max_msg)
{
    unsigned char head[HCCL_NET_HEAD_BYTES], *data = malloc(300000), *in = malloc(300064);
    void *rs, *rr, *req = NULL;
    size_t got = 0;
    int peer = 1 - rank;
    CHECK(P->structSize >= offsetof(hcclNetPlugin_v1_t, isendHead) + sizeof(P->isendHead));
    CHECK(P->isendHead != NULL);
    if (flags & HCCL_NET_FLAG_REG_REQUIRED) {
        CHECK(P->isendHead(comm, head, 8, data, 8, 60, NULL, &req) == HCCL_NET_E_NOT_SUPPORTED);
        free(data);
        free(in);
        return;
    }
    CHECK(P->isendHead(comm, NULL, 8, data, 8, 60, NULL, &req) == HCCL_NET_E_INVALID);
    CHECK(P->isendHead(comm, head, 0, data, 8, 60, NULL, &req) == HCCL_NET_E_INVALID);
    CHECK(P->isendHead(comm, head, HCCL_NET_HEAD_BYTES + 1, data, 8, 60, NULL, &req) ==
          HCCL_NET_E_INVALID);
    CHECK(P->isendHead(NULL, head, 8, data, 8, 60, NULL, &req) == HCCL_NET_E_INVALID);
    for (size_t size = 0; size <= 300000 && size + HCCL_NET_HEAD_BYTES <= max_msg;
         size = size ? size * 10 : 3) {
        fill(head, sizeof(head), rank, 11);
        fill(data, size, rank, 12);
        memset(in, 0, 300064);
        POST(P->irecv(comm, in, sizeof(head) + size, 60, NULL, &rr));
        POST(P->isendHead(comm, head, sizeof(head), data, size, 60, NULL, &rs));
        memset(head, 0, sizeof(head)); /* copied during the call */
        CHECK(wait_req(rs, NULL) == HCCL_NET_SUCCESS);
        CHECK(wait_req(rr, &got) == HCCL_NET_SUCCESS);
        CHECK(got == sizeof(head) + size);
        CHECK(check_bytes(in, sizeof(head), peer, 11));
        CHECK(check_bytes(in + sizeof(head), size, peer, 12));
    }
    free(data);
    free(in);
}

/* HCCL_NET_FLAG_IN_ORDER: a receive that meets a message of another tag fails with INVALID,
 * and the comm is over. */
static void tag_mismatch(void *comm)
{
    uint64_t out = 5, in = 0;
    void *rs, *rr, *req = NULL;
    POST(P->irecv(comm, &in, 8, 50, NULL, &rr));
    POST(P->isend(comm, &out, 8, 51, NULL, &rs));
    CHECK(wait_req(rr, NULL) == HCCL_NET_E_INVALID);
    CHECK(in == 0 || in == 5);
    (void)wait_req(rs, NULL);
    CHECK(P->irecv(comm, &in, 8, 51, NULL, &req) == HCCL_NET_E_REMOTE);
}

/* A receive shorter than the message fails with TRUNCATED, and the comm is over: later calls
 * fail instead of hanging or delivering. */
static void truncation(void *comm)
{
    unsigned char big[100], small[10];
    void *rs, *rr, *req = NULL;
    fill(big, sizeof(big), rank, 77);
    POST(P->irecv(comm, small, sizeof(small), 30, NULL, &rr));
    POST(P->isend(comm, big, sizeof(big), 30, NULL, &rs));
    CHECK(wait_req(rr, NULL) == HCCL_NET_E_TRUNCATED);
    CHECK(P->test(rr, &(int){0}, NULL) == HCCL_NET_E_INVALID);
    /* The sender's side of a truncated message is the provider's business: success or error. */
    (void)wait_req(rs, NULL);
    CHECK(P->isend(comm, big, 8, 31, NULL, &req) == HCCL_NET_E_REMOTE);
    CHECK(P->irecv(comm, small, 8, 31, NULL, &req) == HCCL_NET_E_REMOTE);
}

/* Each side registers a region, sends its descriptor, and the peer writes into it. */
static void rma(void *comm, size_t max_msg)
{
    const size_t region = 1u << 20, off = 4096;
    const size_t len = max_msg < (256u << 10) + 5 ? max_msg - 3 : (256u << 10) + 5;
    unsigned char *mine = malloc(region), *src = malloc(len);
    void *mh, *ms, *rs, *rr, *rw;
    hcclNetMrDesc_t local, remote;
    uint32_t imm = 0;
    int got = 0;
    int peer = 1 - rank;

    memset(mine, 0xee, region);
    fill(src, len, rank, 5);
    MUST(P->regMr(comm, mine, region, &mh));
    MUST(P->regMr(comm, src, len, &ms));
    MUST(P->getMrDesc(mh, &local));
    CHECK(local.size == region);
    POST(P->irecv(comm, &remote, sizeof(remote), 40, NULL, &rr));
    POST(P->isend(comm, &local, sizeof(local), 40, NULL, &rs));
    CHECK(wait_req(rs, NULL) == HCCL_NET_SUCCESS);
    CHECK(wait_req(rr, NULL) == HCCL_NET_SUCCESS);
    POST(P->iwrite(comm, src, len, ms, &remote, off, 0xabc00000u + (uint32_t)rank, &rw));
    CHECK(wait_req(rw, NULL) == HCCL_NET_SUCCESS);
    double end = now() + DEADLINE_S;
    while (!got && now() < end)
        MUST(P->pollImm(comm, &imm, &got));
    if (!got)
        fail_timeout("immediate data");
    CHECK(imm == 0xabc00000u + (uint32_t)peer);
    CHECK(check_bytes(mine + off, len, peer, 5));
    for (size_t i = 0; i < region; i++)
        if ((i < off || i >= off + len) && mine[i] != 0xee) {
            fprintf(stderr, "rank %d: byte %zu outside the write changed\n", rank, i);
            failures++;
            break;
        }
    MUST(P->pollImm(comm, &imm, &got));
    CHECK(got == 0);
    /* Both sides finish reading before either deregisters. */
    uint64_t token = 1, back = 0;
    POST(P->irecv(comm, &back, 8, 41, NULL, &rr));
    POST(P->isend(comm, &token, 8, 41, NULL, &rs));
    CHECK(wait_req(rs, NULL) == HCCL_NET_SUCCESS);
    CHECK(wait_req(rr, NULL) == HCCL_NET_SUCCESS);
    MUST(P->deregMr(mh));
    MUST(P->deregMr(ms));
    free(mine);
    free(src);
}

/* Listener (rank 0) and connector (rank 1) meet; the handle travels through the pipe. Both
 * return with a listen comm (the connector's only serves the wrong-kind checks). */
static void *connect_pair(int fd_in, int fd_out, void **lc)
{
    hcclNetHandle_t handle;
    void *comm = NULL;
    int connected = 0;
    double end = now() + DEADLINE_S;
    if (rank == 0) {
        MUST(P->listen(0, &handle, lc));
        if (write(fd_out, &handle, sizeof(handle)) != (ssize_t)sizeof(handle))
            exit(1);
        while (!comm && now() < end)
            MUST(P->accept(*lc, &comm));
        if (!comm)
            fail_timeout("accept");
        MUST(P->connectTest(comm, &connected));
        CHECK(connected == 1);
    } else {
        if (read(fd_in, &handle, sizeof(handle)) != (ssize_t)sizeof(handle))
            exit(1);
        MUST(P->connect(0, &handle, &comm));
        while (!connected && now() < end)
            MUST(P->connectTest(comm, &connected));
        if (!connected)
            fail_timeout("connect");
        hcclNetHandle_t unused;
        MUST(P->listen(0, &unused, lc));
    }
    return comm;
}

static int run_rank(const char *path, int fd_in, int fd_out)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    hcclNetPluginGetFn_t get;
    *(void **)&get = dlsym(lib, HCCL_NET_PLUGIN_SYMBOL);
    if (!get) {
        fprintf(stderr, "no %s in %s\n", HCCL_NET_PLUGIN_SYMBOL, path);
        return 1;
    }
    P = get();
    CHECK(P != NULL);
    CHECK(P->version == HCCL_NET_PLUGIN_VERSION);
    CHECK(P->structSize >= sizeof(hcclNetPlugin_v1_t));
    CHECK(strcmp(P->name, "ofi") == 0);

    bad_arguments_before_init();
    hcclNetConfig_t cfg = {HCCL_NET_UNSET, HCCL_NET_UNSET};
    MUST(P->init(&cfg, on_log, NULL));
    CHECK(P->init(NULL, NULL, NULL) == HCCL_NET_SUCCESS); /* again: the first result */
    int ndev = 0;
    MUST(P->devices(&ndev));
    CHECK(ndev >= 1);
    hcclNetProperties_t props;
    MUST(P->getProperties(0, &props));
    CHECK(props.provider[0] != '\0' && props.fabric[0] != '\0' && props.name[0] != '\0');
    CHECK(props.maxMessageBytes >= (16u << 10));
    CHECK(props.serviceLevel == HCCL_NET_UNSET && props.trafficClass == HCCL_NET_UNSET);
    CHECK(strstr(log_seen, "provider ") != NULL && strstr(log_seen, "fabric ") != NULL);
    CHECK(strstr(log_seen, props.provider) != NULL);
    if (rank == 0)
        printf("device 0: provider %s, fabric %s, interface %s, flags %#x\n", props.provider,
               props.fabric, props.name, props.flags);
    bad_arguments_after_init(ndev);

    void *lc = NULL;
    void *comm = connect_pair(fd_in, fd_out, &lc);
    bad_arguments_on_comm(comm, lc, (int)props.flags);
    exchange(comm, (int)props.flags, (size_t)props.maxMessageBytes);
    ordering(comm, (int)props.flags);
    send_head(comm, (int)props.flags, (size_t)props.maxMessageBytes);
    if (props.flags & HCCL_NET_FLAG_RMA)
        rma(comm, (size_t)props.maxMessageBytes);
    else
        printf("rank %d: RMA not offered by %s: skipped\n", rank, props.provider);
    truncation(comm);
    MUST(P->closeComm(comm));
    MUST(P->closeListen(lc));

    /* A second connection, after the first one's failure, works as the first did. */
    comm = connect_pair(fd_in, fd_out, &lc);
    exchange(comm, (int)props.flags, (size_t)props.maxMessageBytes);

    /* A receive left pending is abandoned by close; its handle dies with the comm. */
    char spare[8];
    void *pending = NULL;
    POST(P->irecv(comm, spare, sizeof(spare), 99, NULL, &pending));
    MUST(P->closeComm(comm));
    CHECK(P->closeComm(comm) == HCCL_NET_E_INVALID);
    CHECK(P->test(pending, &(int){0}, NULL) == HCCL_NET_E_INVALID);
    CHECK(P->isend(comm, spare, 8, 1, NULL, &pending) == HCCL_NET_E_INVALID);
    MUST(P->closeListen(lc));
    CHECK(P->closeListen(lc) == HCCL_NET_E_INVALID);

    if (props.flags & HCCL_NET_FLAG_IN_ORDER) {
        comm = connect_pair(fd_in, fd_out, &lc);
        tag_mismatch(comm);
        MUST(P->closeComm(comm));
        MUST(P->closeListen(lc));
    }
    return failures ? 1 : 0;
}

/* Only init: the plugin must answer NO_DEVICE (e.g. FI_PROVIDER names an absent provider). */
static int run_no_device(const char *path)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    hcclNetPluginGetFn_t get;
    int n = 0;
    if (!lib)
        return 1;
    *(void **)&get = dlsym(lib, HCCL_NET_PLUGIN_SYMBOL);
    P = get();
    CHECK(P->init(NULL, on_log, NULL) == HCCL_NET_E_NO_DEVICE);
    CHECK(P->devices(&n) == HCCL_NET_E_NO_DEVICE);
    CHECK(P->listen(0, &(hcclNetHandle_t){{0}}, &(void *){NULL}) == HCCL_NET_E_NO_DEVICE);
    printf("%s", log_seen);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    int to_child[2], to_parent[2], status = 0;
    pid_t pid;
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN.so [expect-no-device]\n", argv[0]);
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "expect-no-device") == 0)
        return run_no_device(argv[1]);
    if (pipe(to_child) != 0 || pipe(to_parent) != 0)
        return 1;
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        rank = 1;
        alarm(300); /* hang guard */
        _exit(run_rank(argv[1], to_child[0], to_parent[1]));
    }
    rank = 0;
    alarm(300);
    int rc = run_rank(argv[1], to_parent[0], to_child[1]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "connector process failed (status %#x)\n", status);
        rc = 1;
    }
    if (rc == 0)
        printf("net plugin test passed\n");
    return rc;
}
