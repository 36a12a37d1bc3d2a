/*
 * The machine's latency floor between two processes: a ping-pong of one cache line through a
 * shared mapping, each process spinning on the line it receives, pinned to different CPUs when
 * at least two are allowed.
 *
 * usage: shm_pingpong [-n ITERS] [-w WARMUP]   (defaults 100000 and 10000)
 *
 * A message is one 64-byte line: a sequence number and seven words derived from it, written
 * before the sequence number is published. Each side checks every word of every line it
 * receives, so a torn or stale line fails the check. Output, one row:
 * data_size(Bytes) round_trip(us) one_way(us) mean_round_trip(us) cpus check_result
 * The round trips are timed in batches of 100: round_trip is the median batch's mean, which a
 * preempted spinner on a busy machine does not move (the floor the hardware allows), one_way
 * half of it, and mean_round_trip the mean over all iterations (comparable with a tester's
 * mean, preemptions included).
 *
 * HCCL_TEST_FAULT_INJECT=corrupt makes the answering side spoil one word once, so tests can see
 * a failure reported. Exit status: 0 when every line checked out, 1 otherwise, 2 on a usage
 * error. A side that waits more than 10 s for its peer gives up with an error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define WORDS (LINE / 8)
#define TIMEOUT_NS 10000000000LL
#define BATCH 100

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* One message: the sequence number in word 0, published last. */
struct line {
    _Alignas(LINE) uint64_t w[WORDS];
};

/* Each direction on its own pair of lines, so that adjacent-line prefetching does not make the
 * two directions share. */
struct shared {
    struct line ping, pad0, pong, pad1;
    /* Failures seen by the answering side, and whether it gave up waiting. */
    _Alignas(LINE) uint64_t pong_errors, pong_timeout;
};

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static uint64_t word(uint64_t seq, int k)
{
    return seq * 0x9E3779B97F4A7C15ULL + (uint64_t)k;
}

static void send_line(struct line *l, uint64_t seq, int spoil)
{
    for (int k = 1; k < WORDS; k++)
        l->w[k] = word(seq, k) ^ (spoil && k == 1);
    __atomic_store_n(&l->w[0], seq, __ATOMIC_RELEASE);
}

/* Waits for sequence number seq on l; returns the number of wrong words, or -1 on timeout. */
static int recv_line(const struct line *l, uint64_t seq, int yield)
{
    long long start = 0;
    for (unsigned spins = 1; __atomic_load_n(&l->w[0], __ATOMIC_ACQUIRE) != seq; spins++) {
        if (yield)
            sched_yield();
        else
            cpu_relax();
        if ((spins & 0xffff) == 0) {
            long long t = now_ns();
            if (!start)
                start = t;
            else if (t - start > TIMEOUT_NS)
                return -1;
        }
    }
    int bad = 0;
    for (int k = 1; k < WORDS; k++)
        bad += l->w[k] != word(seq, k);
    return bad;
}

static int by_value(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static int parse_count(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0)
        return -1;
    *out = v;
    return 0;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv)
{
    long iters = 100000, warmup = 10000;
    for (int i = 1; i < argc; i++) {
        long *dst = !strcmp(argv[i], "-n") ? &iters : !strcmp(argv[i], "-w") ? &warmup : NULL;
        if (!strcmp(argv[i], "-h")) {
            printf("usage: %s [-n ITERS] [-w WARMUP]\n", argv[0]);
            return 0;
        }
        if (!dst || i + 1 >= argc || parse_count(argv[++i], dst) || (dst == &iters && !iters)) {
            fprintf(stderr, "usage: %s [-n ITERS] [-w WARMUP]\n", argv[0]);
            return 2;
        }
    }

    /* Two allowed CPUs: one per side. With one, both sides yield instead of spinning. */
    cpu_set_t allowed;
    int cpus[2] = {-1, -1}, found = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
            if (CPU_ISSET(c, &allowed))
                cpus[found++] = c;
    int yield = found < 2;

    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(sh, 0, sizeof *sh);
    const char *inject = getenv("HCCL_TEST_FAULT_INJECT");
    int fault = inject && !strcmp(inject, "corrupt");
    uint64_t total = (uint64_t)warmup + (uint64_t)iters;

    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        /* The answering side: dies with the measuring side, answers every line it checks. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        if (!yield)
            pin(cpus[1]);
        uint64_t errors = 0;
        for (uint64_t s = 1; s <= total; s++) {
            int bad = recv_line(&sh->ping, s, yield);
            if (bad < 0) {
                __atomic_store_n(&sh->pong_timeout, 1, __ATOMIC_RELEASE);
                _exit(1);
            }
            errors += (uint64_t)bad;
            send_line(&sh->pong, s, fault && s == total / 2 + 1);
        }
        __atomic_store_n(&sh->pong_errors, errors, __ATOMIC_RELEASE);
        _exit(0);
    }
    if (!yield)
        pin(cpus[0]);
    uint64_t errors = 0;
    long batch = iters < BATCH ? iters : BATCH, nbatch = iters / batch, done = 0;
    long long *batches = malloc(sizeof *batches * (size_t)nbatch);
    if (!batches) {
        kill(child, SIGKILL);
        fprintf(stderr, "shm_pingpong: out of memory\n");
        return 1;
    }
    long long t0 = 0, tb = 0;
    int timed_out = 0;
    for (uint64_t s = 1; s <= total && !timed_out; s++) {
        if (s > (uint64_t)warmup && (s - warmup - 1) % batch == 0) {
            long long t = now_ns();
            if (done > 0 && done <= nbatch)
                batches[done - 1] = t - tb;
            if (!t0)
                t0 = t;
            tb = t;
            done++;
        }
        send_line(&sh->ping, s, 0);
        int bad = recv_line(&sh->pong, s, yield);
        if (bad < 0)
            timed_out = 1;
        else
            errors += (uint64_t)bad;
    }
    long long end = now_ns(), elapsed = end - t0;
    if (done > 0 && done <= nbatch)
        batches[done - 1] = end - tb;
    if (timed_out)
        kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "shm_pingpong: the other side %s\n",
                timed_out || sh->pong_timeout ? "stopped answering for 10 s" : "failed");
        return 1;
    }
    errors += sh->pong_errors;
    if (errors)
        fprintf(stderr, "shm_pingpong: %llu wrong words received\n", (unsigned long long)errors);

    qsort(batches, (size_t)nbatch, sizeof *batches, by_value);
    double median_us = (nbatch % 2 ? batches[nbatch / 2]
                                   : (batches[nbatch / 2 - 1] + batches[nbatch / 2]) / 2.0) /
                       1e3 / batch;
    double mean_us = elapsed / 1e3 / iters;
    free(batches);
    char where[32];
    if (yield)
        snprintf(where, sizeof where, "unpinned");
    else
        snprintf(where, sizeof where, "%d,%d", cpus[0], cpus[1]);
    fprintf(stderr, "shm_pingpong: %ld round trips of one %d-byte line, %s%s\n", iters, LINE,
            yield ? "one CPU allowed: both sides yield" : "pinned to CPUs ", yield ? "" : where);
    printf("%16s %14s %14s %19s %10s %13s\n", "data_size(Bytes)", "round_trip(us)",
           "one_way(us)", "mean_round_trip(us)", "cpus", "check_result");
    printf("%16d %14.3f %14.3f %19.3f %10s %13s\n", LINE, median_us, median_us / 2, mean_us,
           where, errors ? "failed" : "success");
    return errors ? 1 : 0;
}
