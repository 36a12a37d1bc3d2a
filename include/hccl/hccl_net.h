/*
 * hccl/hccl_net.h: the network plugin interface of libhccl, version 1.
 *
 * A net plugin is a shared library that moves bytes between hosts over an RDMA-class network
 * (libhccl_net_ofi.so does it through libfabric: verbs for RoCE/InfiniBand, efa, tcp). It
 * exports one symbol, HCCL_NET_PLUGIN_SYMBOL, a function returning a table of function
 * pointers; the caller checks `version` and `structSize` before using any entry.
 *
 * Model
 *   - A device is one network interface (a libfabric domain) as the plugin chose it.
 *   - listen() gives an opaque handle of HCCL_NET_HANDLE_BYTES bytes that the caller carries
 *     to the peer through its own bootstrap; the peer passes it to connect(). Every accepted or
 *     connected comm is one reliable, bidirectional channel between two processes.
 *   - Connection set-up never blocks: connect() returns a comm at once and connectTest() says
 *     when the peer has accepted; accept() returns a NULL comm until a peer has arrived. A
 *     connect completes only while the peer calls accept(), so a caller that both connects and
 *     accepts polls both in one loop. The caller owns every timeout.
 *   - isend/irecv are tagged messages: a receive matches the send of the same comm with the same
 *     tag; messages of one tag match in the order they were sent (on a device with
 *     HCCL_NET_FLAG_IN_ORDER all messages match in order, see there). A receive buffer shorter
 *     than the message fails the receive with HCCL_NET_E_TRUNCATED.
 *   - A failed request (truncation, a lost peer) ends its comm: every later call on that comm
 *     answers HCCL_NET_E_REMOTE (providers differ in what survives such failures); close it.
 *   - iwrite (when HCCL_NET_FLAG_RMA) writes into a peer's registered memory, described by the
 *     hcclNetMrDesc_t the peer obtained with getMrDesc() and sent over any channel, and
 *     delivers a 32-bit immediate value that the peer collects with pollImm() once the data is
 *     in place.
 *   - Every isend/irecv/iwrite returns a request; test() reports completion (and frees the
 *     request) or an error (and frees it as well). Progress is made inside the plugin calls
 *     (test, pollImm, connectTest, accept, waitFd and the posting calls) and only for the comm
 *     called. A waiting caller therefore tests all its outstanding requests in one loop: a
 *     large send can need its receiving comm (in the same or the peer process) to be polled
 *     before it completes. A caller that would rather sleep than poll asks waitFd for a
 *     descriptor to sleep on between such loops.
 *
 * Handles (listen comms, comms, memory registrations, requests) are opaque. The plugin checks
 * every handle it is given: NULL, unknown, already closed or of the wrong kind answers
 * HCCL_NET_E_INVALID and nothing else happens. All functions may be called from any thread.
 */
#ifndef HCCL_NET_H
#define HCCL_NET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The interface version this header describes. */
#define HCCL_NET_PLUGIN_VERSION 1
/* Name of the exported entry point, of type hcclNetPluginGetFn_t. */
#define HCCL_NET_PLUGIN_SYMBOL "hcclNetPluginV1"
/* Size of the connection handle the caller exchanges between processes. */
#define HCCL_NET_HANDLE_BYTES 128
/* Size of the NUL-terminated strings in hcclNetProperties_t. */
#define HCCL_NET_NAME_BYTES 64
/* Value of hcclNetConfig_t and hcclNetProperties_t fields that are not set. */
#define HCCL_NET_UNSET (-1)

typedef enum {
    HCCL_NET_SUCCESS = 0,
    /* Not an error: the send queue is full or the comm is still connecting. Make progress
     * (test() outstanding requests, connectTest()) and post again. */
    HCCL_NET_AGAIN = 1,
    /* A bad argument: NULL pointer, unknown or closed handle, device out of range, size over
     * maxMessageBytes, a buffer outside its registration, a malformed connection handle. */
    HCCL_NET_E_INVALID = 2,
    /* init() has not succeeded yet. */
    HCCL_NET_E_NOT_INITIALIZED = 3,
    /* The operation is not available on this device (e.g. iwrite without HCCL_NET_FLAG_RMA). */
    HCCL_NET_E_NOT_SUPPORTED = 4,
    /* No usable network device (no provider works on this machine). */
    HCCL_NET_E_NO_DEVICE = 5,
    HCCL_NET_E_NO_MEMORY = 6,
    /* A receive buffer was shorter than the message. */
    HCCL_NET_E_TRUNCATED = 7,
    /* The peer is unreachable, went away, or broke the protocol. */
    HCCL_NET_E_REMOTE = 8,
    /* The network library failed (the log says which call and why). */
    HCCL_NET_E_INTERNAL = 9
} hcclNetResult_t;

