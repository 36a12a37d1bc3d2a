/*
 * The machine's floor for single-copy messages between two processes: how long one
 * process_vm_readv of a whole message out of another process takes, beside a memcpy of the same
 * size within one process. Both the library's and Open MPI's single-copy paths move each byte of
 * a large shared-memory message with one such call, so no collective that uses them moves a
 * message faster than this.
 *
 * usage: cma_floor [-b MIN] [-e MAX] [-n ITERS] [-H]   (sizes in bytes, K or M suffixes;
 *        defaults 4K, 4M, 200)
 *   -H: advise transparent huge pages for the source process's buffer (MADV_HUGEPAGE): the
 *       kernel pins the source process's pages for every call, and huge pages make that cheaper
 *       (where transparent huge pages are enabled at least for madvise).
 *
 * A child process holds the source buffer, filled with a pattern; the parent reads it with
 * process_vm_readv (the memcpy copies a buffer of the parent's own). Output, one row per size (doubling from MIN to MAX):
 * data_size(Bytes) cma_us cma_GB/s memcpy_us memcpy_GB/s check_result
 * Each time is the median of batches of ITERS / 10 calls (at least 1). After the timed calls the
 * parent compares what it read with the pattern: a wrong byte fails the row. Exit status: 0 when
 * every row checked out, 1 otherwise (or when the kernel refuses the read), 2 on a usage error.
 * HCCL_TEST_FAULT_INJECT=corrupt makes the child spoil one byte of its buffer first, so tests
 * can see a failure reported.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCHES 10
#define HUGE_PAGE (2u << 20)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    if (*end != '\0' || v == 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 131 + (i >> 12));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over BATCHES batches of the mean time of one call, in seconds. */
static double median(double *t)
{
    qsort(t, BATCHES, sizeof *t, cmp_double);
    return (t[BATCHES / 2 - 1] + t[BATCHES / 2]) / 2;
}

static int usage(void)
{
    fprintf(stderr, "usage: cma_floor [-b MIN] [-e MAX] [-n ITERS] [-H]\n");
    return 2;
}

int main(int argc, char **argv)
{
    size_t min = 4 << 10, max = 4 << 20;
    long iters = 200;
    int huge = 0, opt;
    while ((opt = getopt(argc, argv, "b:e:n:H")) != -1) {
        switch (opt) {
        case 'b':
            if (parse_size(optarg, &min))
                return usage();
            break;
        case 'e':
            if (parse_size(optarg, &max))
                return usage();
            break;
        case 'n':
            iters = strtol(optarg, NULL, 10);
            if (iters < 1)
                return usage();
            break;
        case 'H':
            huge = 1;
            break;
        default:
            return usage();
        }
    }
    if (optind != argc || min > max)
        return usage();
    size_t cap = (max + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    unsigned char *src = aligned_alloc(HUGE_PAGE, cap), *dst = aligned_alloc(HUGE_PAGE, cap);
    if (!src || !dst) {
        fprintf(stderr, "cma_floor: cannot allocate 2 x %zu bytes\n", cap);
        return 1;
    }
    for (size_t i = 0; i < cap; i++)
        src[i] = pattern(i);
    memset(dst, 0, cap);
    int ready[2];
    if (pipe(ready)) {
        perror("cma_floor: pipe");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("cma_floor: fork");
        return 1;
    }
    if (child == 0) {
        /* The source: a buffer of its own, first touched after the advice. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        unsigned char *own = aligned_alloc(HUGE_PAGE, cap);
        if (!own)
            _exit(1);
        if (huge)
            madvise(own, cap, MADV_HUGEPAGE);
        for (size_t i = 0; i < cap; i++)
            own[i] = pattern(i);
        const char *fault = getenv("HCCL_TEST_FAULT_INJECT");
        if (fault && strcmp(fault, "corrupt") == 0)
            own[min / 2] ^= 0xff;
        if (write(ready[1], &own, sizeof own) != (ssize_t)sizeof own)
            _exit(1);
        for (;;)
            pause();
    }
    unsigned char *remote;
    if (read(ready[0], &remote, sizeof remote) != (ssize_t)sizeof remote) {
        fprintf(stderr, "cma_floor: the source process did not start\n");
        return 1;
    }
    long per = iters / BATCHES > 0 ? iters / BATCHES : 1;
    int status = 0;
    printf("%12s %10s %9s %10s %11s %12s\n", "data_size(B)", "cma_us", "cma_GB/s", "memcpy_us",
           "memcpy_GB/s", "check_result");
    for (size_t n = min; n <= max; n *= 2) {
        struct iovec l = {dst, n}, r = {remote, n};
        double tc[BATCHES], tm[BATCHES];
        int failed = 0;
        for (int b = 0; b < BATCHES && !failed; b++) {
            double t0 = now();
            for (long k = 0; k < per; k++) {
                if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)n) {
                    perror("cma_floor: process_vm_readv");
                    failed = 1;
                    break;
                }
            }
            tc[b] = (now() - t0) / (double)per;
            t0 = now();
            for (long k = 0; k < per; k++) {
                memcpy(dst, src, n);
                __asm__ __volatile__("" : : "r"(dst) : "memory");
            }
            tm[b] = (now() - t0) / (double)per;
        }
        if (failed) {
            status = 1;
            break;
        }
        /* The last batch was the memcpy: read once more and check that. */
        memset(dst, 0, n);
        if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)n) {
            perror("cma_floor: process_vm_readv");
            status = 1;
            break;
        }
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++)
            ok = dst[i] == pattern(i);
        double c_s = median(tc), m_s = median(tm);
        printf("%12zu %10.2f %9.2f %10.2f %11.2f %12s\n", n, c_s * 1e6, (double)n / c_s / 1e9,
               m_s * 1e6, (double)n / m_s / 1e9, ok ? "success" : "failed");
        if (!ok)
            status = 1;
        if (n > max / 2)
            break;
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return status;
}
