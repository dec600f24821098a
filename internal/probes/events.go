package probes

import (
	"fmt"
	"unsafe"
)

// Event records as the BPF programs write them (types generated from bpf/common.h).
type (
	EventHeader   = cudaEventHeader
	CUDACall      = cudaCudaCallEvent
	SchedSwitchIn = hostSchedEvent
	ProcessEvent  = hostProcessEvent
	BlockIO       = hostBlockIoEvent
	TCPRetransmit = hostTcpRetransmitEvent
	// ProcessIdentity is a process's environment and comm, copied by the kernel at its
	// first traced call (Env[:EnvLen] is NUL-separated KEY=VALUE).
	ProcessIdentity = cudaProcessIdentityEvent
	// NCCLCall is one NCCL call; Hdr.TsNs is its entry, Hdr.TsNs+DurationNs its return.
	NCCLCall = ncclNcclCallEvent
	// RDMAAsyncEvent is one verbs asynchronous event a process received.
	RDMAAsyncEvent = rdmaRdmaAsyncEvent
	// LibraryMapped is a process that has just mapped a probed library's code.
	LibraryMapped = libmapLibraryMappedEvent
	// RDMAQueuePair is a verbs queue pair a process created: the NIC it sends over.
	RDMAQueuePair = rdmaRdmaQpEvent
	// CUDACallPy is a CUDA call record of a Python process (SetPythonProcess), with the
	// calling thread's Python frames.
	CUDACallPy = cudaCudaCallPyEvent
	// NCCLCallPy is an NCCL call of a Python process, with the calling thread's Python
	// frames.
	NCCLCallPy = ncclNcclCallPyEvent
)

// EventKind is enum event_kind.
type EventKind uint8

const (
	KindCUDACall      = EventKind(cudaEventKindEVENT_CUDA_CALL)
	KindSched         = EventKind(cudaEventKindEVENT_SCHED)
	KindFork          = EventKind(cudaEventKindEVENT_PROC_FORK)
	KindExec          = EventKind(cudaEventKindEVENT_PROC_EXEC)
	KindExit          = EventKind(cudaEventKindEVENT_PROC_EXIT)
	KindBlockIO       = EventKind(cudaEventKindEVENT_BLOCK_IO)
	KindTCPRetransmit = EventKind(cudaEventKindEVENT_TCP_RETRANSMIT)
	KindIdentity      = EventKind(cudaEventKindEVENT_PROC_IDENTITY)
	KindNCCLCall      = EventKind(cudaEventKindEVENT_NCCL_CALL)
	KindRDMAAsync     = EventKind(cudaEventKindEVENT_RDMA_ASYNC)
	KindCUDAThread    = EventKind(cudaEventKindEVENT_CUDA_THREAD)
	KindLibraryMapped = EventKind(cudaEventKindEVENT_LIBRARY_MAPPED)
	KindRDMAQP        = EventKind(cudaEventKindEVENT_RDMA_QP)
	KindCUDACallPy    = EventKind(cudaEventKindEVENT_CUDA_CALL_PY)
	KindNCCLCallPy    = EventKind(cudaEventKindEVENT_NCCL_CALL_PY)
)

// Handler receives decoded events. Pointers are valid only during the call: the
// record buffer is reused for the next event.
type Handler interface {
	// CUDACall is a call the kernel recorded: a notable one, or any when the
	// threshold is 0. Counted says whether it is already in the kernel's call
	// statistics (ReadCallStats); if not, the handler must count it.
	CUDACall(*CUDACall)
	// CUDAThread is a thread's first traced CUDA call: the thread drives a GPU.
	CUDAThread(*EventHeader)
	Sched(*SchedSwitchIn)
	Process(EventKind, *ProcessEvent)
	BlockIO(*BlockIO)
	TCPRetransmit(*TCPRetransmit)
	Identity(*ProcessIdentity)
	NCCLCall(*NCCLCall)
	RDMAAsync(*RDMAAsyncEvent)
}

// LibraryMapHandler is implemented by handlers that attach on first use: discovery,
// not the signal pipeline, wants these records, so Handler does not demand it and
// records reaching a handler without it are skipped.
type LibraryMapHandler interface {
	LibraryMapped(*LibraryMapped)
}