typedef enum {
    HCCL_NET_LOG_ERROR = 1,
    HCCL_NET_LOG_WARN = 2,
    HCCL_NET_LOG_INFO = 3,
    HCCL_NET_LOG_DEBUG = 4
} hcclNetLogLevel_t;

/* Receives every log line of the plugin (one line, no trailing newline); may be called from
 * any thread, and must not call back into the plugin. */
typedef void (*hcclNetLogFn_t)(void *ctx, int level, const char *msg);

/* What the caller configures once, at init(). */
typedef struct {
    /* Traffic class (HCCL_RDMA_TC): 0..255, the IP TOS byte (DSCP << 2), or HCCL_NET_UNSET. */
    int32_t trafficClass;
    /* Service level (HCCL_RDMA_SL): 0..15, or HCCL_NET_UNSET. */
    int32_t serviceLevel;
} hcclNetConfig_t;

/* hcclNetProperties_t.flags */
/* iwrite() and pollImm() are available. */
#define HCCL_NET_FLAG_RMA 0x1u
/* Every buffer given to isend/irecv/iwrite must lie inside a registration (mhandle). When
 * clear, mhandle may be NULL (registering still helps the provider). */
#define HCCL_NET_FLAG_REG_REQUIRED 0x2u
/* Receives match messages in the order both were posted, whatever their tags (the device's
 * channels are plain ordered streams without tag matching): a caller posts its receives in
 * the order the peer sends. A receive that meets a message of another tag fails with
 * HCCL_NET_E_INVALID and ends the comm. Callers that use one tag per comm see no difference. */
#define HCCL_NET_FLAG_IN_ORDER 0x4u

/* Largest head of isendHead(). */
#define HCCL_NET_HEAD_BYTES 64

typedef struct {
    char name[HCCL_NET_NAME_BYTES];     /* interface, e.g. "mlx5_0", "eth0" */
    char provider[HCCL_NET_NAME_BYTES]; /* e.g. "verbs;ofi_rxm", "efa", "tcp;ofi_rxm" */
    char fabric[HCCL_NET_NAME_BYTES];   /* e.g. "IB-0xfe80000000000000", "192.0.2.0/24" */
    uint64_t speedMbps;                 /* link speed; 0 when the provider does not say */
    uint64_t maxMessageBytes;           /* largest isend, irecv or iwrite */
    uint32_t flags;                     /* HCCL_NET_FLAG_* */
    uint32_t reserved;
    int32_t trafficClass; /* the traffic class in effect, or HCCL_NET_UNSET when not applied */
    int32_t serviceLevel; /* the service level in effect, or HCCL_NET_UNSET when not applied */
} hcclNetProperties_t;

/* Opaque connection handle: listen() fills it, connect() reads it. */
typedef struct {
    uint8_t bytes[HCCL_NET_HANDLE_BYTES];
} hcclNetHandle_t;

/* Describes a registered region to a peer that writes into it with iwrite(). Plain data: send
 * it over any channel. */
typedef struct {
    uint64_t base; /* provider address of byte 0 of the region */
    uint64_t size; /* bytes in the region */
    uint64_t key;  /* remote access key */
    uint64_t reserved;
} hcclNetMrDesc_t;

