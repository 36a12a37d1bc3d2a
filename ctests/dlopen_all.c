/* How frameworks reach HCCL: dlopen("libhccl.so") and dlsym of every API name, no link-time
 * dependency. The names to resolve are the arguments (the test passes every function declared
 * by the installed headers). Then two rank threads run an AllReduce through the resolved
 * pointers. Prints "dlopen_all: ok (N symbols)". Build: cc dlopen_all.c -I.../include -ldl
 * -pthread; run with LD_LIBRARY_PATH containing the library (set_env.sh does that). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "hccl/hccl.h"

typedef HcclResult (*get_root_info_fn)(HcclRootInfo *);
typedef HcclResult (*init_fn)(uint32_t, const HcclRootInfo *, uint32_t, HcclComm *);
typedef HcclResult (*allreduce_fn)(void *, void *, uint64_t, HcclDataType, HcclReduceOp,
                                   HcclComm, aclrtStream);
typedef HcclResult (*destroy_fn)(HcclComm);

static init_fn init;
static allreduce_fn allreduce;
static destroy_fn destroy;
static HcclRootInfo root;

#define COUNT 1000

struct rank_arg {
    uint32_t rank;
    int bad;
};

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    HcclComm comm = NULL;
    float in[COUNT], out[COUNT];
    int i;
    for (i = 0; i < COUNT; ++i) {
        in[i] = (float)(a->rank + 1) * (float)i;
        out[i] = -1.0f;
    }
    if (init(2, &root, a->rank, &comm) != HCCL_SUCCESS ||
        allreduce(in, out, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) !=
            HCCL_SUCCESS ||
        destroy(comm) != HCCL_SUCCESS) {
        a->bad = 1;
        return NULL;
    }
    for (i = 0; i < COUNT; ++i) {
        if (out[i] != 3.0f * (float)i) {
            fprintf(stderr, "rank %u: out[%d] = %g\n", a->rank, i, (double)out[i]);
            a->bad = 1;
            break;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    void *lib = dlopen("libhccl.so", RTLD_NOW | RTLD_LOCAL);
    int i, started, missing = 0;
    pthread_t t[2];
    struct rank_arg args[2] = {{0, 0}, {1, 0}};
    get_root_info_fn get_root_info;
    if (!lib) {
        fprintf(stderr, "dlopen(libhccl.so): %s\n", dlerror());
        return 1;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: dlopen_all NAME...\n");
        return 2;
    }
    for (i = 1; i < argc; ++i) {
        if (!dlsym(lib, argv[i])) {
            fprintf(stderr, "dlsym(%s): not exported\n", argv[i]);
            missing++;
        }
    }
    if (missing) {
        return 1;
    }
    *(void **)&get_root_info = dlsym(lib, "HcclGetRootInfo");
    *(void **)&init = dlsym(lib, "HcclCommInitRootInfo");
    *(void **)&allreduce = dlsym(lib, "HcclAllReduce");
    *(void **)&destroy = dlsym(lib, "HcclCommDestroy");
    if (get_root_info(&root) != HCCL_SUCCESS) {
        fprintf(stderr, "HcclGetRootInfo failed\n");
        return 1;
    }
    for (started = 0; started < 2; ++started) {
        int e = pthread_create(&t[started], NULL, rank_main, &args[started]);
        if (e != 0) {
            fprintf(stderr, "pthread_create: %s\n", strerror(e));
            break;
        }
    }
    for (i = 0; i < started; ++i) {
        pthread_join(t[i], NULL);
    }
    if (started < 2) {
        return 1;
    }
    if (args[0].bad || args[1].bad) {
        return 1;
    }
    printf("dlopen_all: ok (%d symbols)\n", argc - 1);
    return 0;
}
