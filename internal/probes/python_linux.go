//go:build linux

package probes

import (
	"fmt"
	"math"

	"github.com/fathom-gpu/fathom/internal/pyframes"
)

// SetPythonProcess tells the CUDA probes where a CPython process keeps its frames: the
// address of its _PyRuntime and its version's layout. From then on its CUDA call
// records carry the calling thread's Python frames (CUDACallPy).
func (p *Probes) SetPythonProcess(pid uint32, runtime uint64, l pyframes.Layout) error {
	v, err := pyProc(runtime, l)
	if err != nil {
		return err
	}
	return p.cuda.PyProcs.Put(&pid, &v)
}

// ForgetPythonProcess removes a process SetPythonProcess named (it exited).
func (p *Probes) ForgetPythonProcess(pid uint32) {
	_ = p.cuda.PyProcs.Delete(&pid)
}

// pyProc turns a layout into the kernel's struct py_proc.
func pyProc(runtime uint64, l pyframes.Layout) (cudaPyProc, error) {
	v := cudaPyProc{Runtime: runtime, CodeTagMask: l.ExecutableTagMask}
	fields := []struct {
		dst  *int16
		off  int64
		name string
	}{
		{&v.InterpHead, l.RuntimeInterpretersHead, "interpreters.head"},
		{&v.ThreadsHead, l.InterpThreadsHead, "the interpreter's thread states"},
		{&v.ThreadNext, l.ThreadNext, "PyThreadState.next"},
		{&v.NativeThreadId, l.NativeThreadID, "PyThreadState.native_thread_id"},
		{&v.ThreadId, l.ThreadID, "PyThreadState.thread_id"},
		{&v.ThreadFrame, l.ThreadFrame, "the thread state's frame"},
		{&v.CframeCurrent, l.CFrameCurrentFrame, "_PyCFrame.current_frame"},
		{&v.FramePrevious, l.FramePrevious, "the previous frame"},
		{&v.FrameCode, l.FrameCode, "the frame's code"},
		{&v.FrameInstr, l.FrameInstr, "the frame's instruction"},
		{&v.FrameOwner, l.FrameOwner, "the frame's owner"},
	}
	for _, f := range fields {
		switch {
		case f.off == pyframes.Absent:
			*f.dst = -1
		case f.off < 0 || f.off > math.MaxInt16:
			return v, fmt.Errorf("python 3.%d: offset %d of %s does not fit the kernel's layout", l.Minor, f.off, f.name)
		default:
			*f.dst = int16(f.off)
		}
	}
	for _, owner := range l.OwnerNotPython {
		if owner >= 8 {
			return v, fmt.Errorf("python 3.%d: frame owner %d past the kernel's 8", l.Minor, owner)
		}
		v.OwnerSkip |= 1 << owner
	}
	return v, nil
}
