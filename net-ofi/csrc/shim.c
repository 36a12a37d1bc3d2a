/*
 * The libfabric calls of the net plugin. libfabric's object and data-path calls (fi_domain,
 * fi_endpoint, fi_tsend, fi_cq_read, fi_close, ...) are static inline functions in its headers
 * that dispatch through per-object operation tables, so they exist only where a C compiler
 * expands them. This file expands them against the installed headers and gives Rust a few
 * plain functions and plain structs; Rust never sees a libfabric struct layout.
 *
 * Return values: 0 or a count on success, a negative libfabric error code (-FI_E*) otherwise.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdlib.h>
#include <string.h>

#define HNO_NAME 64

/* What Rust learns about one fi_info entry. */
struct hno_info_desc {
    char provider[HNO_NAME];
    char fabric[HNO_NAME];
    char domain[HNO_NAME];
    uint64_t speed_bps;
    uint64_t max_msg_size;
    uint64_t caps;
    uint64_t mr_mode;
    uint64_t mr_key_size;
    uint64_t cq_data_size;
    uint32_t tclass;
    uint32_t addrlen;
};

struct hno_domain {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
};

struct hno_ep {
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;             /* reliable-datagram endpoints only */
    struct fid_eq *eq;             /* connected endpoints and listeners only */
    struct fid_pep *pep;           /* listeners only (then ep and cq are NULL) */
    struct fid_fabric *fabric;
    int wait_fd; /* the completion queue's wait descriptor, -1 when it has none */
};

/* One completion, or one failed operation when err != 0. */
struct hno_cqe {
    void *context;
    uint64_t flags;
    uint64_t len;
    uint64_t data;
    int32_t err;      /* positive FI_E* code of a failed operation, 0 on success */
    int32_t prov_err; /* the provider's own code of the failure */
};

static void copy_name(char *dst, const char *src)
{
    size_t n = 0;
    if (src) {
        n = strlen(src);
        if (n >= HNO_NAME)
            n = HNO_NAME - 1;
        memcpy(dst, src, n);
    }
    dst[n] = '\0';
}

uint32_t hno_context_size(void)
{
    return (uint32_t)sizeof(struct fi_context2);
}

uint32_t hno_api_version(void)
{
    return fi_version();
}

const char *hno_strerror(int err)
{
    return fi_strerror(err < 0 ? -err : err);
}

/*
 * Reliable-datagram endpoints with tagged messages (msg 0), or connected endpoints with plain
 * messages (msg 1); RMA writes with remote CQ data when want_rma; thread-safe domains,
 * send-after-send ordering, and every memory-registration mode this plugin handles.
 * prov NULL: every provider libfabric offers (FI_PROVIDER filters them). tclass 0: unspecified.
 */
int hno_getinfo(const char *prov, int msg, int want_rma, uint32_t tclass, struct fi_info **out)
{
    struct fi_info *hints = fi_allocinfo();
    int rc;

    *out = NULL;
    if (!hints)
        return -FI_ENOMEM;
    hints->caps = msg ? FI_MSG : FI_TAGGED;
    if (want_rma)
        hints->caps |= FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = msg ? FI_EP_MSG : FI_EP_RDM;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    hints->tx_attr->tclass = tclass;
    if (prov) {
        hints->fabric_attr->prov_name = strdup(prov);
        if (!hints->fabric_attr->prov_name) {
            fi_freeinfo(hints);
            return -FI_ENOMEM;
        }
    }
    rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL, NULL, 0, hints, out);
    fi_freeinfo(hints);
    return rc;
}

struct fi_info *hno_info_next(const struct fi_info *info)
{
    return info->next;
}

void hno_freeinfo(struct fi_info *info)
{
    fi_freeinfo(info);
}

