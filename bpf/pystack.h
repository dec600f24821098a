/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The Python frames of the calling thread, innermost first, for a notable call of a
 * CPython process (3.9 to 3.14, GIL builds). Userspace finds a process's _PyRuntime and
 * the offsets of its version (internal/pyframes) and writes them to py_procs; here the
 * walk goes from _PyRuntime to the interpreter, along its thread states to the one of
 * this thread, and out along its frames, keeping for each frame its code object and
 * instruction (pointer, or f_lasti before 3.11). Userspace reads the code objects
 * (file, function, line table) and turns the instruction into a line. Nothing here
 * dereferences what it reads but through bpf_probe_read_user, so a wrong offset or a
 * freed object gives a wrong or short stack, never a fault. */
#pragma once

#include "common.h"

#define PY_FRAMES_MAX 32   /* frames kept; a power of two */
#define PY_WALK_MAX 64     /* frames visited, skipped ones included */
#define PY_THREADS_MAX 64  /* thread states searched for the calling thread */

/* Where a process's Python state is: its _PyRuntime and its version's offsets, -1 for
 * a field the version does not have. Written by userspace (probes.SetPythonProcess). */
struct py_proc {
	__u64 runtime;           /* address of _PyRuntime */
	__u64 code_tag_mask;     /* bits cleared from a frame's code pointer (3.14's _PyStackRef) */
	__s16 interp_head;       /* _PyRuntimeState.interpreters.head */
	__s16 threads_head;      /* PyInterpreterState's first thread state */
	__s16 thread_next;       /* PyThreadState.next */
	__s16 native_thread_id;  /* PyThreadState.native_thread_id (3.11+), -1 before */
	__s16 thread_id;         /* PyThreadState.thread_id: pthread_self, the FS base */
	__s16 thread_frame;      /* tstate->frame, ->cframe or ->current_frame */
	__s16 cframe_current;    /* _PyCFrame.current_frame (3.11, 3.12), -1 otherwise */
	__s16 frame_previous;
	__s16 frame_code;
	__s16 frame_instr;
	__s16 frame_owner;       /* the owner byte (3.11+), -1 before */
	__u8 owner_skip;         /* bit n set: frames whose owner is n run no Python code */
	__u8 _pad[5];
};

enum py_stack_status {
	PY_STACK_OK = 0,
	PY_STACK_NO_THREAD = 1,  /* no thread state of the calling thread (a thread that never ran Python) */
	PY_STACK_TRUNCATED = 2,  /* more frames than PY_FRAMES_MAX or PY_WALK_MAX: the outermost are cut */
};

struct py_frame {
	__u64 code;   /* the PyCodeObject */
	__u64 instr;  /* prev_instr / instr_ptr (3.11+); f_lasti in the low 32 bits before */
};

struct py_stack {
	__u8 frames;  /* frames kept, innermost first */
	__u8 status;  /* enum py_stack_status */
	__u8 _pad[6];
	struct py_frame frame[PY_FRAMES_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/* The stack being read, per CPU: the walk's loops are bpf_loop callbacks (the
 * verifier checks a callback once, where an open-coded walk of 64 frames is too many
 * states), and they fill this; the caller copies it into its record. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_stack);
} py_scratch SEC(".maps");

static __always_inline __u64 py_word(__u64 base, __s16 off)
{
	__u64 v = 0;
	if (!base || off < 0 || bpf_probe_read_user(&v, sizeof(v), (void *)(base + off)))
		return 0;
	return v;
}

struct py_thread_search {
	__u64 ts;     /* the thread state looked at */
	__u64 want;   /* the calling thread's id as the thread state keeps it */
	__s16 id_field, next;
	__u64 found;
};

static long py_thread_step(__u64 index, void *arg)
{
	struct py_thread_search *s = arg;
	if (!s->ts)
		return 1;
	if (py_word(s->ts, s->id_field) == s->want) {
		s->found = s->ts;
		return 1;
	}
	s->ts = py_word(s->ts, s->next);
	return 0;
}

struct py_frame_walk {
	struct py_proc pp;
	__u64 frame;
	__u32 n;
	__u8 truncated;
};

static long py_frame_step(__u64 index, void *arg)
{
	struct py_frame_walk *w = arg;
	if (!w->frame)
		return 1;
	if (w->pp.frame_owner >= 0) {
		__u8 owner = 0;
		bpf_probe_read_user(&owner, sizeof(owner), (void *)(w->frame + w->pp.frame_owner));
		if (owner < 8 && (w->pp.owner_skip >> owner) & 1) {
			w->frame = py_word(w->frame, w->pp.frame_previous);
			return 0;
		}
	}
	__u64 code = py_word(w->frame, w->pp.frame_code) & ~w->pp.code_tag_mask;
	if (!code) {
		w->frame = 0;
		return 1;
	}
	if (w->n >= PY_FRAMES_MAX) {
		w->truncated = 1;
		return 1;
	}
	__u32 zero = 0;
	struct py_stack *out = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!out)
		return 1;
	out->frame[w->n & (PY_FRAMES_MAX - 1)].code = code;
	out->frame[w->n & (PY_FRAMES_MAX - 1)].instr = py_word(w->frame, w->pp.frame_instr);
	w->n++;
	w->frame = py_word(w->frame, w->pp.frame_previous);
	return 0;
}

/* read_py_stack reads the calling thread's Python frames into the CPU's py_scratch and
 * returns it; NULL when the process is not a known Python process. */
static __always_inline struct py_stack *read_py_stack(__u32 tgid, __u32 tid)
{
	const struct py_proc *pp = bpf_map_lookup_elem(&py_procs, &tgid);
	__u32 zero = 0;
	struct py_stack *out = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!pp || !out)
		return NULL;
	out->frames = 0;
	out->status = PY_STACK_OK;

	struct py_thread_search s = {.id_field = pp->native_thread_id, .next = pp->thread_next, .want = tid};
	if (s.id_field < 0) {
		/* Before 3.11 a thread state knows its thread by pthread_self(), which with
		 * glibc on x86_64 is the thread's FS base. */
		struct task_struct *task = bpf_get_current_task_btf();
		s.want = BPF_CORE_READ(task, thread.fsbase);
		s.id_field = pp->thread_id;
	}
	s.ts = py_word(py_word(pp->runtime, pp->interp_head), pp->threads_head);
	bpf_loop(PY_THREADS_MAX, py_thread_step, &s, 0);
	if (!s.found) {
		out->status = PY_STACK_NO_THREAD;
		return out;
	}

	struct py_frame_walk w = {.pp = *pp};
	w.frame = py_word(s.found, pp->thread_frame);
	if (pp->cframe_current >= 0)
		w.frame = py_word(w.frame, pp->cframe_current);
	bpf_loop(PY_WALK_MAX, py_frame_step, &w, 0);
	if (w.truncated || w.frame)
		out->status = PY_STACK_TRUNCATED;
	out->frames = w.n;
	return out;
}
