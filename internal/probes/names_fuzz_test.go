package probes_test

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/procinfo"
)

// FuzzNCCLAndVerbsArguments checks the decoding of the argument values the kernel copies
// out of NCCL and verbs calls, and of the other raw fields of records, against the
// libraries' own numbering (nccl.h's ncclDataType_t and ncclRedOp_t, verbs.h's enum
// ibv_event_type) for any value: a number past an enum is named as unknown or left
// out, never read out of bounds.
func FuzzNCCLAndVerbsArguments(f *testing.F) {
	f.Add(uint32(probes.NCCLAllReduce), uint8(7), uint8(0), uint32(10), []byte("mlx5_0\x00junk"), uint32(8<<20|1), uint8(3), uint32(12), []byte("RANK=3\x00WORLD_SIZE=8\x00"))
	f.Add(uint32(0), uint8(11), uint8(4), uint32(19), []byte("mlx5_0"), uint32(0xffffffff), uint8(4), uint32(0), []byte{})
	f.Add(uint32(1<<31), uint8(12), uint8(5), uint32(20), bytes.Repeat([]byte("m"), 100), uint32(259<<20|0xfffff), uint8(0), uint32(1<<31), []byte("RANK=x\x00=\x00"))
	f.Add(uint32(probes.NCCLAPICount), uint8(255), uint8(0xff), uint32(0xffffffff), []byte{0}, uint32(0), uint8(255), uint32(4097), bytes.Repeat([]byte("A=1\x00"), 1100))
	f.Fuzz(func(t *testing.T, api uint32, datatype, redop uint8, eventType uint32, device []byte, dev uint32, library uint8, envLen uint32, env []byte) {
		// ncclDataType_t: ncclInt8 .. ncclFloat8e5m2 (NCCL 2.24); the kernel writes 255
		// for a call that has no data type.
		dataTypes := []string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"}
		want := ""
		if int(datatype) < len(dataTypes) {
			want = dataTypes[datatype]
		}
		if got := probes.NCCLDataType(datatype); got != want {
			t.Fatalf("data type %d: %q, want %q", datatype, got, want)
		}
		// ncclRedOp_t: sum, prod, max, min, avg, then user-defined ops from ncclRedOpCreatePreMulSum.
		want = "custom"
		switch {
		case redop < 5:
			want = []string{"sum", "prod", "max", "min", "avg"}[redop]
		case redop == 0xff:
			want = ""
		}
		if got := probes.NCCLRedOp(redop); got != want {
			t.Fatalf("reduce op %d: %q, want %q", redop, got, want)
		}
		want = "unknown"
		for _, a := range probes.NCCLAPIs {
			if a.ID == api {
				want = a.Symbol
			}
		}
		if got := probes.NCCLAPIName(api); got != want {
			t.Fatalf("NCCL API %d: %q, want %q", api, got, want)
		}
		collectives := map[string]bool{"ncclAllReduce": true, "ncclAllGather": true, "ncclReduceScatter": true, "ncclBroadcast": true, "ncclBcast": true, "ncclReduce": true}
		if got := probes.IsCollective(api); got != collectives[want] {
			t.Fatalf("NCCL API %d (%s): collective %v", api, want, got)
		}

		events := []string{"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED", "PATH_MIG",
			"PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE", "PKEY_CHANGE",
			"SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED", "CLIENT_REREGISTER",
			"GID_CHANGE", "WQ_FATAL"}
		want = "UNKNOWN"
		if int(eventType) < len(events) {
			want = events[eventType]
		}
		fabricErrors := map[string]bool{"CQ_ERR": true, "QP_FATAL": true, "QP_REQ_ERR": true, "QP_ACCESS_ERR": true,
			"PATH_MIG_ERR": true, "DEVICE_FATAL": true, "PORT_ERR": true, "SRQ_ERR": true, "WQ_FATAL": true}
		if got := probes.IBVEventName(eventType); got != want || probes.IBVFabricError(eventType) != fabricErrors[want] {
			t.Fatalf("verbs event %d: %q (fabric error %v), want %q", eventType, got, probes.IBVFabricError(eventType), want)
		}

		var rdma probes.RDMAAsyncEvent
		for i := 0; i < len(rdma.Device) && i < len(device); i++ {
			rdma.Device[i] = int8(device[i])
		}
		wantName := device[:min(len(device), len(rdma.Device))]
		if i := bytes.IndexByte(wantName, 0); i >= 0 {
			wantName = wantName[:i]
		}
		if got := rdma.DeviceName(); got != string(wantName) {
			t.Fatalf("device %q: name %q, want %q", device, got, wantName)
		}

		// The kernel's dev_t is major<<20|minor; stat(2) reports the glibc encoding.
		lm := probes.LibraryMapped{Dev: dev, Library: library}
		if got, want := lm.DeviceNumber(), unix.Mkdev(dev>>20, dev&0xfffff); got != want {
			t.Fatalf("dev %#x: %#x, want %#x", dev, got, want)
		}
		libs := map[uint8]probes.Library{1: probes.LibCUDART, 2: probes.LibCUDA, 3: probes.LibNCCL, 4: probes.LibIBVerbs, 5: probes.LibHIP}
		if got, ok := lm.MappedLibrary(); got != libs[library] || ok != (libs[library] != "") {
			t.Fatalf("library %d: %q %v", library, got, ok)
		}

		var id probes.ProcessIdentity
		for i := 0; i < len(id.Env) && i < len(env); i++ {
			id.Env[i] = int8(env[i])
		}
		id.EnvLen = envLen
		got := id.EnvBytes()
		if n := min(int(envLen), len(id.Env)); len(got) != n || !bytes.Equal(got[:min(n, len(env))], env[:min(n, len(env))]) {
			t.Fatalf("env length %d: %d bytes", envLen, len(got))
		}
		p := procinfo.FromEnviron(1, id.Executable(), got)
		if p.Rank < -1 || p.LocalRank < -1 || p.WorldSize < -1 {
			t.Fatalf("env %q: rank %d local %d world %d", got, p.Rank, p.LocalRank, p.WorldSize)
		}
	})
}
