/*
 * libibverbs.so.1: enough of the verbs API for an RDMA-using process (NCCL's IB transport)
 * to find a device and wait for its asynchronous events, which tests inject by hand.
 *
 * FAKEIBV_DEVICES (default 1) devices are listed as mlx5_0, mlx5_1, ... A process can
 * allocate a protection domain and create queue pairs on a device, as NCCL's IB
 * transport does on the NICs it uses: that is where a probe learns which NIC a rank
 * sends over. The queue pairs carry nothing. When
 * FAKEIBV_EVENT_FIFO names a path, ibv_open_device creates that FIFO if needed and
 * ibv_get_async_event blocks reading lines from it: "EVENT_TYPE [PORT]", the numeric
 * enum ibv_event_type value, e.g. `echo 10 1 > fifo` for IBV_EVENT_PORT_ERR on port 1.
 * Without it, ibv_get_async_event blocks forever, as on a healthy fabric. The FIFO is
 * also the context's async_fd, so poll() on it works as with the real library.
 *
 * Every rank of a run opens the same FIFO. Reading byte by byte, they would split one
 * line between them ("10 1" read as "1" by one rank and "0 1", a CQ_ERR, by another),
 * so a rank holds an flock on the FIFO while it reads a line: each injected event goes
 * whole to exactly one rank.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_ibverbs.h"

#define MAX_DEVICES 16

static __attribute__((noinline)) void enter(void) { __asm__ volatile("" ::: "memory"); }

static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static struct ibv_device devices[MAX_DEVICES];
static int device_count;

static void make_devices(void)
{
	const char *v = getenv("FAKEIBV_DEVICES");
	device_count = v && *v ? atoi(v) : 1;
	if (device_count < 0)
		device_count = 0;
	if (device_count > MAX_DEVICES)
		device_count = MAX_DEVICES;
	for (int i = 0; i < device_count; i++) {
		struct ibv_device *d = &devices[i];
		d->node_type = IBV_NODE_CA;
		d->transport_type = IBV_TRANSPORT_IB;
		snprintf(d->name, sizeof(d->name), "mlx5_%d", i);
		snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", i);
		snprintf(d->dev_path, sizeof(d->dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
		snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/sys/class/infiniband/mlx5_%d", i);
	}
}

FAKEGPU_API struct ibv_device **ibv_get_device_list(int *num_devices)
{
	enter();
	pthread_once(&devices_once, make_devices);
	struct ibv_device **list = calloc((size_t)device_count + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < device_count; i++)
		list[i] = &devices[i];
	if (num_devices)
		*num_devices = device_count;
	return list;
}

FAKEGPU_API void ibv_free_device_list(struct ibv_device **list)
{
	enter();
	free(list);
}

FAKEGPU_API const char *ibv_get_device_name(struct ibv_device *device)
{
	enter();
	return device ? device->name : NULL;
}

/* The event source is opened read-write: a FIFO opened that way never blocks in open and
 * never reads EOF when the writer goes away, so each injected line is one event. */
FAKEGPU_API struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	enter();
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_context *ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->device = device;
	ctx->cmd_fd = -1;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	const char *fifo = getenv("FAKEIBV_EVENT_FIFO");
	if (fifo && *fifo) {
		if (mkfifo(fifo, 0600) != 0 && errno != EEXIST)
			goto fail;
		ctx->async_fd = open(fifo, O_RDWR | O_CLOEXEC);
	} else {
		int quiet[2];
		if (pipe2(quiet, O_CLOEXEC) != 0)
			goto fail;
		ctx->async_fd = quiet[0];
		ctx->cmd_fd = quiet[1]; /* the never-written end keeps reads blocking */
	}
	if (ctx->async_fd < 0)
		goto fail;
	return ctx;
fail:
	free(ctx);
	return NULL;
}

FAKEGPU_API int ibv_close_device(struct ibv_context *context)
{
	enter();
	if (!context)
		return EINVAL;
	close(context->async_fd);
	if (context->cmd_fd >= 0)
		close(context->cmd_fd);
	pthread_mutex_destroy(&context->mutex);
	free(context);
	return 0;
}

static int port_event(enum ibv_event_type t)
{
	return t == IBV_EVENT_PORT_ACTIVE || t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_LID_CHANGE ||
	       t == IBV_EVENT_PKEY_CHANGE || t == IBV_EVENT_SM_CHANGE || t == IBV_EVENT_CLIENT_REREGISTER ||
	       t == IBV_EVENT_GID_CHANGE;
}

/* read_line reads one line byte by byte, under an exclusive flock so that no other
 * process reading the same FIFO takes bytes from the middle of it; bytes past the
 * newline stay for the next call. -1 when the FIFO is closed or unreadable. */
static int read_line(int fd, char *line, size_t size)
{
	while (flock(fd, LOCK_EX) != 0)
		if (errno != EINTR)
			return -1;
	size_t len = 0;
	int ok = 0;
	for (;;) {
		char ch;
		ssize_t n = read(fd, &ch, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ok = -1;
			break;
		}
		if (ch == '\n')
			break;
		if (len < size - 1)
			line[len++] = ch;
	}
	line[len] = 0;
	flock(fd, LOCK_UN);
	return ok;
}

FAKEGPU_API int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	enter();
	if (!context || !event) {
		errno = EINVAL;
		return -1;
	}
	char line[64];
	for (;;) {
		if (read_line(context->async_fd, line, sizeof(line)) != 0)
			return -1;
		int type, port = 1;
		if (sscanf(line, "%d %d", &type, &port) < 1 || type < IBV_EVENT_CQ_ERR || type > IBV_EVENT_WQ_FATAL)
			continue; /* not an event: skip the line */
		memset(event, 0, sizeof(*event));
		event->event_type = (enum ibv_event_type)type;
		if (port_event(event->event_type))
			event->element.port_num = port;
		return 0;
	}
}

FAKEGPU_API void ibv_ack_async_event(struct ibv_async_event *event)
{
	enter();
	(void)event;
}

FAKEGPU_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	enter();
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->context = context;
	return pd;
}

FAKEGPU_API int ibv_dealloc_pd(struct ibv_pd *pd)
{
	enter();
	if (!pd)
		return EINVAL;
	free(pd);
	return 0;
}

FAKEGPU_API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	static uint32_t next_qp_num = 0x100;
	enter();
	if (!pd || !attr) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp *qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->context = pd->context;
	qp->qp_context = attr->qp_context;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->srq = attr->srq;
	qp->qp_num = __atomic_fetch_add(&next_qp_num, 1, __ATOMIC_RELAXED);
	qp->qp_type = attr->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	return qp;
}

FAKEGPU_API int ibv_destroy_qp(struct ibv_qp *qp)
{
	enter();
	if (!qp)
		return EINVAL;
	pthread_mutex_destroy(&qp->mutex);
	pthread_cond_destroy(&qp->cond);
	free(qp);
	return 0;
}