// PythonCallHandler is implemented by handlers that want a Python process's Python
// frames with its CUDA and NCCL call records; a handler without it gets the call alone.
type PythonCallHandler interface {
	CUDACallPy(*CUDACallPy)
	NCCLCallPy(*NCCLCallPy)
}

// QueuePairHandler is implemented by handlers that bind processes to the NICs they
// send over; records reaching a handler without it are skipped.
type QueuePairHandler interface {
	RDMAQueuePair(*RDMAQueuePair)
}

var kindOffset = unsafe.Offsetof(EventHeader{}.Kind)

// Decode hands one raw ring-buffer record to h. It does not copy: records are cast in
// place, which is what keeps userspace decoding in the millions of events per second.
func Decode(raw []byte, h Handler) error {
	if uintptr(len(raw)) <= kindOffset {
		return fmt.Errorf("short event record: %d bytes", len(raw))
	}
	kind := EventKind(raw[kindOffset])
	switch kind {
	case KindCUDACall:
		if ev, ok := cast[CUDACall](raw); ok {
			h.CUDACall(ev)
			return nil
		}
	case KindCUDACallPy:
		if ev, ok := cast[CUDACallPy](raw); ok {
			if ph, wants := h.(PythonCallHandler); wants {
				ph.CUDACallPy(ev)
			} else {
				h.CUDACall(&ev.Call)
			}
			return nil
		}
	case KindCUDAThread:
		if ev, ok := cast[EventHeader](raw); ok {
			h.CUDAThread(ev)
			return nil
		}
	case KindSched:
		if ev, ok := cast[SchedSwitchIn](raw); ok {
			h.Sched(ev)
			return nil
		}
	case KindFork, KindExec, KindExit:
		if ev, ok := cast[ProcessEvent](raw); ok {
			h.Process(kind, ev)
			return nil
		}
	case KindBlockIO:
		if ev, ok := cast[BlockIO](raw); ok {
			h.BlockIO(ev)
			return nil
		}
	case KindTCPRetransmit:
		if ev, ok := cast[TCPRetransmit](raw); ok {
			h.TCPRetransmit(ev)
			return nil
		}
	case KindIdentity:
		if ev, ok := cast[ProcessIdentity](raw); ok {
			h.Identity(ev)
			return nil
		}
	case KindNCCLCall:
		if ev, ok := cast[NCCLCall](raw); ok {
			h.NCCLCall(ev)
			return nil
		}
	case KindNCCLCallPy:
		if ev, ok := cast[NCCLCallPy](raw); ok {
			if ph, wants := h.(PythonCallHandler); wants {
				ph.NCCLCallPy(ev)
			} else {
				h.NCCLCall(&ev.Call)
			}
			return nil
		}
	case KindRDMAAsync:
		if ev, ok := cast[RDMAAsyncEvent](raw); ok {
			h.RDMAAsync(ev)
			return nil
		}
	case KindRDMAQP:
		if ev, ok := cast[RDMAQueuePair](raw); ok {
			if qh, wants := h.(QueuePairHandler); wants {
				qh.RDMAQueuePair(ev)
			}
			return nil
		}
	case KindLibraryMapped:
		if ev, ok := cast[LibraryMapped](raw); ok {
			if lh, wants := h.(LibraryMapHandler); wants {
				lh.LibraryMapped(ev)
			}
			return nil
		}
	default:
		return fmt.Errorf("unknown event kind %d", kind)
	}
	return fmt.Errorf("event kind %d: record of %d bytes is too short", kind, len(raw))
}

func cast[T any](raw []byte) (*T, bool) {
	var zero T
	if uintptr(len(raw)) < unsafe.Sizeof(zero) {
		return nil, false
	}
	return (*T)(unsafe.Pointer(&raw[0])), true
}

// EnvBytes returns the environment block the kernel copied.
func (ev *ProcessIdentity) EnvBytes() []byte {
	n := min(int(ev.EnvLen), len(ev.Env))
	return unsafe.Slice((*byte)(unsafe.Pointer(&ev.Env[0])), n)
}

// Executable returns the base name of the process's executable, as the kernel copied
// it ("" if it had none), or its comm when the name was not copied.
func (ev *ProcessIdentity) Executable() string {
	if name := cString(ev.Exe[:]); name != "" {
		return name
	}
	return Comm(ev.Comm)
}

