/*
 * Benchmark of a net plugin through hccl/hccl_net.h, between two processes (on one host or two):
 * 8-byte ping-pong latency and 64 MiB ping-pong bandwidth, with tagged messages and with RMA
 * writes + immediate data. Counted like fi_pingpong: a round trip is two transfers; bandwidth
 * is the bytes of both directions over the time.
 *
 * Usage: net_bench PLUGIN.so listen|connect HANDLE_FILE [latency_iters [bw_iters]]
 * The listener writes its handle to HANDLE_FILE (shared filesystem); the connector reads it.
 */
#define _POSIX_C_SOURCE 200809L
#include "hccl/hccl_net.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const hcclNetPlugin_v1_t *P;
static int server;
/* The device's largest message: larger transfers go in pieces of this size. */
static size_t max_msg;
/* Pieces in flight per direction. */
#define WINDOW 32

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "net_bench (%s): %s failed (%d)\n", server ? "listen" : "connect", what, rc);
    exit(1);
}

static void on_log(void *ctx, int level, const char *msg)
{
    (void)ctx;
    if (level <= HCCL_NET_LOG_WARN || getenv("NET_BENCH_VERBOSE"))
        fprintf(stderr, "%s\n", msg);
}

#define DEADLINE_S 300.0

static void wait2(void *a, void *b)
{
    void *r[2] = {a, b};
    double end = now() + DEADLINE_S;
    while ((r[0] || r[1]) && now() < end)
        for (int i = 0; i < 2; i++)
            if (r[i]) {
                int done = 0;
                int rc = P->test(r[i], &done, NULL);
                if (rc != HCCL_NET_SUCCESS)
                    die("test", rc);
                if (done)
                    r[i] = NULL;
            }
    if (r[0] || r[1])
        die("waiting (hang guard)", -1);
}

static void *post_send(void *comm, const void *buf, size_t n, uint32_t tag, void *mh)
{
    void *req = NULL;
    int rc;
    while ((rc = P->isend(comm, buf, n, tag, mh, &req)) == HCCL_NET_AGAIN)
        ;
    if (rc != HCCL_NET_SUCCESS)
        die("isend", rc);
    return req;
}

static void *post_recv(void *comm, void *buf, size_t n, uint32_t tag, void *mh)
{
    void *req = NULL;
    int rc;
    while ((rc = P->irecv(comm, buf, n, tag, mh, &req)) == HCCL_NET_AGAIN)
        ;
    if (rc != HCCL_NET_SUCCESS)
        die("irecv", rc);
    return req;
}

/* n bytes as pieces of at most max_msg, up to WINDOW in flight: receives (recv) or sends. */
static void pieces(void *comm, char *buf, size_t n, void *mh, int recv)
{
    void *req[WINDOW] = {0};
    size_t off = 0, k = 0;
    do {
        size_t len = n - off < max_msg ? n - off : max_msg;
        if (req[k % WINDOW])
            wait2(req[k % WINDOW], NULL);
        req[k % WINDOW] = recv ? post_recv(comm, buf + off, len, 1, mh)
                               : post_send(comm, buf + off, len, 1, mh);
        off += len;
        k++;
    } while (off < n);
    for (size_t i = 0; i < WINDOW; i++)
        if (req[i])
            wait2(req[i], NULL);
}

/* One tagged round trip: the listener sends first. */
static void tagged_round(void *comm, char *out, char *in, size_t n, void *mo, void *mi)
{
    if (n <= max_msg) {
        if (server) {
            void *r = post_recv(comm, in, n, 1, mi);
            wait2(post_send(comm, out, n, 1, mo), r);
        } else {
            void *r = post_recv(comm, in, n, 1, mi);
            wait2(r, NULL);
            wait2(post_send(comm, out, n, 1, mo), NULL);
        }
        return;
    }
    if (server) {
        pieces(comm, out, n, mo, 0);
        pieces(comm, in, n, mi, 1);
    } else {
        pieces(comm, in, n, mi, 1);
        pieces(comm, out, n, mo, 0);
    }
}

static void wait_imm(void *comm, size_t count)
{
    uint32_t imm;
    double end = now() + DEADLINE_S;
    while (count > 0 && now() < end) {
        int got = 0;
        int rc = P->pollImm(comm, &imm, &got);
        if (rc != HCCL_NET_SUCCESS)
            die("pollImm", rc);
        count -= (size_t)got;
    }
    if (count > 0)
        die("waiting for an immediate (hang guard)", -1);
}

/* n bytes written as pieces of at most max_msg (one immediate each), up to WINDOW in flight;
 * returns the number of pieces. */
static size_t write_pieces(void *comm, char *out, size_t n, void *mo, const hcclNetMrDesc_t *rd)
{
    void *req[WINDOW] = {0};
    size_t off = 0, k = 0;
    do {
        size_t len = n - off < max_msg ? n - off : max_msg;
        int rc;
        if (req[k % WINDOW])
            wait2(req[k % WINDOW], NULL);
        while ((rc = P->iwrite(comm, out + off, len, mo, rd, off, 7, &req[k % WINDOW])) ==
               HCCL_NET_AGAIN)
            ;
        if (rc != HCCL_NET_SUCCESS)
            die("iwrite", rc);
        off += len;
        k++;
    } while (off < n);
    for (size_t i = 0; i < WINDOW; i++)
        if (req[i])
            wait2(req[i], NULL);
    return k;
}

