package pyframes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds on what a walk reads from another process, whose memory may change under it
// or be garbage: a cycle or a wild pointer ends the walk with an error instead of
// looping or allocating without end.
const (
	MaxInterpreters   = 64
	MaxThreads        = 4096
	MaxFrames         = 1024    // Python frames of one thread, and as many skipped ones
	MaxStringBytes    = 4096    // characters of a file or function name read; longer is cut
	MaxLineTableBytes = 1 << 20 // a line table past this is refused
)

// userSpaceEnd is where x86_64's canonical user addresses end (47-bit, 4-level paging).
const userSpaceEnd = 1 << 47

// ErrBadPointer is wrapped by every error about a pointer read from the process that
// cannot be one (past user space, misaligned).
var ErrBadPointer = errors.New("pyframes: bad pointer")

// Frame is one Python frame as the walk reads it.
type Frame struct {
	File     string // co_filename
	Function string // co_qualname from 3.11, co_name before
	Line     int    // 0 when the instruction has no line
	Code     uint64 // the code object's address
}

// Thread is one Python thread state and its frames, innermost first.
type Thread struct {
	State          uint64 // the PyThreadState's address
	ThreadID       uint64 // pthread_self(): the FS base with glibc on x86_64
	NativeThreadID uint64 // the kernel tid; 0 before 3.11
	Frames         []Frame
}

// Reader walks a CPython process's threads and frames through its memory, following
// only Layout's offsets.
type Reader struct {
	// Mem reads the process's memory with addresses as offsets, as /proc/PID/mem does.
	Mem    io.ReaderAt
	Layout Layout
	// CodeType, when not 0, is the address of the process's PyCode_Type: every frame's
	// code object must have it as ob_type, or the walk fails.
	CodeType uint64
}

// Threads walks every interpreter from the _PyRuntime at runtime (its address in the
// process, load bias applied) and returns every thread state with its frames.
func (r *Reader) Threads(runtime uint64) ([]Thread, error) {
	interp, err := r.pointer(runtime, r.Layout.RuntimeInterpretersHead, "_PyRuntime.interpreters.head")
	if err != nil {
		return nil, err
	}
	var threads []Thread
	for n := 0; interp != 0; n++ {
		if n == MaxInterpreters {
			return nil, fmt.Errorf("pyframes: more than %d interpreters: a cycle?", MaxInterpreters)
		}
		tstate, err := r.pointer(interp, r.Layout.InterpThreadsHead, "interpreter's first thread state")
		if err != nil {
			return nil, err
		}
		for tstate != 0 {
			if len(threads) == MaxThreads {
				return nil, fmt.Errorf("pyframes: more than %d thread states: a cycle?", MaxThreads)
			}
			thread, err := r.Thread(tstate)
			if err != nil {
				return nil, err
			}
			threads = append(threads, thread)
			if tstate, err = r.pointer(tstate, r.Layout.ThreadNext, "PyThreadState.next"); err != nil {
				return nil, err
			}
		}
		if interp, err = r.pointer(interp, r.Layout.InterpNext, "PyInterpreterState.next"); err != nil {
			return nil, err
		}
	}
	return threads, nil
}

// Thread reads one thread state at tstate and walks its frames.
func (r *Reader) Thread(tstate uint64) (Thread, error) {
	t := Thread{State: tstate}
	var err error
	if t.ThreadID, err = r.word(tstate, r.Layout.ThreadID); err != nil {
		return t, fmt.Errorf("pyframes: PyThreadState.thread_id: %w", err)
	}
	if r.Layout.NativeThreadID != Absent {
		if t.NativeThreadID, err = r.word(tstate, r.Layout.NativeThreadID); err != nil {
			return t, fmt.Errorf("pyframes: PyThreadState.native_thread_id: %w", err)
		}
	}
	t.Frames, err = r.Frames(tstate)
	return t, err
}

// Frames walks the frames of the thread state at tstate, innermost first.
func (r *Reader) Frames(tstate uint64) ([]Frame, error) {
	l := &r.Layout
	frame, err := r.pointer(tstate, l.ThreadFrame, "the thread state's frame")
	if err != nil {
		return nil, err
	}
	if l.CFrameCurrentFrame != Absent && frame != 0 {
		if frame, err = r.pointer(frame, l.CFrameCurrentFrame, "_PyCFrame.current_frame"); err != nil {
			return nil, err
		}
	}
	var frames []Frame
	for steps := 0; frame != 0; steps++ {
		if steps == 2*MaxFrames {
			return nil, fmt.Errorf("pyframes: more than %d frames: a cycle?", MaxFrames)
		}
		python, err := r.runsPython(frame)
		if err != nil {
			return nil, err
		}
		if python {
			f, err := r.frame(frame)
			if err != nil {
				return nil, err
			}
			if f.Code != 0 {
				frames = append(frames, f)
			}
		}
		if frame, err = r.pointer(frame, l.FramePrevious, "the previous frame"); err != nil {
			return nil, err
		}
	}
	return frames, nil
}

