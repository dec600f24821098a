package probes

import "github.com/cilium/ebpf"

// NCCL and verbs libraries. LibNCCL also names libraries that carry NCCL inside them
// (libtorch_cuda.so of PyTorch builds that link NCCL statically): whatever NCCL symbols
// such a file exports are probed, the rest are reported missing.
const (
	LibNCCL    Library = "libnccl"
	LibIBVerbs Library = "libibverbs"
)

// NCCLAPI is one probed NCCL function; ID is enum nccl_api, the attach cookie.
type NCCLAPI struct {
	ID     uint32
	Symbol string
	entry  func(*ncclPrograms) *ebpf.Program
}

func ncclInitRank(p *ncclPrograms) *ebpf.Program  { return p.EnterNcclInitRank }
func ncclInitAll(p *ncclPrograms) *ebpf.Program   { return p.EnterNcclInitAll }
func ncclSplit(p *ncclPrograms) *ebpf.Program     { return p.EnterNcclSplit }
func ncclComm(p *ncclPrograms) *ebpf.Program      { return p.EnterNcclComm }
func ncclReduceAll(p *ncclPrograms) *ebpf.Program { return p.EnterNcclReduceAll }
func ncclAllGather(p *ncclPrograms) *ebpf.Program { return p.EnterNcclAllGather }
func ncclBroadcast(p *ncclPrograms) *ebpf.Program { return p.EnterNcclBroadcast }
func ncclReduce(p *ncclPrograms) *ebpf.Program    { return p.EnterNcclReduce }
func ncclPeer(p *ncclPrograms) *ebpf.Program      { return p.EnterNcclPeer }
func ncclGroup(p *ncclPrograms) *ebpf.Program     { return p.EnterNcclGroup }
func ncclQuery(p *ncclPrograms) *ebpf.Program     { return p.EnterNcclCommQuery }

// NCCL API IDs, for callers that single some out.
const (
	NCCLCommInitRank       = uint32(ncclNcclApiNCCL_COMM_INIT_RANK)
	NCCLCommInitRankConfig = uint32(ncclNcclApiNCCL_COMM_INIT_RANK_CONFIG)
	NCCLCommInitAll        = uint32(ncclNcclApiNCCL_COMM_INIT_ALL)
	NCCLCommSplit          = uint32(ncclNcclApiNCCL_COMM_SPLIT)
	NCCLCommDestroy        = uint32(ncclNcclApiNCCL_COMM_DESTROY)
	NCCLCommAbort          = uint32(ncclNcclApiNCCL_COMM_ABORT)
	NCCLAllReduce          = uint32(ncclNcclApiNCCL_ALL_REDUCE)
	NCCLAllGather          = uint32(ncclNcclApiNCCL_ALL_GATHER)
	NCCLReduceScatter      = uint32(ncclNcclApiNCCL_REDUCE_SCATTER)
	NCCLBroadcast          = uint32(ncclNcclApiNCCL_BROADCAST)
	NCCLBcast              = uint32(ncclNcclApiNCCL_BCAST)
	NCCLReduce             = uint32(ncclNcclApiNCCL_REDUCE)
	NCCLSend               = uint32(ncclNcclApiNCCL_SEND)
	NCCLRecv               = uint32(ncclNcclApiNCCL_RECV)
	NCCLGroupStart         = uint32(ncclNcclApiNCCL_GROUP_START)
	NCCLGroupEnd           = uint32(ncclNcclApiNCCL_GROUP_END)
	NCCLCommCount          = uint32(ncclNcclApiNCCL_COMM_COUNT)
	NCCLCommUserRank       = uint32(ncclNcclApiNCCL_COMM_USER_RANK)
	// NCCLAPICount bounds NCCL API IDs: every ID is in [1, NCCLAPICount).
	NCCLAPICount = int(ncclNcclApiNCCL_API_COUNT)
)