static void rma_round(void *comm, char *out, size_t n, void *mo, const hcclNetMrDesc_t *rd)
{
    size_t count = (n + max_msg - 1) / max_msg;
    if (count == 0)
        count = 1;
    if (server) {
        write_pieces(comm, out, n, mo, rd);
        wait_imm(comm, count);
    } else {
        wait_imm(comm, count);
        write_pieces(comm, out, n, mo, rd);
    }
}

static void report(const char *what, size_t n, int iters, double t)
{
    double xfers = 2.0 * iters;
    if (server)
        printf("plugin %-7s %9zu B  %6d round trips  %10.2f us/xfer  %10.2f MB/s\n", what, n,
               iters, t / xfers * 1e6, (double)n * xfers / t / 1e6);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s PLUGIN.so listen|connect HANDLE_FILE [lat_iters [bw_iters]]\n",
                argv[0]);
        return 2;
    }
    server = strcmp(argv[2], "listen") == 0;
    int lat_iters = argc > 4 ? atoi(argv[4]) : 2000;
    int bw_iters = argc > 5 ? atoi(argv[5]) : 5;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    hcclNetPluginGetFn_t get;
    *(void **)&get = dlsym(lib, HCCL_NET_PLUGIN_SYMBOL);
    P = get();
    int rc = P->init(NULL, on_log, NULL);
    if (rc)
        die("init", rc);
    hcclNetProperties_t props;
    if ((rc = P->getProperties(0, &props)))
        die("getProperties", rc);
    max_msg = props.maxMessageBytes < (64u << 20) ? (size_t)props.maxMessageBytes : (64u << 20);

    hcclNetHandle_t h;
    void *lc = NULL, *comm = NULL;
    double end = now() + DEADLINE_S;
    if (server) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", argv[3]);
        if ((rc = P->listen(0, &h, &lc)))
            die("listen", rc);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&h, sizeof(h), 1, f) != 1 || fclose(f) != 0 || rename(tmp, argv[3]))
            die("writing the handle file", -1);
        while (!comm && now() < end)
            if ((rc = P->accept(lc, &comm)))
                die("accept", rc);
        printf("plugin device 0: provider %s, fabric %s, interface %s\n", props.provider,
               props.fabric, props.name);
    } else {
        FILE *f = NULL;
        while (!(f = fopen(argv[3], "rb")) && now() < end)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        if (!f || fread(&h, sizeof(h), 1, f) != 1)
            die("reading the handle file", -1);
        fclose(f);
        if ((rc = P->connect(0, &h, &comm)))
            die("connect", rc);
        int ok = 0;
        while (!ok && now() < end)
            if ((rc = P->connectTest(comm, &ok)))
                die("connectTest", rc);
    }
    if (!comm)
        die("connecting (hang guard)", -1);

    char small_out[8] = {1}, small_in[8];
    for (int i = 0; i < 100; i++)
        tagged_round(comm, small_out, small_in, 8, NULL, NULL);
    double t0 = now();
    for (int i = 0; i < lat_iters; i++)
        tagged_round(comm, small_out, small_in, 8, NULL, NULL);
    report("tagged", 8, lat_iters, now() - t0);

    size_t big = 64u << 20;
    char *out = malloc(big), *in = malloc(big);
    memset(out, 0x5a, big);
    memset(in, 0, big);
    void *mo, *mi;
    if ((rc = P->regMr(comm, out, big, &mo)) || (rc = P->regMr(comm, in, big, &mi)))
        die("regMr", rc);
    tagged_round(comm, out, in, big, mo, mi);
    t0 = now();
    for (int i = 0; i < bw_iters; i++)
        tagged_round(comm, out, in, big, mo, mi);
    report("tagged", big, bw_iters, now() - t0);

    if (props.flags & HCCL_NET_FLAG_RMA) {
        hcclNetMrDesc_t mine, theirs;
        if ((rc = P->getMrDesc(mi, &mine)))
            die("getMrDesc", rc);
        void *r = post_recv(comm, &theirs, sizeof(theirs), 2, NULL);
        wait2(post_send(comm, &mine, sizeof(mine), 2, NULL), r);
        for (int i = 0; i < 100; i++)
            rma_round(comm, out, 8, mo, &theirs);
        t0 = now();
        for (int i = 0; i < lat_iters; i++)
            rma_round(comm, out, 8, mo, &theirs);
        report("rma", 8, lat_iters, now() - t0);
        rma_round(comm, out, big, mo, &theirs);
        t0 = now();
        for (int i = 0; i < bw_iters; i++)
            rma_round(comm, out, big, mo, &theirs);
        report("rma", big, bw_iters, now() - t0);
    }
    /* Both sides done before either closes. */
    tagged_round(comm, small_out, small_in, 8, NULL, NULL);
    P->deregMr(mo);
    P->deregMr(mi);
    P->closeComm(comm);
    if (lc)
        P->closeListen(lc);
    if (server)
        unlink(argv[3]);
    return 0;
}
