/*
 * The slice of libibverbs (rdma-core) the fake exports, with rdma-core's struct layouts:
 * the probes read struct ibv_async_event through the pointer ibv_get_async_event gets,
 * and may follow context->device->name.
 */
#ifndef FAKEGPU_FAKE_IBVERBS_H
#define FAKEGPU_FAKE_IBVERBS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fake_cuda.h"

enum ibv_node_type { IBV_NODE_UNKNOWN = -1, IBV_NODE_CA = 1 };
enum ibv_transport_type { IBV_TRANSPORT_UNKNOWN = -1, IBV_TRANSPORT_IB = 0 };

enum ibv_event_type {
	IBV_EVENT_CQ_ERR,
	IBV_EVENT_QP_FATAL,
	IBV_EVENT_QP_REQ_ERR,
	IBV_EVENT_QP_ACCESS_ERR,
	IBV_EVENT_COMM_EST,
	IBV_EVENT_SQ_DRAINED,
	IBV_EVENT_PATH_MIG,
	IBV_EVENT_PATH_MIG_ERR,
	IBV_EVENT_DEVICE_FATAL,
	IBV_EVENT_PORT_ACTIVE,
	IBV_EVENT_PORT_ERR,
	IBV_EVENT_LID_CHANGE,
	IBV_EVENT_PKEY_CHANGE,
	IBV_EVENT_SM_CHANGE,
	IBV_EVENT_SRQ_ERR,
	IBV_EVENT_SRQ_LIMIT_REACHED,
	IBV_EVENT_QP_LAST_WQE_REACHED,
	IBV_EVENT_CLIENT_REREGISTER,
	IBV_EVENT_GID_CHANGE,
	IBV_EVENT_WQ_FATAL,
};

struct ibv_cq;
struct ibv_qp;
struct ibv_srq;
struct ibv_wq;

struct ibv_async_event {
	union {
		struct ibv_cq *cq;
		struct ibv_qp *qp;
		struct ibv_srq *srq;
		struct ibv_wq *wq;
		int port_num;
	} element;
	enum ibv_event_type event_type;
};

struct ibv_device {
	void *_ops[2]; /* struct _ibv_device_ops: two function pointers */
	enum ibv_node_type node_type;
	enum ibv_transport_type transport_type;
	char name[64];
	char dev_name[64];
	char dev_path[256];
	char ibdev_path[256];
};

struct ibv_context {
	struct ibv_device *device;
	void *ops[32]; /* struct ibv_context_ops: 32 function pointers in rdma-core */
	int cmd_fd;
	int async_fd;
	int num_comp_vectors;
	pthread_mutex_t mutex;
	void *abi_compat;
};

/* rdma-core's protection domain and queue pair, as far as the probes read them: both
 * start with the context, whose device names the NIC. */
struct ibv_pd {
	struct ibv_context *context;
	uint32_t handle;
};

struct ibv_qp_cap {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
};

enum ibv_qp_type { IBV_QPT_RC = 2, IBV_QPT_UC, IBV_QPT_UD };

struct ibv_qp_init_attr {
	void *qp_context;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	struct ibv_qp_cap cap;
	enum ibv_qp_type qp_type;
	int sq_sig_all;
};

struct ibv_qp {
	struct ibv_context *context;
	void *qp_context;
	struct ibv_pd *pd;
	struct ibv_cq *send_cq;
	struct ibv_cq *recv_cq;
	struct ibv_srq *srq;
	uint32_t handle;
	uint32_t qp_num;
	int state;
	enum ibv_qp_type qp_type;
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	uint32_t events_completed;
};

FAKEGPU_API struct ibv_device **ibv_get_device_list(int *num_devices);
FAKEGPU_API void ibv_free_device_list(struct ibv_device **list);
FAKEGPU_API const char *ibv_get_device_name(struct ibv_device *device);
FAKEGPU_API struct ibv_context *ibv_open_device(struct ibv_device *device);
FAKEGPU_API int ibv_close_device(struct ibv_context *context);
FAKEGPU_API int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event);
FAKEGPU_API void ibv_ack_async_event(struct ibv_async_event *event);
FAKEGPU_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *context);
FAKEGPU_API int ibv_dealloc_pd(struct ibv_pd *pd);
FAKEGPU_API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
FAKEGPU_API int ibv_destroy_qp(struct ibv_qp *qp);

_Static_assert(sizeof(struct ibv_async_event) == 16, "ibv_async_event");
_Static_assert(offsetof(struct ibv_async_event, event_type) == 8, "ibv_async_event.event_type");
_Static_assert(offsetof(struct ibv_device, name) == 24, "ibv_device.name");
_Static_assert(offsetof(struct ibv_pd, context) == 0, "ibv_pd.context");
_Static_assert(offsetof(struct ibv_qp, qp_num) == 52, "ibv_qp.qp_num");
_Static_assert(offsetof(struct ibv_context, cmd_fd) == 264, "ibv_context.cmd_fd");
_Static_assert(offsetof(struct ibv_context, async_fd) == 268, "ibv_context.async_fd");

#endif