void hno_describe(const struct fi_info *info, struct hno_info_desc *d)
{
    memset(d, 0, sizeof(*d));
    copy_name(d->provider, info->fabric_attr ? info->fabric_attr->prov_name : NULL);
    copy_name(d->fabric, info->fabric_attr ? info->fabric_attr->name : NULL);
    copy_name(d->domain, info->domain_attr ? info->domain_attr->name : NULL);
    if (info->nic && info->nic->link_attr)
        d->speed_bps = info->nic->link_attr->speed;
    d->max_msg_size = info->ep_attr ? info->ep_attr->max_msg_size : 0;
    d->caps = info->caps;
    if (info->domain_attr) {
        d->mr_mode = (uint64_t)(unsigned)info->domain_attr->mr_mode;
        d->mr_key_size = info->domain_attr->mr_key_size;
        d->cq_data_size = info->domain_attr->cq_data_size;
    }
    d->tclass = info->tx_attr ? info->tx_attr->tclass : 0;
    d->addrlen = (uint32_t)info->src_addrlen;
}

int hno_domain_open(const struct fi_info *info, struct hno_domain **out)
{
    struct hno_domain *d = calloc(1, sizeof(*d));
    int rc;

    *out = NULL;
    if (!d)
        return -FI_ENOMEM;
    d->info = fi_dupinfo(info);
    if (!d->info) {
        free(d);
        return -FI_ENOMEM;
    }
    /* One entry only: fi_dupinfo copies the list head, not its successors. */
    d->info->next = NULL;
    rc = fi_fabric(d->info->fabric_attr, &d->fabric, NULL);
    if (rc == 0)
        rc = fi_domain(d->fabric, d->info, &d->domain, NULL);
    if (rc != 0) {
        if (d->fabric)
            fi_close(&d->fabric->fid);
        fi_freeinfo(d->info);
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void hno_domain_close(struct hno_domain *d)
{
    fi_close(&d->domain->fid);
    fi_close(&d->fabric->fid);
    fi_freeinfo(d->info);
    free(d);
}

static void ep_free(struct hno_ep *e)
{
    if (e->ep)
        fi_close(&e->ep->fid);
    if (e->pep)
        fi_close(&e->pep->fid);
    if (e->av)
        fi_close(&e->av->fid);
    if (e->cq)
        fi_close(&e->cq->fid);
    if (e->eq)
        fi_close(&e->eq->fid);
    free(e);
}

/* Opens the completion queue of e: with a wait descriptor when the provider offers one. */
static int cq_open(struct hno_domain *d, struct hno_ep *e)
{
    struct fi_cq_attr cq_attr;
    int rc;

    e->wait_fd = -1;
    /* A descriptor to sleep on when the provider offers one, else a queue that is polled. */
    memset(&cq_attr, 0, sizeof(cq_attr));
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_FD;
    rc = fi_cq_open(d->domain, &cq_attr, &e->cq, NULL);
    if (rc == 0 && fi_control(&e->cq->fid, FI_GETWAIT, &e->wait_fd) != 0) {
        e->wait_fd = -1;
        fi_close(&e->cq->fid);
        e->cq = NULL;
        rc = -FI_ENOSYS;
    }
    if (rc != 0) {
        e->wait_fd = -1;
        cq_attr.wait_obj = FI_WAIT_NONE;
        rc = fi_cq_open(d->domain, &cq_attr, &e->cq, NULL);
    }
    return rc;
}

/* An endpoint with its own completion queue and address vector, enabled. */
int hno_ep_open(struct hno_domain *d, struct hno_ep **out)
{
    struct fi_av_attr av_attr;
    struct hno_ep *e = calloc(1, sizeof(*e));
    int rc;

    *out = NULL;
    if (!e)
        return -FI_ENOMEM;
    e->fabric = d->fabric;
    rc = cq_open(d, e);
    memset(&av_attr, 0, sizeof(av_attr));
    av_attr.type = d->info->domain_attr->av_type;
    if (rc == 0)
        rc = fi_av_open(d->domain, &av_attr, &e->av, NULL);
    if (rc == 0)
        rc = fi_endpoint(d->domain, d->info, &e->ep, NULL);
    if (rc == 0)
        rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0)
        rc = fi_ep_bind(e->ep, &e->av->fid, 0);
    if (rc == 0)
        rc = fi_enable(e->ep);
    if (rc != 0) {
        ep_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void hno_ep_close(struct hno_ep *e)
{
    ep_free(e);
}

/* The completion queue's wait descriptor (readable when the endpoint may progress), or -1. */
int hno_ep_wait_fd(const struct hno_ep *e)
{
    return e->wait_fd;
}

/*
 * 0 when the caller may now sleep on the wait descriptor, -FI_EAGAIN when completions are
 * pending (read them first), another negative code on failure.
 */
int hno_ep_trywait(struct hno_ep *e)
{
    struct fid *fids[1] = {&e->cq->fid};
    return fi_trywait(e->fabric, fids, 1);
}

/* The endpoint's address; *len is the buffer size in, the address size out. */
int hno_ep_name(struct hno_ep *e, void *buf, size_t *len)
{
    return fi_getname(e->pep ? &e->pep->fid : &e->ep->fid, buf, len);
}

int hno_av_insert(struct hno_ep *e, const void *addr, uint64_t *fi_addr)
{
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    int n = fi_av_insert(e->av, addr, 1, &a, 0, NULL);
    if (n < 0)
        return n;
    if (n != 1)
        return -FI_EADDRNOTAVAIL;
    *fi_addr = a;
    return 0;
}

/* An event queue for connection events, with the wait object the provider's connection
 * management needs to progress. */
static int eq_open(struct hno_domain *d, struct hno_ep *e)
{
    struct fi_eq_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.wait_obj = FI_WAIT_UNSPEC;
    return fi_eq_open(d->fabric, &attr, &e->eq, NULL);
}

/* A connected endpoint (FI_EP_MSG) on its own completion and event queues, enabled. info:
 * the domain's entry (connecting side) or a connection request's (accepting side). */
static int msg_ep_open(struct hno_domain *d, struct fi_info *info, struct hno_ep **out)
{
    struct hno_ep *e = calloc(1, sizeof(*e));
    int rc;

    *out = NULL;
    if (!e)
        return -FI_ENOMEM;
    e->fabric = d->fabric;
    rc = cq_open(d, e);
    if (rc == 0)
        rc = eq_open(d, e);
    if (rc == 0)
        rc = fi_endpoint(d->domain, info, &e->ep, NULL);
    if (rc == 0)
        rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0)
        rc = fi_ep_bind(e->ep, &e->eq->fid, 0);
    if (rc == 0)
        rc = fi_enable(e->ep);
    if (rc != 0) {
        ep_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* A listener (passive endpoint) on the domain's interface, listening; hno_ep_name gives its
 * address. */
int hno_msg_listen(struct hno_domain *d, struct hno_ep **out)
{
    struct hno_ep *e = calloc(1, sizeof(*e));
    int rc;

    *out = NULL;
    if (!e)
        return -FI_ENOMEM;
    e->fabric = d->fabric;
    e->wait_fd = -1;
    rc = eq_open(d, e);
    if (rc == 0)
        rc = fi_passive_ep(d->fabric, d->info, &e->pep, NULL);
    if (rc == 0)
        rc = fi_pep_bind(e->pep, &e->eq->fid, 0);
    if (rc == 0)
        rc = fi_listen(e->pep);
    if (rc != 0) {
        ep_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* Opens a connected endpoint and starts connecting it to the listener at addr, sending
 * param (the listener sees it with the request). */
int hno_msg_connect(struct hno_domain *d, const void *addr, const void *param, size_t paramlen,
                    struct hno_ep **out)
{
    int rc = msg_ep_open(d, d->info, out);
    if (rc != 0)
        return rc;
    rc = fi_connect((*out)->ep, addr, param, paramlen);
    if (rc != 0) {
        ep_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Room for an event with its connection data. */
union hno_cm_buf {
    struct fi_eq_cm_entry entry;
    uint64_t space[64];
};

/* The error of an event queue's failed event, as a negative code. */
static int eq_error(struct fid_eq *eq)
{
    struct fi_eq_err_entry err;
    ssize_t n;

    memset(&err, 0, sizeof(err));
    n = fi_eq_readerr(eq, &err, 0);
    if (n == -FI_EAGAIN)
        return 0;
    if (n < 0)
        return (int)n;
    return -(err.err ? err.err : FI_EOTHER);
}

/*
 * Reads the listener's next event: 1 when it is a connection request (its fi_info in *info, to
 * be passed to hno_msg_accept or hno_msg_reject; its data in param, *paramlen bytes, buffer
 * size in), 0 when there is none (or it was of no interest), a negative code for an incoming
 * connection that failed.
 */
int hno_msg_connreq(struct hno_ep *l, struct fi_info **info, void *param, size_t *paramlen)
{
    union hno_cm_buf buf;
    uint32_t event = 0;
    ssize_t n;
    size_t got;

    *info = NULL;
    n = fi_eq_read(l->eq, &event, &buf, sizeof(buf), 0);
    if (n == -FI_EAGAIN)
        return 0;
    if (n == -FI_EAVAIL)
        return eq_error(l->eq);
    if (n < 0)
        return (int)n;
    if (event != FI_CONNREQ) {
        if (buf.entry.info)
            fi_freeinfo(buf.entry.info);
        return 0;
    }
    got = (size_t)n > sizeof(buf.entry) ? (size_t)n - sizeof(buf.entry) : 0;
    if (got > *paramlen)
        got = *paramlen;
    memcpy(param, buf.entry.data, got);
    *paramlen = got;
    *info = buf.entry.info;
    return 1;
}

/* Accepts a connection request on a new connected endpoint; frees info. */
int hno_msg_accept(struct hno_domain *d, struct fi_info *info, struct hno_ep **out)
{
    int rc = msg_ep_open(d, info, out);
    if (rc == 0) {
        rc = fi_accept((*out)->ep, NULL, 0);
        if (rc != 0) {
            ep_free(*out);
            *out = NULL;
        }
    }
    fi_freeinfo(info);
    return rc;
}

/* Refuses a connection request; frees info. */
void hno_msg_reject(struct hno_ep *l, struct fi_info *info)
{
    fi_reject(l->pep, info->handle, NULL, 0);
    fi_freeinfo(info);
}

/* A connected endpoint's next connection event: 1 connected, 2 shut down, 0 nothing new,
 * a negative code when the connection failed (refused, unreachable, reset). */
int hno_msg_event(struct hno_ep *e)
{
    union hno_cm_buf buf;
    uint32_t event = 0;
    ssize_t n = fi_eq_read(e->eq, &event, &buf, sizeof(buf), 0);

    if (n == -FI_EAGAIN)
        return 0;
    if (n == -FI_EAVAIL)
        return eq_error(e->eq);
    if (n < 0)
        return (int)n;
    if (event == FI_CONNECTED)
        return 1;
    if (event == FI_SHUTDOWN)
        return 2;
    return 0;
}

/* A plain message carrying data (the plugin's tag) in its completion at the receiver. */
ssize_t hno_senddata(struct hno_ep *e, const void *buf, size_t len, void *desc, uint64_t data,
                     void *context)
{
    return fi_senddata(e->ep, buf, len, desc, data, 0, context);
}

/*
 * One message made of head then data (data may be empty): a plain message carrying tag as
 * completion data (msg 1), or a tagged message to dest (msg 0). Unregistered buffers: only for
 * providers without FI_MR_LOCAL.
 */
ssize_t hno_send_head(struct hno_ep *e, int msg, const void *head, size_t headlen,
                      const void *data, size_t len, uint64_t tag, uint64_t dest, void *context)
{
    struct iovec iov[2];
    size_t n = len ? 2 : 1;

    iov[0].iov_base = (void *)head;
    iov[0].iov_len = headlen;
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    if (msg) {
        struct fi_msg m;
        memset(&m, 0, sizeof(m));
        m.msg_iov = iov;
        m.iov_count = n;
        m.context = context;
        m.data = tag;
        return fi_sendmsg(e->ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION);
    } else {
        struct fi_msg_tagged m;
        memset(&m, 0, sizeof(m));
        m.msg_iov = iov;
        m.iov_count = n;
        m.addr = dest;
        m.tag = tag;
        m.context = context;
        return fi_tsendmsg(e->ep, &m, FI_COMPLETION);
    }
}

/* A receive for the next plain message. */
ssize_t hno_recv(struct hno_ep *e, void *buf, size_t len, void *desc, void *context)
{
    return fi_recv(e->ep, buf, len, desc, 0, context);
}

ssize_t hno_tsend(struct hno_ep *e, const void *buf, size_t len, void *desc, uint64_t dest,
                  uint64_t tag, void *context)
{
    return fi_tsend(e->ep, buf, len, desc, dest, tag, context);
}

ssize_t hno_trecv(struct hno_ep *e, void *buf, size_t len, void *desc, uint64_t tag,
                  void *context)
{
    return fi_trecv(e->ep, buf, len, desc, FI_ADDR_UNSPEC, tag, 0, context);
}

ssize_t hno_writedata(struct hno_ep *e, const void *buf, size_t len, void *desc, uint64_t imm,
                      uint64_t dest, uint64_t addr, uint64_t key, void *context)
{
    return fi_writedata(e->ep, buf, len, desc, imm, dest, addr, key, context);
}

/*
 * Reads up to n completions. A failed operation is returned alone, as one entry with err set;
 * msg then holds the provider's explanation.
 */
ssize_t hno_cq_read(struct hno_ep *e, struct hno_cqe *out, size_t n, char *msg, size_t msglen)
{
    struct fi_cq_data_entry buf[16];
    struct fi_cq_err_entry err;
    ssize_t got, i;

    if (n > 16)
        n = 16;
    got = fi_cq_read(e->cq, buf, n);
    if (got == -FI_EAGAIN)
        return 0;
    if (got == -FI_EAVAIL) {
        memset(&err, 0, sizeof(err));
        got = fi_cq_readerr(e->cq, &err, 0);
        if (got == -FI_EAGAIN)
            return 0;
        if (got < 0)
            return got;
        out[0].context = err.op_context;
        out[0].flags = err.flags;
        out[0].len = err.len;
        out[0].data = err.data;
        out[0].err = err.err ? err.err : FI_EOTHER;
        out[0].prov_err = err.prov_errno;
        if (msg && msglen) {
            const char *s = fi_cq_strerror(e->cq, err.prov_errno, err.err_data, NULL, 0);
            msg[0] = '\0';
            if (s) {
                strncpy(msg, s, msglen - 1);
                msg[msglen - 1] = '\0';
            }
        }
        return 1;
    }
    if (got < 0)
        return got;
    for (i = 0; i < got; i++) {
        out[i].context = buf[i].op_context;
        out[i].flags = buf[i].flags;
        out[i].len = buf[i].len;
        out[i].data = buf[i].data;
        out[i].err = 0;
        out[i].prov_err = 0;
    }
    return got;
}

/* Flags of struct hno_cqe that Rust needs. */
uint64_t hno_flag_remote_cq_data(void)
{
    return FI_REMOTE_CQ_DATA;
}

/*
 * Registers [buf, buf + len) on the domain for local use and, with remote, for remote writes.
 * requested_key is used when the provider lets the caller choose keys.
 */
int hno_mr_reg(struct hno_domain *d, void *buf, size_t len, int remote, uint64_t requested_key,
               struct fid_mr **mr, void **desc, uint64_t *key)
{
    uint64_t access = FI_SEND | FI_RECV;
    int rc;

    if (remote)
        access |= FI_WRITE | FI_REMOTE_WRITE;
    rc = fi_mr_reg(d->domain, buf, len, access, 0, requested_key, 0, mr, NULL);
    if (rc != 0)
        return rc;
    *desc = fi_mr_desc(*mr);
    *key = fi_mr_key(*mr);
    if (*key == FI_KEY_NOTAVAIL) {
        fi_close(&(*mr)->fid);
        *mr = NULL;
        return -FI_ENOKEY;
    }
    return 0;
}

void hno_mr_close(struct fid_mr *mr)
{
    fi_close(&mr->fid);
}

/* The mr_mode bits the plugin acts on. */
uint64_t hno_mr_mode_local(void)
{
    return FI_MR_LOCAL;
}

uint64_t hno_mr_mode_virt_addr(void)
{
    return FI_MR_VIRT_ADDR;
}

uint64_t hno_mr_mode_prov_key(void)
{
    return FI_MR_PROV_KEY;
}

uint64_t hno_cap_rma(void)
{
    return FI_RMA;
}

int hno_err_truncated(void)
{
    return FI_ETRUNC;
}

int hno_err_again(void)
{
    return FI_EAGAIN;
}
