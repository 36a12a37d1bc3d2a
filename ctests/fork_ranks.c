/* Process-per-rank program: the parent creates the root info, forks one child per rank, and
 * each child checks AllReduce, AllGather and Broadcast results. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hccl/hccl.h"

#define NRANKS 3
#define COUNT 100000

static int run_rank(const HcclRootInfo *root, uint32_t rank)
{
    HcclComm comm;
    int32_t *send = malloc(sizeof(int32_t) * COUNT * NRANKS);
    int32_t *recv = malloc(sizeof(int32_t) * COUNT * NRANKS);
    int i, p;
    if (send == NULL || recv == NULL) return 10;
    if (HcclCommInitRootInfo(NRANKS, root, rank, &comm) != HCCL_SUCCESS) return 2;
    for (i = 0; i < COUNT; i++) send[i] = (int32_t)(rank * 1000 + i);
    if (HcclAllReduce(send, recv, COUNT, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, NULL) != HCCL_SUCCESS)
        return 3;
    for (i = 0; i < COUNT; i++)
        if (recv[i] != 3000 + 3 * i) return 4;
    if (HcclAllGather(send, recv, COUNT, HCCL_DATA_TYPE_INT32, comm, NULL) != HCCL_SUCCESS) return 5;
    for (p = 0; p < NRANKS; p++)
        for (i = 0; i < COUNT; i++)
            if (recv[p * COUNT + i] != p * 1000 + i) return 6;
    for (i = 0; i < COUNT; i++) recv[i] = rank == 1 ? i * 3 : 0;
    if (HcclBroadcast(recv, COUNT, HCCL_DATA_TYPE_INT32, 1, comm, NULL) != HCCL_SUCCESS) return 7;
    for (i = 0; i < COUNT; i++)
        if (recv[i] != i * 3) return 8;
    if (HcclCommDestroy(comm) != HCCL_SUCCESS) return 9;
    free(send);
    free(recv);
    return 0;
}

int main(void)
{
    HcclRootInfo root;
    pid_t pids[NRANKS];
    int r, failed = 0;
    if (HcclGetRootInfo(&root) != HCCL_SUCCESS) return 1;
    int started;
    for (started = 0; started < NRANKS; started++) {
        pids[started] = fork();
        if (pids[started] < 0) {
            perror("fork");
            /* The ranks started fail at the connect timeout without the missing one. */
            failed = 1;
            break;
        }
        if (pids[started] == 0) _exit(run_rank(&root, (uint32_t)started));
    }
    for (r = 0; r < started; r++) {
        int st = 0;
        if (waitpid(pids[r], &st, 0) != pids[r]) {
            perror("waitpid");
            failed = 1;
            continue;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed (status %d)\n", r, st);
            failed = 1;
        }
    }
    if (failed) return 1;
    printf("fork_ranks: ok\n");
    return 0;
}