// SchedWait is enum sched_wait: what a traced thread's wait for a CPU followed, at its
// switch-in (SchedSwitchIn.WaitKind).
type SchedWait uint8

const (
	// WaitNone: switched out blocked, and no wakeup seen; no preemptor.
	WaitNone = SchedWait(hostSchedWaitSCHED_WAIT_NONE)
	// WaitPreempted: switched out still runnable; the preemptor is the task that took
	// the CPU then, and the wait is the off-CPU time.
	WaitPreempted = SchedWait(hostSchedWaitSCHED_WAIT_PREEMPTED)
	// WaitWoken: switched out blocked, woken, then waited in the run queue (RunqNs); the
	// preemptor is the task that held the CPU until the switch-in, none (pid 0) if the
	// CPU was idle.
	WaitWoken = SchedWait(hostSchedWaitSCHED_WAIT_WOKEN)
)

// PreemptorName is the thread name (comm) of the task the thread waited behind for a
// CPU (see WaitKind); "" when it names none.
func (ev *SchedSwitchIn) PreemptorName() string { return Comm(ev.PreemptorComm) }

// SchedWaker is enum sched_waker: who ended a traced thread's voluntary wait
// (SchedSwitchIn.WakerKind).
type SchedWaker uint8

const (
	// WakerNone: preempted, or blocked with no wakeup seen (it blocked before the
	// programs attached, or the wakeup raced its switch-out).
	WakerNone = SchedWaker(hostSchedWakerSCHED_WAKER_NONE)
	// WakerTask: a task woke it; WakerPid, WakerTid and WakerComm name it.
	WakerTask = SchedWaker(hostSchedWakerSCHED_WAKER_TASK)
	// WakerInterrupt: it was woken from hardirq, NMI or softirq context (a timer's
	// expiry, a device's completion, a packet), where the current task is unrelated.
	WakerInterrupt = SchedWaker(hostSchedWakerSCHED_WAKER_INTERRUPT)
)

// WakerName is the thread name (comm) of the task that woke the thread; "" when none.
func (ev *SchedSwitchIn) WakerName() string { return Comm(ev.WakerComm) }

// BlockedOn names what a voluntary wait waited in, from the x86-64 system call it
// blocked in (SchedSwitchIn.SyscallNr, -1 for none).
type BlockedOn uint8

const (
	BlockedOther  BlockedOn = iota // any other system call, or none (a page fault)
	BlockedLock                    // futex, futex_waitv: a mutex, condition variable, join
	BlockedIO                      // file reads, writes, syncs, io_uring and AIO waits
	BlockedSleep                   // nanosleep, clock_nanosleep
	BlockedPoll                    // waiting for a file descriptor or a peer: poll, epoll, sockets
	BlockedDevice                  // ioctl: a driver call (real CUDA syncs block in one)
	BlockedOnCount
)

var blockedOnNames = [BlockedOnCount]string{"other", "lock", "io", "sleep", "poll", "device"}

func (b BlockedOn) String() string {
	if b < BlockedOnCount {
		return blockedOnNames[b]
	}
	return "other"
}

// x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
var blockedOnSyscall = map[int32]BlockedOn{
	202: BlockedLock, 449: BlockedLock, // futex, futex_waitv
	0: BlockedIO, 1: BlockedIO, 17: BlockedIO, 18: BlockedIO, 19: BlockedIO, 20: BlockedIO, // read, write, pread64, pwrite64, readv, writev
	295: BlockedIO, 296: BlockedIO, 327: BlockedIO, 328: BlockedIO, // preadv, pwritev, preadv2, pwritev2
	74: BlockedIO, 75: BlockedIO, 208: BlockedIO, 426: BlockedIO, // fsync, fdatasync, io_getevents, io_uring_enter
	35: BlockedSleep, 230: BlockedSleep, // nanosleep, clock_nanosleep
	7: BlockedPoll, 271: BlockedPoll, 23: BlockedPoll, 270: BlockedPoll, // poll, ppoll, select, pselect6
	232: BlockedPoll, 281: BlockedPoll, 441: BlockedPoll, // epoll_wait, epoll_pwait, epoll_pwait2
	45: BlockedPoll, 47: BlockedPoll, 44: BlockedPoll, 46: BlockedPoll, // recvfrom, recvmsg, sendto, sendmsg
	299: BlockedPoll, 307: BlockedPoll, // recvmmsg, sendmmsg
	43: BlockedPoll, 288: BlockedPoll, 42: BlockedPoll, // accept, accept4, connect
	16: BlockedDevice, // ioctl
}