// runsPython tells a frame of Python code from the C-stack and interpreter frames
// 3.12+ push, which carry no line.
func (r *Reader) runsPython(frame uint64) (bool, error) {
	if r.Layout.FrameOwner == Absent {
		return true, nil
	}
	var owner [1]byte
	if err := r.read(frame+uint64(r.Layout.FrameOwner), owner[:]); err != nil {
		return false, fmt.Errorf("pyframes: frame owner: %w", err)
	}
	return !slices.Contains(r.Layout.OwnerNotPython, owner[0]), nil
}

// Code is what a code object says about where its bytecode came from.
type Code struct {
	File      string // co_filename
	Function  string // co_qualname from 3.11, co_name before
	FirstLine int    // co_firstlineno
	LineTable []byte // co_lnotab (3.9), co_linetable (3.10+)
}

// frame reads the code object, name, file and line of one frame; a frame whose code
// is NULL (3.14's base frame) comes back with Code 0.
func (r *Reader) frame(frame uint64) (Frame, error) {
	l := &r.Layout
	raw, err := r.word(frame, l.FrameCode)
	if err != nil {
		return Frame{}, fmt.Errorf("pyframes: frame code: %w", err)
	}
	code := raw &^ l.ExecutableTagMask
	if code == 0 {
		return Frame{}, nil
	}
	instr, err := r.word(frame, l.FrameInstr)
	if err != nil {
		return Frame{Code: code}, fmt.Errorf("pyframes: the frame's instruction: %w", err)
	}
	c, err := r.Code(code)
	if err != nil {
		return Frame{Code: code}, err
	}
	return r.Layout.FrameAt(code, c, instr)
}

// FrameAt is the frame running code (read at address code) at instr: the frame's raw
// instruction field as a stack walker read it (a pointer from 3.11, f_lasti in the low
// 32 bits before).
func (l Layout) FrameAt(code uint64, c Code, instr uint64) (Frame, error) {
	f := Frame{Code: code, File: c.File, Function: c.Function}
	unit, err := l.InstrOffset(code, instr)
	if err != nil {
		return f, err
	}
	if line, ok := Line(l.Minor, c.FirstLine, c.LineTable, unit); ok {
		f.Line = line
	}
	return f, nil
}

// Code reads the code object at addr: file, function, first line and line table.
func (r *Reader) Code(addr uint64) (Code, error) {
	l := &r.Layout
	if err := checkPointer(addr, 8); err != nil {
		return Code{}, fmt.Errorf("pyframes: frame code: %w", err)
	}
	if r.CodeType != 0 {
		typ, err := r.word(addr, 8)
		if err != nil {
			return Code{}, fmt.Errorf("pyframes: code object type: %w", err)
		}
		if typ != r.CodeType {
			return Code{}, fmt.Errorf("pyframes: frame's code %#x has type %#x, not PyCode_Type %#x", addr, typ, r.CodeType)
		}
	}
	var c Code
	var err error
	if c.File, err = r.strField(addr, l.CodeFilename, "co_filename"); err != nil {
		return c, err
	}
	nameField, nameWhat := l.CodeName, "co_name"
	if l.CodeQualname != Absent {
		nameField, nameWhat = l.CodeQualname, "co_qualname"
	}
	if c.Function, err = r.strField(addr, nameField, nameWhat); err != nil {
		return c, err
	}
	var firstLine [4]byte
	if err := r.read(addr+uint64(l.CodeFirstLineNo), firstLine[:]); err != nil {
		return c, fmt.Errorf("pyframes: co_firstlineno: %w", err)
	}
	c.FirstLine = int(int32(binary.LittleEndian.Uint32(firstLine[:])))
	if c.LineTable, err = r.bytesField(addr, l.CodeLineTable); err != nil {
		return c, err
	}
	return c, nil
}

// InstrOffset turns a frame's raw instruction field into an instruction offset in code
// units (see Line).
func (l Layout) InstrOffset(code, instr uint64) (int, error) {
	switch l.InstrKind {
	case LastiBytes, LastiCodeUnits:
		v := int(int32(uint32(instr)))
		if l.InstrKind == LastiBytes && v >= 0 {
			v /= 2
		}
		return v, nil
	case InstrPointer:
		start := code + uint64(l.CodeAdaptive)
		// prev_instr sits one unit before the bytecode until the first instruction runs.
		if instr%2 != 0 || instr+2 < start || instr >= start && instr-start > 2*MaxLineTableBytes {
			return 0, fmt.Errorf("%w: instruction pointer %#x outside code object %#x", ErrBadPointer, instr, code)
		}
		return int((int64(instr) - int64(start)) / 2), nil
	}
	return 0, fmt.Errorf("pyframes: layout of 3.%d has no instruction kind", l.Minor)
}