typedef struct {
    uint32_t version;    /* HCCL_NET_PLUGIN_VERSION of the plugin */
    uint32_t structSize; /* sizeof(hcclNetPlugin_v1_t) as the plugin was built */
    const char *name;    /* short plugin name, e.g. "ofi" */

    /* Opens the network library and finds the devices. config may be NULL (nothing set);
     * log may be NULL (no logging). Calling it again returns the first call's result. */
    hcclNetResult_t (*init)(const hcclNetConfig_t *config, hcclNetLogFn_t log, void *logCtx);
    hcclNetResult_t (*devices)(int *count);
    hcclNetResult_t (*getProperties)(int dev, hcclNetProperties_t *props);

    /* Starts listening on dev; *handle is what the peer's connect() needs. */
    hcclNetResult_t (*listen)(int dev, hcclNetHandle_t *handle, void **listenComm);
    /* Non-blocking: *comm is a new, connected comm, or NULL while none is ready. The calls
     * themselves drive the handshake: keep calling until the expected peers have arrived. */
    hcclNetResult_t (*accept)(void *listenComm, void **comm);
    hcclNetResult_t (*closeListen)(void *listenComm);

    /* Starts connecting to the listener that produced handle; *comm is valid at once. */
    hcclNetResult_t (*connect)(int dev, const hcclNetHandle_t *handle, void **comm);
    /* Non-blocking: *connected becomes 1 once the peer has accepted. Before that, isend and
     * iwrite answer HCCL_NET_AGAIN; irecv may be posted at any time. */
    hcclNetResult_t (*connectTest)(void *comm, int *connected);

    /* Registers [data, data + size) for use on any comm of the same device as comm. */
    hcclNetResult_t (*regMr)(void *comm, void *data, size_t size, void **mhandle);
    /* The registration ends once no posted operation uses it any more. */
    hcclNetResult_t (*deregMr)(void *mhandle);
    /* Describes a registration (needs HCCL_NET_FLAG_RMA) for a peer's iwrite(). */
    hcclNetResult_t (*getMrDesc)(void *mhandle, hcclNetMrDesc_t *desc);

    /* Posts a tagged send / receive. mhandle: the registration holding the buffer, or NULL
     * when the device does not require one. size 0 is allowed (data may then be NULL). */
    hcclNetResult_t (*isend)(void *comm, const void *data, size_t size, uint32_t tag,
                             void *mhandle, void **request);
    hcclNetResult_t (*irecv)(void *comm, void *data, size_t size, uint32_t tag, void *mhandle,
                             void **request);
    /* Writes size bytes from data to offset remoteOffset of the peer's region remote, then
     * delivers imm to the peer's pollImm(). The request completes when data may be reused. */
    hcclNetResult_t (*iwrite)(void *comm, const void *data, size_t size, void *mhandle,
                              const hcclNetMrDesc_t *remote, uint64_t remoteOffset, uint32_t imm,
                              void **request);
    /* Non-blocking: *received is 1 and *imm the value of the oldest iwrite from the peer whose
     * data is in place, or *received is 0. Immediates are delivered in arrival order. */
    hcclNetResult_t (*pollImm)(void *comm, uint32_t *imm, int *received);

    /* Non-blocking: *done is 1 once the request completed (then *bytes, if bytes is not NULL,
     * is the size sent, written or received, and the request is freed), else 0. An error
     * return also frees the request. */
    hcclNetResult_t (*test)(void *request, int *done, size_t *bytes);

    /* Closes the comm; its outstanding requests are abandoned (their handles become invalid). */
    hcclNetResult_t (*closeComm)(void *comm);

    /* Optional (NULL, or beyond a plugin's structSize): prepares to sleep until comm may make
     * progress. It progresses the comm itself, then answers HCCL_NET_SUCCESS with *fd a
     * descriptor (owned by the plugin, valid until closeComm) that turns readable (POLLIN) when
     * calling the comm again may find something: the caller may block in poll() on it, with a
     * timeout of its own, and then calls test() or pollImm(). HCCL_NET_AGAIN: something may
     * already be done, call test() or pollImm() first. HCCL_NET_E_NOT_SUPPORTED: the comm has
     * nothing to sleep on; keep polling it. */
    hcclNetResult_t (*waitFd)(void *comm, int *fd);
    /* Optional (NULL, or absent from tables that end after waitFd). isend() of one message made
     * of head (headSize bytes, 1..HCCL_NET_HEAD_BYTES, copied during the call) followed by data
     * (size bytes, used in place until the request completes), so that a caller framing its
     * messages need not copy them behind its header. mhandle covers data.
     * HCCL_NET_E_NOT_SUPPORTED on a device with HCCL_NET_FLAG_REG_REQUIRED. */
    hcclNetResult_t (*isendHead)(void *comm, const void *head, size_t headSize, const void *data,
                                 size_t size, uint32_t tag, void *mhandle, void **request);
} hcclNetPlugin_v1_t;

/* The type of the exported entry point HCCL_NET_PLUGIN_SYMBOL. */
typedef const hcclNetPlugin_v1_t *(*hcclNetPluginGetFn_t)(void);

#ifdef __cplusplus
}
#endif

#endif /* HCCL_NET_H */