// BlockedOnSyscall classifies the system call a thread blocked in.
func BlockedOnSyscall(nr int32) BlockedOn {
	if b, ok := blockedOnSyscall[nr]; ok {
		return b
	}
	return BlockedOther
}

// Comm returns a NUL-terminated kernel comm as a string.
func Comm(c [16]int8) string { return cString(c[:]) }

func cString(c []int8) string {
	b := make([]byte, 0, len(c))
	for _, ch := range c {
		if ch == 0 {
			break
		}
		b = append(b, byte(ch))
	}
	return string(b)
}

// HasPeer says whether the call names a peer (send/recv) or root (broadcast, reduce).
func (ev *NCCLCall) HasPeer() bool { return ev.Peer >= 0 }

// DeviceName is the verbs device the event came from (mlx5_0 ...).
func (ev *RDMAAsyncEvent) DeviceName() string { return cString(ev.Device[:]) }

// MappedLibrary is the library family the kernel matched by file name, and false for a
// value this build does not know.
func (ev *LibraryMapped) MappedLibrary() (Library, bool) {
	switch libmapMappedLibrary(ev.Library) {
	case libmapMappedLibraryMAPPED_CUDART:
		return LibCUDART, true
	case libmapMappedLibraryMAPPED_CUDA:
		return LibCUDA, true
	case libmapMappedLibraryMAPPED_NCCL:
		return LibNCCL, true
	case libmapMappedLibraryMAPPED_IBVERBS:
		return LibIBVerbs, true
	case libmapMappedLibraryMAPPED_HIP:
		return LibHIP, true
	}
	return "", false
}

// DeviceName is the NIC the queue pair was created on (context->device->name).
func (ev *RDMAQueuePair) DeviceName() string { return cString(ev.Device[:]) }

// FileName is the base name of the mapped file, as the kernel read it.
func (ev *LibraryMapped) FileName() string { return cString(ev.Name[:]) }

// DeviceNumber is the file's device as stat(2) reports it: the kernel records its
// internal encoding (major << 20 | minor).
func (ev *LibraryMapped) DeviceNumber() uint64 {
	major, minor := uint64(ev.Dev>>20), uint64(ev.Dev&0xfffff)
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12 | (major&^0xfff)<<32
}

// PyFrame is one Python frame as the kernel read it: the code object, and the
// instruction pointer (3.11+) or f_lasti (in the low 32 bits, before 3.11).
type PyFrame struct{ Code, Instr uint64 }

// Python stack status (enum py_stack_status).
const (
	PyStackOK        = 0
	PyStackNoThread  = 1 // the calling thread has no Python thread state
	PyStackTruncated = 2 // deeper than the kernel keeps: the outermost frames are cut
)

// PyFrames returns the record's Python frames, innermost first.
func (ev *CUDACallPy) PyFrames() []PyFrame {
	return pyFrames(ev.Stack.Frames, len(ev.Stack.Frame), func(i int) (uint64, uint64) {
		return ev.Stack.Frame[i].Code, ev.Stack.Frame[i].Instr
	})
}

// PyFrames returns the record's Python frames, innermost first.
func (ev *NCCLCallPy) PyFrames() []PyFrame {
	return pyFrames(ev.Stack.Frames, len(ev.Stack.Frame), func(i int) (uint64, uint64) {
		return ev.Stack.Frame[i].Code, ev.Stack.Frame[i].Instr
	})
}

// PyTruncated says whether the kernel cut the record's outermost Python frames.
func (ev *CUDACallPy) PyTruncated() bool { return ev.Stack.Status == PyStackTruncated }

// PyTruncated says whether the kernel cut the record's outermost Python frames.
func (ev *NCCLCallPy) PyTruncated() bool { return ev.Stack.Status == PyStackTruncated }

// pyFrames copies the first frames of a record's stack (each object's generated
// py_stack is a type of its own, with the same layout).
func pyFrames(frames uint8, capacity int, at func(i int) (code, instr uint64)) []PyFrame {
	out := make([]PyFrame, min(int(frames), capacity))
	for i := range out {
		out[i].Code, out[i].Instr = at(i)
	}
	return out
}
