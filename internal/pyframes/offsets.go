package pyframes

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Absent marks an offset the version does not have (native_thread_id before 3.11,
// co_qualname before 3.11, the _PyCFrame hop outside 3.11/3.12, ...).
const Absent int64 = -1

// The bits of PyASCIIObject.state (a 32-bit bitfield at Layout.UnicodeState) a reader
// needs, identical in every version 3.9..3.14 of the GIL build: interned:2, kind:3,
// compact:1, ascii:1, then ready:1 (3.9..3.11) or statically_allocated:1 (3.13+).
const (
	UnicodeKindShift = 2
	UnicodeKindMask  = 7 // 1: Py_UCS1 (latin-1), 2: Py_UCS2, 4: Py_UCS4
	UnicodeCompact   = 1 << 5
	UnicodeASCII     = 1 << 6
)

// InstrKind says what the frame's instruction field holds.
type InstrKind int

const (
	// LastiBytes: PyFrameObject.f_lasti, a C int, the byte offset of the last
	// instruction in co_code (3.9), -1 before the first one.
	LastiBytes InstrKind = iota + 1
	// LastiCodeUnits: PyFrameObject.f_lasti, a C int counting 2-byte code units
	// (3.10: CPython multiplies it by sizeof(_Py_CODEUNIT) before PyCode_Addr2Line).
	LastiCodeUnits
	// InstrPointer: a pointer into the code object's co_code_adaptive: prev_instr
	// (3.11, 3.12; the instruction being executed, one unit before the start when
	// the frame has not begun) or instr_ptr (3.13+; the instruction being executed
	// or about to be). Its instruction offset is (ptr - code - CodeAdaptive) / 2.
	InstrPointer
)

// Layout holds the byte offsets, on x86_64 in a GIL (not free-threaded), non-debug
// build, that a stack walker follows from the _PyRuntime symbol to every Python frame
// of every thread, and the facts it needs to turn a code object into a file, a
// function and a line. Every offset is from the start of the named struct; Absent
// means the version has no such field.
//
// The walk: interp = *(_PyRuntime + RuntimeInterpretersHead); tstate = *(interp +
// InterpThreadsHead), then tstate = *(tstate + ThreadNext) until NULL; the next
// interpreter is *(interp + InterpNext). A thread state's innermost frame is
// *(tstate + ThreadFrame), and, where CFrameCurrentFrame is not Absent (3.11, 3.12),
// one more hop: *(that + CFrameCurrentFrame). Outward frames follow FramePrevious.
type Layout struct {
	Minor int // 9 for 3.9, ...

	// _PyRuntimeState.interpreters.head.
	RuntimeInterpretersHead int64
	// PyInterpreterState.next and its first thread state: tstate_head (3.9, 3.10) or
	// threads.head (3.11+).
	InterpNext        int64
	InterpThreadsHead int64

	// PyThreadState.next.
	ThreadNext int64
	// PyThreadState.thread_id: an unsigned long holding pthread_self(), which with
	// glibc on x86_64 is the thread's FS base (the TCB address). Present in all.
	ThreadID int64
	// PyThreadState.native_thread_id: the kernel tid (gettid), from 3.11 on.
	NativeThreadID int64
	// ThreadFrame is tstate->frame (3.9, 3.10: a PyFrameObject*), tstate->cframe
	// (3.11, 3.12: a _PyCFrame*), or tstate->current_frame (3.13+: a
	// _PyInterpreterFrame*).
	ThreadFrame int64
	// _PyCFrame.current_frame (3.11, 3.12), else Absent.
	CFrameCurrentFrame int64

	// The frame: PyFrameObject (3.9, 3.10) or _PyInterpreterFrame (3.11+).
	// FramePrevious is f_back / previous; FrameCode is f_code (through 3.12) or
	// f_executable (3.13+); FrameInstr is f_lasti, prev_instr or instr_ptr, read as
	// InstrKind says; FrameOwner is the owner byte (3.11+), else Absent.
	FramePrevious int64
	FrameCode     int64
	FrameInstr    int64
	InstrKind     InstrKind
	FrameOwner    int64
	// OwnerNotPython lists the owner values of frames that run no Python code and
	// are skipped, without a line: FRAME_OWNED_BY_CSTACK (3 in 3.12 and 3.13; 4 in
	// 3.14, where FRAME_OWNED_BY_INTERPRETER = 3 is skipped too). 3.11 has no such
	// frames (its entry frames are real frames with is_entry set).
	OwnerNotPython []uint8
	// ExecutableTagMask is the bits to clear from f_executable before it is a
	// PyObject*: in 3.14 it is a _PyStackRef whose low bits (Py_TAG_BITS = 3) carry
	// reference-count tags. A NULL after masking ends the walk (3.14's base frame).
	ExecutableTagMask uint64

	// PyCodeObject fields: co_filename, co_name, co_qualname (3.11+) are str objects;
	// co_firstlineno is a C int; CodeLineTable is co_lnotab (3.9) or co_linetable
	// (3.10+), a bytes object; CodeAdaptive is where co_code_adaptive, the bytecode,
	// starts inside the code object (3.11+).
	CodeFilename    int64
	CodeName        int64
	CodeQualname    int64
	CodeFirstLineNo int64
	CodeLineTable   int64
	CodeAdaptive    int64

	// str (PyASCIIObject / PyCompactUnicodeObject): length in code points, the state
	// bits (see UnicodeKindShift...), and where the characters of a compact string
	// start: sizeof(PyASCIIObject) when the ascii bit is set, else
	// sizeof(PyCompactUnicodeObject), kind bytes per code point.
	UnicodeLength      int64
	UnicodeState       int64
	UnicodeASCIIData   int64
	UnicodeCompactData int64

	// bytes (PyBytesObject): ob_size and ob_sval.
	BytesSize int64
	BytesData int64
}

// Objects common to every version: PyObject is ob_refcnt (8 bytes) then ob_type;
// PyVarObject adds ob_size at 16. PyBytesObject is PyVarObject, ob_shash, ob_sval.
const (
	varObjectSize = 16
	bytesData     = 32
)

// layouts is derived, field by field, from each version's own headers (the struct
// members in declaration order, 8-byte pointers, longs and Py_ssize_t, 4-byte ints,
// C alignment on x86_64). Only 3.11 is checked against a running interpreter (the
// tests); the others follow their headers and are untested. The header text of 3.9
// to 3.14 was read as bindgen translations of those files (of v3.9.5, v3.10.0rc1,
// v3.11.0, v3.12.0, v3.13.0, v3.14.0) and 3.11's also as Debian's installed headers;
// 3.9 to 3.12 agree with offsets others read from those builds' DWARF.
var layouts = map[int]Layout{
	// v3.9.x: Include/internal/pycore_runtime.h (pyruntimestate: four ints,
	// _finalizing, then interpreters {mutex, head}), Include/internal/pycore_interp.h
	// (_is: next, tstate_head), Include/cpython/pystate.h (_ts: prev, next, interp,
	// frame; thread_id after exc_state, exc_info, dict, gilstate_counter, async_exc),
	// Include/cpython/frameobject.h (PyFrameObject: f_back 24, f_code 32, f_lasti
	// after f_gen), Include/cpython/code.h (PyCodeObject: ints up to co_firstlineno,
	// then co_code, co_consts, ... co_filename, co_name, co_lnotab),
	// Include/cpython/unicodeobject.h (PyASCIIObject ends with wstr: 48 bytes;
	// PyCompactUnicodeObject adds utf8_length, utf8, wstr_length: 72).
	9: {
		Minor:                   9,
		RuntimeInterpretersHead: 32,
		InterpNext:              0,
		InterpThreadsHead:       8,
		ThreadNext:              8,
		ThreadID:                176,
		NativeThreadID:          Absent,
		ThreadFrame:             24,
		CFrameCurrentFrame:      Absent,
		FramePrevious:           24,
		FrameCode:               32,
		FrameInstr:              104,
		InstrKind:               LastiBytes,
		FrameOwner:              Absent,
		CodeFilename:            104,
		CodeName:                112,
		CodeQualname:            Absent,
		CodeFirstLineNo:         40,
		CodeLineTable:           120,
		CodeAdaptive:            Absent,
		UnicodeLength:           16,
		UnicodeState:            32,
		UnicodeASCIIData:        48,
		UnicodeCompactData:      72,
		BytesSize:               varObjectSize,
		BytesData:               bytesData,
	},
	// v3.10.x: the same headers as 3.9. The runtime, interpreter and thread state
	// keep 3.9's offsets; PyFrameObject replaced f_stacktop with an int
	// f_stackdepth, moving f_lasti to 96 and making it count code units; co_lnotab
	// became co_linetable at the same place.
	10: {
		Minor:                   10,
		RuntimeInterpretersHead: 32,
		InterpNext:              0,
		InterpThreadsHead:       8,
		ThreadNext:              8,
		ThreadID:                176,
		NativeThreadID:          Absent,
		ThreadFrame:             24,
		CFrameCurrentFrame:      Absent,
		FramePrevious:           24,
		FrameCode:               32,
		FrameInstr:              96,
		InstrKind:               LastiCodeUnits,
		FrameOwner:              Absent,
		CodeFilename:            104,
		CodeName:                112,
		CodeQualname:            Absent,
		CodeFirstLineNo:         40,
		CodeLineTable:           120,
		CodeAdaptive:            Absent,
		UnicodeLength:           16,
		UnicodeState:            32,
		UnicodeASCIIData:        48,
		UnicodeCompactData:      72,
		BytesSize:               varObjectSize,
		BytesData:               bytesData,
	},
	// v3.11.x: Include/internal/pycore_runtime.h (five ints with _initialized,
	// _finalizing at 24, interpreters {mutex, head} at 32), pycore_interp.h (_is:
	// next, threads {next_unique_id, head}), Include/cpython/pystate.h (_ts: cframe
	// at 56 after the recursion and tracing ints and _status; thread_id 152,
	// native_thread_id 160; _PyCFrame: use_tracing padded, current_frame at 8),
	// Include/internal/pycore_frame.h (_PyInterpreterFrame: f_func, f_globals,
	// f_builtins, f_locals, f_code, frame_obj, previous, prev_instr, stacktop,
	// is_entry, owner), Include/cpython/code.h (_PyCode_DEF: co_firstlineno 72,
	// co_filename 112, co_name, co_qualname, co_linetable, co_code_adaptive 184),
	// Include/cpython/unicodeobject.h (as 3.9). Checked against a live 3.11.
	11: {
		Minor:                   11,
		RuntimeInterpretersHead: 40,
		InterpNext:              0,
		InterpThreadsHead:       16,
		ThreadNext:              8,
		ThreadID:                152,
		NativeThreadID:          160,
		ThreadFrame:             56,
		CFrameCurrentFrame:      8,
		FramePrevious:           48,
		FrameCode:               32,
		FrameInstr:              56,
		InstrKind:               InstrPointer,
		FrameOwner:              69,
		CodeFilename:            112,
		CodeName:                120,
		CodeQualname:            128,
		CodeFirstLineNo:         72,
		CodeLineTable:           136,
		CodeAdaptive:            184,
		UnicodeLength:           16,
		UnicodeState:            32,
		UnicodeASCIIData:        48,
		UnicodeCompactData:      72,
		BytesSize:               varObjectSize,
		BytesData:               bytesData,
	},
	// v3.12.x: pycore_runtime.h (as 3.11: head at 40), pycore_interp.h (_is: next,
	// id, id_refcount, requires_idref, id_mutex, _initialized, finalizing,
	// monitoring_version, last_restart_version, then threads {next_unique_id, head}:
	// threads.head at 72),
	// cpython/pystate.h (_ts: cframe 56, thread_id 136, native_thread_id 144;
	// _PyCFrame: current_frame at 0), pycore_frame.h (_PyInterpreterFrame: f_code 0,
	// previous 8, prev_instr 56, owner 70; FRAME_OWNED_BY_CSTACK = 3 marks the shim
	// frame each _PyEval_EvalFrameDefault entry pushes), cpython/code.h
	// (co_firstlineno 68, co_code_adaptive 192), cpython/unicodeobject.h (wstr gone:
	// PyASCIIObject 40, PyCompactUnicodeObject 56).
	12: {
		Minor:                   12,
		RuntimeInterpretersHead: 40,
		InterpNext:              0,
		InterpThreadsHead:       72,
		ThreadNext:              8,
		ThreadID:                136,
		NativeThreadID:          144,
		ThreadFrame:             56,
		CFrameCurrentFrame:      0,
		FramePrevious:           8,
		FrameCode:               0,
		FrameInstr:              56,
		InstrKind:               InstrPointer,
		FrameOwner:              70,
		OwnerNotPython:          []uint8{3},
		CodeFilename:            112,
		CodeName:                120,
		CodeQualname:            128,
		CodeFirstLineNo:         68,
		CodeLineTable:           136,
		CodeAdaptive:            192,
		UnicodeLength:           16,
		UnicodeState:            32,
		UnicodeASCIIData:        40,
		UnicodeCompactData:      56,
		BytesSize:               varObjectSize,
		BytesData:               bytesData,
	},
	// v3.13.x: Include/internal/pycore_runtime.h (_Py_DebugOffsets, 584 bytes, first;
	// then five ints, _finalizing, _finalizing_id, interpreters {PyMutex, head}: 632),
	// pycore_interp.h (_is opens with the whole _ceval_state, pending calls and all:
	// next at 7264, threads.head at 7344), cpython/pystate.h (_ts: eval_breaker,
	// _status, _whence..., current_frame 72, thread_id 152, native_thread_id 160),
	// pycore_frame.h (_PyInterpreterFrame: f_executable 0, previous 8, instr_ptr 56,
	// owner 70; FRAME_OWNED_BY_CSTACK = 3), cpython/code.h (co_code_adaptive 200).
	// A running 3.13 also publishes most of this in its _Py_DebugOffsets.
	13: {
		Minor:                   13,
		RuntimeInterpretersHead: 632,
		InterpNext:              7264,
		InterpThreadsHead:       7344,
		ThreadNext:              8,
		ThreadID:                152,
		NativeThreadID:          160,
		ThreadFrame:             72,
		CFrameCurrentFrame:      Absent,
		FramePrevious:           8,
		FrameCode:               0,
		FrameInstr:              56,
		InstrKind:               InstrPointer,
		FrameOwner:              70,
		OwnerNotPython:          []uint8{3},
		CodeFilename:            112,
		CodeName:                120,
		CodeQualname:            128,
		CodeFirstLineNo:         68,
		CodeLineTable:           136,
		CodeAdaptive:            200,
		UnicodeLength:           16,
		UnicodeState:            32,
		UnicodeASCIIData:        40,
		UnicodeCompactData:      56,
		BytesSize:               varObjectSize,
		BytesData:               bytesData,
	},
	// v3.14.x: Include/internal/pycore_debug_offsets.h (_Py_DebugOffsets, 760 bytes)
	// and pycore_runtime_structs.h (then as 3.13: interpreters.head at 808),
	// pycore_interp_structs.h (next 7272, threads.head 7344), cpython/pystate.h
	// (_ts as 3.13), pycore_interpframe_structs.h (f_executable is a _PyStackRef,
	// previous 8, instr_ptr 56, stackpointer 64, return_offset 72, owner 74;
	// FRAME_OWNED_BY_INTERPRETER = 3, FRAME_OWNED_BY_CSTACK = 4), pycore_stackref.h
	// (Py_TAG_BITS = 3), cpython/code.h (_co_unique_id added: co_code_adaptive 208).
	14: {
		Minor:                   14,
		RuntimeInterpretersHead: 808,
		InterpNext:              7272,
		InterpThreadsHead:       7344,
		ThreadNext:              8,
		ThreadID:                152,
		NativeThreadID:          160,
		ThreadFrame:             72,
		CFrameCurrentFrame:      Absent,
		FramePrevious:           8,
		FrameCode:               0,
		FrameInstr:              56,
		InstrKind:               InstrPointer,
		FrameOwner:              74,
		OwnerNotPython:          []uint8{3, 4},
		ExecutableTagMask:       3,
		CodeFilename:            112,
		CodeName:                120,
		CodeQualname:            128,
		CodeFirstLineNo:         68,
		CodeLineTable:           136,
		CodeAdaptive:            208,
		UnicodeLength:           16,
		UnicodeState:            32,
		UnicodeASCIIData:        40,
		UnicodeCompactData:      56,
		BytesSize:               varObjectSize,
		BytesData:               bytesData,
	},
}

// ErrUnsupportedVersion is returned for a Python outside 3.9..3.14.
var ErrUnsupportedVersion = errors.New("pyframes: unsupported Python version (3.9 to 3.14 are supported)")

// ErrFreeThreaded is returned for a free-threaded (3.13t, 3.14t) build, whose objects
// and frames are laid out differently.
var ErrFreeThreaded = errors.New("pyframes: free-threaded (Py_GIL_DISABLED) Python builds are not supported")

// LayoutFor returns the table's layout of Python 3.minor.
func LayoutFor(minor int) (Layout, error) {
	l, ok := layouts[minor]
	if !ok {
		return Layout{}, fmt.Errorf("%w: 3.%d", ErrUnsupportedVersion, minor)
	}
	l.OwnerNotPython = append([]uint8(nil), l.OwnerNotPython...)
	return l, nil
}

// debugCookie opens _Py_DebugOffsets (and so _PyRuntime) from 3.13 on: eight
// characters, no terminating NUL.
const debugCookie = "xdebugpy"

// debugOffsetsPos is where, inside _Py_DebugOffsets, each uint64 this package reads
// lies. 3.13 and 3.14 differ from interpreter_state on: 3.14 added
// interpreter_state.threads_main, code_object_generation and tlbc_generation,
// interpreter_frame.stackpointer and tlbc_index, code_object.co_tlbc and set_object.
type debugOffsetsPos struct {
	size int // bytes of _Py_DebugOffsets

	runtimeSize, runtimeInterpretersHead int

	interpSize, interpNext, interpThreadsHead int

	threadSize, threadNext, threadCurrentFrame, threadID, threadNativeID int

	frameSize, framePrevious, frameExecutable, frameInstrPtr, frameOwner int

	codeSize, codeFilename, codeName, codeQualname, codeLineTable, codeFirstLineNo, codeAdaptive int

	unicodeSize, unicodeState, unicodeLength, unicodeASCIISize int

	bytesSize, bytesObSize, bytesObSval int
}

// From Include/internal/pycore_runtime.h at v3.13.0: cookie, version, free_threaded,
// then runtime_state (3 fields), interpreter_state (13), thread_state (9),
// interpreter_frame (6), code_object (10), pyobject (2), type_object (4),
// tuple_object (3), list_object (3), dict_object (3), float_object (2), long_object
// (3), bytes_object (3), unicode_object (4), gc (2): every field a uint64.
var debugOffsets313 = debugOffsetsPos{
	size:        584,
	runtimeSize: 24, runtimeInterpretersHead: 40,
	interpSize: 48, interpNext: 64, interpThreadsHead: 72,
	threadSize: 152, threadNext: 168, threadCurrentFrame: 184, threadID: 192, threadNativeID: 200,
	frameSize: 224, framePrevious: 232, frameExecutable: 240, frameInstrPtr: 248, frameOwner: 264,
	codeSize: 272, codeFilename: 280, codeName: 288, codeQualname: 296, codeLineTable: 304, codeFirstLineNo: 312, codeAdaptive: 344,
	unicodeSize: 536, unicodeState: 544, unicodeLength: 552, unicodeASCIISize: 560,
	bytesSize: 512, bytesObSize: 520, bytesObSval: 528,
}

// From Include/internal/pycore_debug_offsets.h at v3.14.0: as 3.13 with
// interpreter_state (16 fields: threads_main after threads_head, then
// code_object_generation and tlbc_generation at the end), interpreter_frame (8:
// stackpointer, tlbc_index), code_object (11: co_tlbc), set_object (4) after
// list_object, and gen_object, llist_node, debugger_support after gc.
var debugOffsets314 = debugOffsetsPos{
	size:        760,
	runtimeSize: 24, runtimeInterpretersHead: 40,
	interpSize: 48, interpNext: 64, interpThreadsHead: 72,
	threadSize: 176, threadNext: 192, threadCurrentFrame: 208, threadID: 216, threadNativeID: 224,
	frameSize: 248, framePrevious: 256, frameExecutable: 264, frameInstrPtr: 272, frameOwner: 288,
	codeSize: 312, codeFilename: 320, codeName: 328, codeQualname: 336, codeLineTable: 344, codeFirstLineNo: 352, codeAdaptive: 384,
	unicodeSize: 616, unicodeState: 624, unicodeLength: 632, unicodeASCIISize: 640,
	bytesSize: 592, bytesObSize: 600, bytesObSval: 608,
}

// DebugOffsetsMinSize is how many bytes from the start of _PyRuntime
// ParseDebugOffsets may need (3.14's _Py_DebugOffsets; 3.13's is shorter).
const DebugOffsetsMinSize = 760

// ParseDebugOffsets reads the _Py_DebugOffsets a 3.13+ interpreter publishes at the
// start of _PyRuntime (b: at least the struct's bytes, from the symbol's address) and
// returns the table's layout for that version with every offset the process states
// itself put in its place. Offsets that are not published (the owner values, the
// f_executable tag, where a non-ASCII str's characters start) come from the table; a
// compact non-ASCII str's characters start 16 bytes (utf8_length, utf8) after a
// PyASCIIObject's. A missing cookie, a version other than 3.13 or 3.14, a
// free-threaded build, and offsets that do not fit inside the sizes the same struct
// states are errors.
func ParseDebugOffsets(b []byte) (Layout, error) {
	if len(b) < 24 {
		return Layout{}, fmt.Errorf("pyframes: _Py_DebugOffsets needs at least 24 bytes, have %d", len(b))
	}
	if string(b[:8]) != debugCookie {
		return Layout{}, fmt.Errorf("pyframes: no _Py_DebugOffsets cookie %q at _PyRuntime (found %q): not a 3.13+ runtime", debugCookie, b[:8])
	}
	hex := binary.LittleEndian.Uint64(b[8:])
	if hex>>32 != 0 {
		return Layout{}, fmt.Errorf("pyframes: _Py_DebugOffsets version %#x is not a PY_VERSION_HEX", hex)
	}
	minor, err := VersionFromHex(uint32(hex))
	if err != nil {
		return Layout{}, err
	}
	var pos debugOffsetsPos
	switch minor {
	case 13:
		pos = debugOffsets313
	case 14:
		pos = debugOffsets314
	default:
		return Layout{}, fmt.Errorf("pyframes: _Py_DebugOffsets of 3.%d: only the 3.13 and 3.14 layouts are known", minor)
	}
	if len(b) < pos.size {
		return Layout{}, fmt.Errorf("pyframes: 3.%d's _Py_DebugOffsets is %d bytes, have %d", minor, pos.size, len(b))
	}
	if ft := binary.LittleEndian.Uint64(b[16:]); ft != 0 {
		return Layout{}, fmt.Errorf("%w (_Py_DebugOffsets.free_threaded = %d)", ErrFreeThreaded, ft)
	}
	l, err := LayoutFor(minor)
	if err != nil {
		return Layout{}, err
	}
	d := debugReader{b: b}
	// Each group: the struct's size, then its fields, which must fit inside it.
	runtime := d.size("runtime_state", pos.runtimeSize)
	l.RuntimeInterpretersHead = d.field("runtime_state.interpreters_head", pos.runtimeInterpretersHead, runtime, 8)
	interp := d.size("interpreter_state", pos.interpSize)
	l.InterpNext = d.field("interpreter_state.next", pos.interpNext, interp, 8)
	l.InterpThreadsHead = d.field("interpreter_state.threads_head", pos.interpThreadsHead, interp, 8)
	thread := d.size("thread_state", pos.threadSize)
	l.ThreadNext = d.field("thread_state.next", pos.threadNext, thread, 8)
	l.ThreadFrame = d.field("thread_state.current_frame", pos.threadCurrentFrame, thread, 8)
	l.ThreadID = d.field("thread_state.thread_id", pos.threadID, thread, 8)
	l.NativeThreadID = d.field("thread_state.native_thread_id", pos.threadNativeID, thread, 8)
	frame := d.size("interpreter_frame", pos.frameSize)
	l.FramePrevious = d.field("interpreter_frame.previous", pos.framePrevious, frame, 8)
	l.FrameCode = d.field("interpreter_frame.executable", pos.frameExecutable, frame, 8)
	l.FrameInstr = d.field("interpreter_frame.instr_ptr", pos.frameInstrPtr, frame, 8)
	l.FrameOwner = d.field("interpreter_frame.owner", pos.frameOwner, frame, 1)
	code := d.size("code_object", pos.codeSize)
	l.CodeFilename = d.field("code_object.filename", pos.codeFilename, code, 8)
	l.CodeName = d.field("code_object.name", pos.codeName, code, 8)
	l.CodeQualname = d.field("code_object.qualname", pos.codeQualname, code, 8)
	l.CodeLineTable = d.field("code_object.linetable", pos.codeLineTable, code, 8)
	l.CodeFirstLineNo = d.field("code_object.firstlineno", pos.codeFirstLineNo, code, 4)
	// The bytecode follows the fixed part, so it may start at the struct's size.
	l.CodeAdaptive = d.field("code_object.co_code_adaptive", pos.codeAdaptive, code, 0)
	unicode := d.size("unicode_object", pos.unicodeSize)
	l.UnicodeState = d.field("unicode_object.state", pos.unicodeState, unicode, 4)
	l.UnicodeLength = d.field("unicode_object.length", pos.unicodeLength, unicode, 8)
	l.UnicodeASCIIData = d.field("unicode_object.asciiobject_size", pos.unicodeASCIISize, unicode, 0)
	l.UnicodeCompactData = l.UnicodeASCIIData + 16
	bytesObj := d.size("bytes_object", pos.bytesSize)
	l.BytesSize = d.field("bytes_object.ob_size", pos.bytesObSize, bytesObj, 8)
	l.BytesData = d.field("bytes_object.ob_sval", pos.bytesObSval, bytesObj, 0)
	if d.err != nil {
		return Layout{}, fmt.Errorf("pyframes: 3.%d's _Py_DebugOffsets is inconsistent: %w", minor, d.err)
	}
	if l.UnicodeASCIIData <= l.UnicodeState || l.UnicodeASCIIData <= l.UnicodeLength {
		return Layout{}, fmt.Errorf("pyframes: 3.%d's _Py_DebugOffsets: asciiobject_size %d does not follow state %d and length %d",
			minor, l.UnicodeASCIIData, l.UnicodeState, l.UnicodeLength)
	}
	return l, nil
}

// debugReader reads _Py_DebugOffsets fields, keeping the first inconsistency.
type debugReader struct {
	b   []byte
	err error
}

// maxStructSize bounds a published struct size: _PyRuntimeState and
// PyInterpreterState are the largest (tens of KiB, up to a few hundred KiB with
// their embedded state); anything past this is not an offset table.
const maxStructSize = 1 << 22

func (d *debugReader) size(name string, at int) int64 {
	v := binary.LittleEndian.Uint64(d.b[at:])
	if d.err == nil && (v == 0 || v > maxStructSize) {
		d.err = fmt.Errorf("%s.size is %d", name, v)
	}
	return int64(v)
}

// field reads an offset and checks that width bytes at it lie inside a struct of
// structSize bytes.
func (d *debugReader) field(name string, at int, structSize int64, width int64) int64 {
	v := binary.LittleEndian.Uint64(d.b[at:])
	if d.err == nil && (v > maxStructSize || int64(v)+width > structSize) {
		d.err = fmt.Errorf("%s is %d, past the struct's %d bytes", name, v, structSize)
	}
	return int64(v)
}
