// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* RDMA fabric events from libibverbs: ibv_get_async_event(context, event) blocks until the
 * device reports an asynchronous event (port down/up, QP or device fatal, GID change ...),
 * then fills *event. The entry keeps the pointers, the return reads what was filled in.
 * A fabric event matters to the whole host, so it is recorded from every process that
 * waits for one (NCCL's IB transport keeps a thread there), traced or not.
 *
 * ibv_create_qp says which NIC a process sends over: NCCL opens every verbs device at
 * init, but creates queue pairs only on the NICs its connections use. Queue pairs are
 * made at connection setup, not per message, so each is reported; userspace keeps those
 * of the processes it traces. */
#include "common.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const struct rdma_async_event *unused_rdma_async_event __attribute__((unused));
const struct rdma_qp_event *unused_rdma_qp_event __attribute__((unused));

struct async_wait {
	__u64 context; /* struct ibv_context * */
	__u64 event;   /* struct ibv_async_event * */
};

/* The one verbs call a thread can be inside; freed with the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct async_wait);
} async_waits SEC(".maps");

/* rdma-core layouts (stable ABI since libibverbs 1.1): struct ibv_async_event is a
 * 8-byte union (element: cq/qp/srq/wq pointer or int port_num) then enum event_type;
 * struct ibv_context starts with struct ibv_device *device, whose name[64] follows
 * two ops pointers and two enums, at offset 24. */
#define IBV_EVENT_TYPE_OFFSET 8
#define IBV_DEVICE_NAME_OFFSET 24
/* struct ibv_qp: context first; six pointers, then handle, qp_num, state, qp_type. */
#define IBV_QP_NUM_OFFSET 52
#define IBV_QP_TYPE_OFFSET 60

/* The enum ibv_event_type values that carry a port number in element.port_num. */
static __always_inline bool port_event(__u32 type)
{
	switch (type) {
	case 9:  /* IBV_EVENT_PORT_ACTIVE */
	case 10: /* IBV_EVENT_PORT_ERR */
	case 11: /* IBV_EVENT_LID_CHANGE */
	case 12: /* IBV_EVENT_PKEY_CHANGE */
	case 13: /* IBV_EVENT_SM_CHANGE */
	case 17: /* IBV_EVENT_CLIENT_REREGISTER */
	case 18: /* IBV_EVENT_GID_CHANGE */
		return true;
	}
	return false;
}

SEC("uprobe")
int BPF_KPROBE(enter_ibv_get_async_event)
{
	struct async_wait *w = bpf_task_storage_get(&async_waits, bpf_get_current_task_btf(), 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!w)
		return 0;
	w->context = PT_REGS_PARM1(ctx);
	w->event = PT_REGS_PARM2(ctx);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(leave_ibv_get_async_event)
{
	struct async_wait *w = bpf_task_storage_get(&async_waits, bpf_get_current_task_btf(), 0, 0);
	if (!w || !w->event) {
		count_drop(DROP_ENTRY_MISSING); /* attached while a thread was already waiting */
		return 0;
	}
	__u64 event = w->event, context = w->context;
	w->event = 0;
	if (PT_REGS_RC(ctx) != 0)
		return 0; /* no event: the wait failed */
	struct rdma_async_event *ev = reserve_event(sizeof(*ev));
	if (!ev)
		return 0;
	fill_header(&ev->hdr, EVENT_RDMA_ASYNC, bpf_ktime_get_ns());
	ev->event_type = 0;
	bpf_probe_read_user(&ev->event_type, sizeof(ev->event_type), (void *)(event + IBV_EVENT_TYPE_OFFSET));
	ev->port = -1;
	if (port_event(ev->event_type))
		bpf_probe_read_user(&ev->port, sizeof(ev->port), (void *)event);
	__builtin_memset(ev->device, 0, sizeof(ev->device));
	__u64 device = 0;
	if (context && bpf_probe_read_user(&device, sizeof(device), (void *)context) == 0 && device)
		bpf_probe_read_user_str(ev->device, sizeof(ev->device), (void *)(device + IBV_DEVICE_NAME_OFFSET));
	submit_event(ev);
	return 0;
}

/* The queue pair is read from what ibv_create_qp returns; the entry has nothing to keep
 * (the probe families attach an entry and a return program per function). */
SEC("uprobe")
int BPF_KPROBE(enter_ibv_create_qp)
{
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(leave_ibv_create_qp)
{
	__u64 qp = PT_REGS_RC(ctx);
	if (!qp)
		return 0; /* not created */
	struct rdma_qp_event *ev = reserve_event(sizeof(*ev));
	if (!ev)
		return 0;
	fill_header(&ev->hdr, EVENT_RDMA_QP, bpf_ktime_get_ns());
	ev->qp_num = 0;
	ev->qp_type = 0;
	bpf_probe_read_user(&ev->qp_num, sizeof(ev->qp_num), (void *)(qp + IBV_QP_NUM_OFFSET));
	bpf_probe_read_user(&ev->qp_type, sizeof(ev->qp_type), (void *)(qp + IBV_QP_TYPE_OFFSET));
	__builtin_memset(ev->device, 0, sizeof(ev->device));
	__u64 context = 0, device = 0;
	if (bpf_probe_read_user(&context, sizeof(context), (void *)qp) == 0 && context &&
	    bpf_probe_read_user(&device, sizeof(device), (void *)context) == 0 && device)
		bpf_probe_read_user_str(ev->device, sizeof(ev->device), (void *)(device + IBV_DEVICE_NAME_OFFSET));
	submit_event(ev);
	return 0;
}