// NCCLAPIs lists every probed NCCL function.
var NCCLAPIs = []NCCLAPI{
	{NCCLCommInitRank, "ncclCommInitRank", ncclInitRank},
	{NCCLCommInitRankConfig, "ncclCommInitRankConfig", ncclInitRank},
	{NCCLCommInitAll, "ncclCommInitAll", ncclInitAll},
	{NCCLCommSplit, "ncclCommSplit", ncclSplit},
	{NCCLCommDestroy, "ncclCommDestroy", ncclComm},
	{NCCLCommAbort, "ncclCommAbort", ncclComm},
	{NCCLAllReduce, "ncclAllReduce", ncclReduceAll},
	{NCCLAllGather, "ncclAllGather", ncclAllGather},
	{NCCLReduceScatter, "ncclReduceScatter", ncclReduceAll},
	{NCCLBroadcast, "ncclBroadcast", ncclBroadcast},
	{NCCLBcast, "ncclBcast", ncclPeer},
	{NCCLReduce, "ncclReduce", ncclReduce},
	{NCCLSend, "ncclSend", ncclPeer},
	{NCCLRecv, "ncclRecv", ncclPeer},
	{NCCLGroupStart, "ncclGroupStart", ncclGroup},
	{NCCLGroupEnd, "ncclGroupEnd", ncclGroup},
	// Probed to learn a split communicator's rank and size; they make no event.
	{NCCLCommCount, "ncclCommCount", ncclQuery},
	{NCCLCommUserRank, "ncclCommUserRank", ncclQuery},
}

var ncclNames = func() [NCCLAPICount]string {
	var names [NCCLAPICount]string
	for _, a := range NCCLAPIs {
		names[a.ID] = a.Symbol
	}
	names[0] = "unknown"
	return names
}()

// NCCLAPIName is the function name of an NCCL API ID, "unknown" for anything else.
func NCCLAPIName(id uint32) string {
	if int(id) < NCCLAPICount && ncclNames[id] != "" {
		return ncclNames[id]
	}
	return "unknown"
}

// IsCollective says whether an NCCL API is a collective (every rank of the
// communicator calls it, in the same order).
func IsCollective(id uint32) bool {
	switch id {
	case NCCLAllReduce, NCCLAllGather, NCCLReduceScatter, NCCLBroadcast, NCCLBcast, NCCLReduce:
		return true
	}
	return false
}

var ncclDataTypes = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"}

// NCCLDataType names an ncclDataType_t ("" for a call that has none).
func NCCLDataType(v uint8) string {
	if int(v) < len(ncclDataTypes) {
		return ncclDataTypes[v]
	}
	return ""
}

var ncclRedOps = [...]string{"sum", "prod", "max", "min", "avg"}

// NCCLRedOp names an ncclRedOp_t; user-defined (premul) operations are "custom", a
// call without one is "".
func NCCLRedOp(v uint8) string {
	switch {
	case int(v) < len(ncclRedOps):
		return ncclRedOps[v]
	case v == 0xff:
		return ""
	}
	return "custom"
}

// The verbs functions probed: the wait for asynchronous events, and queue pair creation
// (which NIC a process sends over).
const (
	ibvAsyncEventSymbol = "ibv_get_async_event"
	ibvCreateQPSymbol   = "ibv_create_qp"
)

var ibvEventNames = [...]string{
	"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED", "PATH_MIG",
	"PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE", "PKEY_CHANGE",
	"SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER",
	"GID_CHANGE", "WQ_FATAL",
}

// IBVEventName is the enum ibv_event_type name without its IBV_EVENT_ prefix.
func IBVEventName(t uint32) string {
	if int(t) < len(ibvEventNames) {
		return ibvEventNames[t]
	}
	return "UNKNOWN"
}

// IBVFabricError says whether an async event means the fabric or the adapter failed
// something (a port went down, a queue pair or the device is dead, a path migration
// failed), as opposed to news that is part of normal life (a port came up, the subnet
// manager or an address changed, a QP drained).
func IBVFabricError(t uint32) bool {
	switch IBVEventName(t) {
	case "CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "PATH_MIG_ERR", "DEVICE_FATAL",
		"PORT_ERR", "SRQ_ERR", "WQ_FATAL":
		return true
	}
	return false
}
