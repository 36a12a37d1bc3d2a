/* Smoke test of libascendcl.so from C: lifecycle, devices, memory, streams, events and the
 * host-runtime extensions. Exits 0 on success, 1 with a message on the first failure. */
#include "acl/acl.h"

#include <stdio.h>
#include <string.h>

#define CHECK_RC(call, want)                                                         \
    do {                                                                             \
        aclError rc_ = (call);                                                       \
        if (rc_ != (want)) {                                                         \
            const char *m_ = aclGetRecentErrMsg();                                   \
            fprintf(stderr, "%s:%d: %s returned %d, expected %d (%s)\n", __FILE__,   \
                    __LINE__, #call, rc_, (want), m_ ? m_ : "no message");          \
            return 1;                                                                \
        }                                                                            \
    } while (0)
#define CHECK(call) CHECK_RC(call, ACL_SUCCESS)
#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                          \
            return 1;                                                                \
        }                                                                            \
    } while (0)

static int32_t fail_task(void *arg) {
    (void)arg;
    return 9;
}

static void count_callback(void *userData) {
    ++*(int *)userData;
}

int main(void) {
    enum { N = 4096 };
    uint32_t count = 0;
    int32_t dev = -1;
    void *a = NULL, *b = NULL, *host = NULL;
    aclrtStream stream = NULL;
    aclrtEvent start = NULL, end = NULL;
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    aclrtStreamStatus sstatus = ACL_STREAM_STATUS_NOT_READY;
    aclrtRunMode mode = ACL_DEVICE;
    float ms = -1.0f;
    int calls = 0;
    int32_t fd = -1;
    uint64_t offset = 0, size = 0;
    size_t i;

    CHECK_RC(aclrtSetDevice(0), ACL_ERROR_UNINITIALIZE);
    CHECK(aclInit(NULL));
    CHECK_RC(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    CHECK(aclrtGetDeviceCount(&count));
    EXPECT(count >= 1);
    CHECK_RC(aclrtSetDevice((int32_t)count), ACL_ERROR_INVALID_DEVICE);
    CHECK(aclrtSetDevice(0));
    CHECK(aclrtGetDevice(&dev));
    EXPECT(dev == 0);
    CHECK(aclrtGetRunMode(&mode));
    EXPECT(mode == ACL_HOST);

    CHECK(aclrtMalloc(&a, N, ACL_MEM_MALLOC_HUGE_FIRST));
    CHECK(aclrtMalloc(&b, N, ACL_MEM_MALLOC_NORMAL_ONLY));
    CHECK(aclrtMallocHost(&host, N));
    EXPECT(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
    memset(host, 0x3c, N);
    CHECK(aclrtMemcpy(a, N, host, N, ACL_MEMCPY_HOST_TO_DEVICE));
    CHECK_RC(aclrtMemcpy(a, N / 2, host, N, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
    CHECK_RC(aclrtMemcpy(a, N, host, N, (aclrtMemcpyKind)7), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtHostMemGetShareInfo((const char *)a + 10, &fd, &offset, &size));
    EXPECT(fd >= 0 && offset == 10 && size == N - 10);

    CHECK(aclrtCreateStream(&stream));
    CHECK(aclrtHostStreamIsValid(stream));
    CHECK(aclrtCreateEvent(&start));
    CHECK(aclrtCreateEvent(&end));
    CHECK(aclrtRecordEvent(start, stream));
    CHECK(aclrtMemcpyAsync(b, N, a, N, ACL_MEMCPY_DEVICE_TO_DEVICE, stream));
    CHECK(aclrtMemsetAsync(a, N, 0, N, stream));
    CHECK(aclrtLaunchCallback(count_callback, &calls, ACL_CALLBACK_BLOCK, stream));
    CHECK(aclrtRecordEvent(end, stream));
    CHECK(aclrtSynchronizeStream(stream));
    CHECK(aclrtStreamQuery(stream, &sstatus));
    EXPECT(sstatus == ACL_STREAM_STATUS_COMPLETE);
    CHECK(aclrtQueryEventStatus(end, &status));
    EXPECT(status == ACL_EVENT_RECORDED_STATUS_COMPLETE);
    CHECK(aclrtEventElapsedTime(&ms, start, end));
    EXPECT(ms >= 0.0f);
    EXPECT(calls == 1);
    for (i = 0; i < N; ++i) {
        EXPECT(((unsigned char *)b)[i] == 0x3c);
        EXPECT(((unsigned char *)a)[i] == 0);
    }

    /* A failing host task surfaces at the next synchronisation, once. */
    CHECK(aclrtHostStreamEnqueue(stream, fail_task, NULL));
    CHECK_RC(aclrtSynchronizeStream(stream), ACL_ERROR_RT_FAILURE);
    CHECK(aclrtSynchronizeStream(stream));

    CHECK(aclrtDestroyEvent(start));
    CHECK(aclrtDestroyEvent(end));
    CHECK(aclrtDestroyStream(stream));
    CHECK_RC(aclrtHostStreamIsValid(stream), ACL_ERROR_INVALID_RESOURCE_HANDLE);
    CHECK_RC(aclrtSynchronizeStream(stream), ACL_ERROR_INVALID_RESOURCE_HANDLE);

    CHECK(aclrtFree(a));
    CHECK(aclrtFree(b));
    CHECK_RC(aclrtFree(b), ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtFreeHost(host));
    EXPECT(aclFloat16ToFloat(aclFloatToFloat16(0.5f)) == 0.5f);
    EXPECT(aclDataTypeSize(ACL_FLOAT16) == 2);
    CHECK(aclrtResetDevice(0));
    CHECK(aclFinalize());
    CHECK_RC(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    printf("acl_basic: ok\n");
    return 0;
}