// strField reads the str object a code object's field points to, decoded to UTF-8 and
// cut at MaxStringBytes.
func (r *Reader) strField(obj uint64, field int64, what string) (string, error) {
	str, err := r.pointer(obj, field, what)
	if err != nil {
		return "", err
	}
	if str == 0 {
		return "", fmt.Errorf("pyframes: %s is NULL", what)
	}
	s, err := r.Str(str)
	if err != nil {
		return "", fmt.Errorf("pyframes: %s: %w", what, err)
	}
	return s, nil
}

// Str reads a compact str object (every identifier and file name is one) at addr.
func (r *Reader) Str(addr uint64) (string, error) {
	l := &r.Layout
	header := make([]byte, l.UnicodeCompactData)
	if err := r.read(addr, header); err != nil {
		return "", err
	}
	state := binary.LittleEndian.Uint32(header[l.UnicodeState:])
	length := int64(binary.LittleEndian.Uint64(header[l.UnicodeLength:]))
	kind := int64(state >> UnicodeKindShift & UnicodeKindMask)
	if state&UnicodeCompact == 0 {
		return "", fmt.Errorf("str at %#x is not compact (state %#x)", addr, state)
	}
	if (kind != 1 && kind != 2 && kind != 4) || (state&UnicodeASCII != 0 && kind != 1) {
		return "", fmt.Errorf("str at %#x has kind %d (state %#x)", addr, kind, state)
	}
	if length < 0 || length > 1<<40 {
		return "", fmt.Errorf("str at %#x has length %d", addr, length)
	}
	length = min(length, MaxStringBytes/kind)
	data := l.UnicodeCompactData
	if state&UnicodeASCII != 0 {
		data = l.UnicodeASCIIData
	}
	chars := make([]byte, length*kind)
	if err := r.read(addr+uint64(data), chars); err != nil {
		return "", err
	}
	if state&UnicodeASCII != 0 {
		return string(chars), nil
	}
	var b strings.Builder
	for i := int64(0); i < int64(len(chars)); i += kind {
		var c rune
		switch kind {
		case 1:
			c = rune(chars[i])
		case 2:
			c = rune(binary.LittleEndian.Uint16(chars[i:]))
		case 4:
			c = rune(binary.LittleEndian.Uint32(chars[i:]))
		}
		if !utf8.ValidRune(c) {
			c = utf8.RuneError
		}
		b.WriteRune(c)
	}
	return b.String(), nil
}

// bytesField reads the bytes object a field points to (a line table).
func (r *Reader) bytesField(obj uint64, field int64) ([]byte, error) {
	l := &r.Layout
	addr, err := r.pointer(obj, field, "line table")
	if err != nil {
		return nil, err
	}
	if addr == 0 {
		return nil, errors.New("pyframes: line table is NULL")
	}
	var size [8]byte
	if err := r.read(addr+uint64(l.BytesSize), size[:]); err != nil {
		return nil, fmt.Errorf("pyframes: line table size: %w", err)
	}
	n := int64(binary.LittleEndian.Uint64(size[:]))
	if n < 0 || n > MaxLineTableBytes {
		return nil, fmt.Errorf("pyframes: line table at %#x claims %d bytes", addr, n)
	}
	table := make([]byte, n)
	if err := r.read(addr+uint64(l.BytesData), table); err != nil {
		return nil, fmt.Errorf("pyframes: line table: %w", err)
	}
	return table, nil
}

// pointer reads the 8-byte pointer at base+off, which must be NULL or an 8-aligned user
// address.
func (r *Reader) pointer(base uint64, off int64, what string) (uint64, error) {
	v, err := r.word(base, off)
	if err != nil {
		return 0, fmt.Errorf("pyframes: %s: %w", what, err)
	}
	if v == 0 {
		return 0, nil
	}
	if err := checkPointer(v, 8); err != nil {
		return 0, fmt.Errorf("pyframes: %s: %w", what, err)
	}
	return v, nil
}

func (r *Reader) word(base uint64, off int64) (uint64, error) {
	if off < 0 {
		return 0, fmt.Errorf("offset %d is absent from the layout of 3.%d", off, r.Layout.Minor)
	}
	var b [8]byte
	if err := r.read(base+uint64(off), b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (r *Reader) read(addr uint64, p []byte) error {
	if addr == 0 || addr >= userSpaceEnd || uint64(len(p)) > userSpaceEnd-addr {
		return fmt.Errorf("%w: %#x (+%d bytes)", ErrBadPointer, addr, len(p))
	}
	n, err := r.Mem.ReadAt(p, int64(addr))
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %d bytes at %#x: %w", len(p), addr, err)
}

func checkPointer(v uint64, align uint64) error {
	if v >= userSpaceEnd || v%align != 0 {
		return fmt.Errorf("%w: %#x", ErrBadPointer, v)
	}
	return nil
}
