package pyframes

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The _Py_DebugOffsets fields in declaration order (every one a uint64 after the
// 8-byte cookie), as Include/internal/pycore_runtime.h declares them at v3.13.0 and
// Include/internal/pycore_debug_offsets.h at v3.14.0: the test's own count of where
// each field lies, against which ParseDebugOffsets' positions are checked.
var debugFields313 = strings.Fields(`version free_threaded
	runtime_state.size runtime_state.finalizing runtime_state.interpreters_head
	interpreter_state.size interpreter_state.id interpreter_state.next interpreter_state.threads_head
	interpreter_state.gc interpreter_state.imports_modules interpreter_state.sysdict interpreter_state.builtins
	interpreter_state.ceval_gil interpreter_state.gil_runtime_state interpreter_state.gil_runtime_state_enabled
	interpreter_state.gil_runtime_state_locked interpreter_state.gil_runtime_state_holder
	thread_state.size thread_state.prev thread_state.next thread_state.interp thread_state.current_frame
	thread_state.thread_id thread_state.native_thread_id thread_state.datastack_chunk thread_state.status
	interpreter_frame.size interpreter_frame.previous interpreter_frame.executable interpreter_frame.instr_ptr
	interpreter_frame.localsplus interpreter_frame.owner
	code_object.size code_object.filename code_object.name code_object.qualname code_object.linetable
	code_object.firstlineno code_object.argcount code_object.localsplusnames code_object.localspluskinds
	code_object.co_code_adaptive
	pyobject.size pyobject.ob_type
	type_object.size type_object.tp_name type_object.tp_repr type_object.tp_flags
	tuple_object.size tuple_object.ob_item tuple_object.ob_size
	list_object.size list_object.ob_item list_object.ob_size
	dict_object.size dict_object.ma_keys dict_object.ma_values
	float_object.size float_object.ob_fval
	long_object.size long_object.lv_tag long_object.ob_digit
	bytes_object.size bytes_object.ob_size bytes_object.ob_sval
	unicode_object.size unicode_object.state unicode_object.length unicode_object.asciiobject_size
	gc.size gc.collecting`)

var debugFields314 = strings.Fields(`version free_threaded
	runtime_state.size runtime_state.finalizing runtime_state.interpreters_head
	interpreter_state.size interpreter_state.id interpreter_state.next interpreter_state.threads_head
	interpreter_state.threads_main interpreter_state.gc interpreter_state.imports_modules
	interpreter_state.sysdict interpreter_state.builtins interpreter_state.ceval_gil
	interpreter_state.gil_runtime_state interpreter_state.gil_runtime_state_enabled
	interpreter_state.gil_runtime_state_locked interpreter_state.gil_runtime_state_holder
	interpreter_state.code_object_generation interpreter_state.tlbc_generation
	thread_state.size thread_state.prev thread_state.next thread_state.interp thread_state.current_frame
	thread_state.thread_id thread_state.native_thread_id thread_state.datastack_chunk thread_state.status
	interpreter_frame.size interpreter_frame.previous interpreter_frame.executable interpreter_frame.instr_ptr
	interpreter_frame.localsplus interpreter_frame.owner interpreter_frame.stackpointer
	interpreter_frame.tlbc_index
	code_object.size code_object.filename code_object.name code_object.qualname code_object.linetable
	code_object.firstlineno code_object.argcount code_object.localsplusnames code_object.localspluskinds
	code_object.co_code_adaptive code_object.co_tlbc
	pyobject.size pyobject.ob_type
	type_object.size type_object.tp_name type_object.tp_repr type_object.tp_flags
	tuple_object.size tuple_object.ob_item tuple_object.ob_size
	list_object.size list_object.ob_item list_object.ob_size
	set_object.size set_object.used set_object.table set_object.mask
	dict_object.size dict_object.ma_keys dict_object.ma_values
	float_object.size float_object.ob_fval
	long_object.size long_object.lv_tag long_object.ob_digit
	bytes_object.size bytes_object.ob_size bytes_object.ob_sval
	unicode_object.size unicode_object.state unicode_object.length unicode_object.asciiobject_size
	gc.size gc.collecting
	gen_object.size gen_object.gi_name gen_object.gi_iframe gen_object.gi_frame_state
	llist_node.next llist_node.prev
	debugger_support.eval_breaker debugger_support.remote_debugger_support
	debugger_support.remote_debugging_enabled debugger_support.debugger_pending_call
	debugger_support.debugger_script_path debugger_support.debugger_script_path_size`)

// debugBlob lays out a _Py_DebugOffsets from fields (declaration order) and values by
// name; fields without a value are 0.
func debugBlob(fields []string, values map[string]uint64) []byte {
	b := make([]byte, 8+8*len(fields))
	copy(b, debugCookie)
	for i, f := range fields {
		binary.LittleEndian.PutUint64(b[8+8*i:], values[f])
	}
	return b
}

// The values a 3.13 or 3.14 process publishes: the table's offsets and the struct sizes
// those versions' headers give (x86_64, GIL build).
func debugValues(t *testing.T, minor int, hex uint64) map[string]uint64 {
	t.Helper()
	l, err := LayoutFor(minor)
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]uint64{
		"version":                             hex,
		"runtime_state.size":                  282944,
		"runtime_state.interpreters_head":     uint64(l.RuntimeInterpretersHead),
		"interpreter_state.size":              194968,
		"interpreter_state.next":              uint64(l.InterpNext),
		"interpreter_state.threads_head":      uint64(l.InterpThreadsHead),
		"thread_state.size":                   304,
		"thread_state.next":                   uint64(l.ThreadNext),
		"thread_state.current_frame":          uint64(l.ThreadFrame),
		"thread_state.thread_id":              uint64(l.ThreadID),
		"thread_state.native_thread_id":       uint64(l.NativeThreadID),
		"interpreter_frame.size":              80,
		"interpreter_frame.previous":          uint64(l.FramePrevious),
		"interpreter_frame.executable":        uint64(l.FrameCode),
		"interpreter_frame.instr_ptr":         uint64(l.FrameInstr),
		"interpreter_frame.owner":             uint64(l.FrameOwner),
		"code_object.size":                    uint64(l.CodeAdaptive) + 8,
		"code_object.filename":                uint64(l.CodeFilename),
		"code_object.name":                    uint64(l.CodeName),
		"code_object.qualname":                uint64(l.CodeQualname),
		"code_object.linetable":               uint64(l.CodeLineTable),
		"code_object.firstlineno":             uint64(l.CodeFirstLineNo),
		"code_object.co_code_adaptive":        uint64(l.CodeAdaptive),
		"unicode_object.size":                 64,
		"unicode_object.state":                uint64(l.UnicodeState),
		"unicode_object.length":               uint64(l.UnicodeLength),
		"unicode_object.asciiobject_size":     uint64(l.UnicodeASCIIData),
		"bytes_object.size":                   40,
		"bytes_object.ob_size":                uint64(l.BytesSize),
		"bytes_object.ob_sval":                uint64(l.BytesData),
		"interpreter_frame.localsplus":        72,
		"interpreter_state.gil_runtime_state": 7000,
	}
	if minor == 14 {
		v["runtime_state.size"] = 316216
		v["interpreter_state.size"] = 225808
		v["thread_state.size"] = 824
		v["interpreter_frame.size"] = 88
	}
	return v
}

// A 3.13 and a 3.14 _Py_DebugOffsets carrying the table's own offsets parse back to
// exactly the table's layout: ParseDebugOffsets reads each field where that version's
// header puts it.
func TestParseDebugOffsetsMatchesTable(t *testing.T) {
	for _, tc := range []struct {
		minor  int
		hex    uint64
		fields []string
		size   int
	}{
		{13, 0x030d00f0, debugFields313, 584},
		{14, 0x030e02f0, debugFields314, 760},
	} {
		blob := debugBlob(tc.fields, debugValues(t, tc.minor, tc.hex))
		if len(blob) != tc.size {
			t.Fatalf("3.%d: %d bytes of _Py_DebugOffsets, want %d", tc.minor, len(blob), tc.size)
		}
		got, err := ParseDebugOffsets(blob)
		if err != nil {
			t.Fatalf("3.%d: %v", tc.minor, err)
		}
		want, _ := LayoutFor(tc.minor)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("3.%d: parsed\n%+v\nwant\n%+v", tc.minor, got, want)
		}
	}
	if len(debugFields314)*8+8 > DebugOffsetsMinSize {
		t.Errorf("DebugOffsetsMinSize %d is short of 3.14's struct", DebugOffsetsMinSize)
	}
}

// A process's own offsets win over the table's.
func TestParseDebugOffsetsPrefersProcess(t *testing.T) {
	v := debugValues(t, 13, 0x030d05f0)
	v["thread_state.native_thread_id"] = 168
	v["code_object.co_code_adaptive"] = 204
	v["unicode_object.asciiobject_size"] = 48
	got, err := ParseDebugOffsets(debugBlob(debugFields313, v))
	if err != nil {
		t.Fatal(err)
	}
	if got.NativeThreadID != 168 || got.CodeAdaptive != 204 || got.UnicodeASCIIData != 48 || got.UnicodeCompactData != 64 {
		t.Errorf("parsed %+v, want the process's native_thread_id 168, co_code_adaptive 204, str data at 48 and 64", got)
	}
	if got.OwnerNotPython[0] != 3 || got.InstrKind != InstrPointer {
		t.Errorf("parsed %+v: lost the table's owner values or instruction kind", got)
	}
}

func TestParseDebugOffsetsRefuses(t *testing.T) {
	good := func(minor int, hex uint64) map[string]uint64 { return debugValues(t, minor, hex) }
	cases := []struct {
		name string
		blob []byte
		want string
	}{
		{"short", []byte("xdebugpy"), "at least 24 bytes"},
		{"no cookie", append([]byte("xdebugpz"), debugBlob(debugFields313, good(13, 0x030d00f0))[8:]...), "no _Py_DebugOffsets cookie"},
		{"3.12", debugBlob(debugFields313, good(13, 0x030c00f0)), "only the 3.13 and 3.14 layouts"},
		{"3.15", debugBlob(debugFields314, good(14, 0x030f00a1)), "unsupported Python version"},
		{"python 2", debugBlob(debugFields313, good(13, 0x020700f0)), "unsupported Python version"},
		{"not a version", debugBlob(debugFields313, good(13, 1<<40)), "not a PY_VERSION_HEX"},
		{"truncated 3.14", debugBlob(debugFields314, good(14, 0x030e00f0))[:600], "760 bytes, have 600"},
	}
	ft := good(13, 0x030d00f0)
	ft["free_threaded"] = 1
	cases = append(cases, struct {
		name string
		blob []byte
		want string
	}{"free-threaded", debugBlob(debugFields313, ft), "free-threaded"})
	past := good(14, 0x030e00f0)
	past["interpreter_frame.owner"] = 88
	cases = append(cases, struct {
		name string
		blob []byte
		want string
	}{"owner past the frame", debugBlob(debugFields314, past), "interpreter_frame.owner is 88, past the struct's 88 bytes"})
	zero := good(13, 0x030d00f0)
	zero["code_object.size"] = 0
	cases = append(cases, struct {
		name string
		blob []byte
		want string
	}{"zero size", debugBlob(debugFields313, zero), "code_object.size is 0"})
	for _, c := range cases {
		_, err := ParseDebugOffsets(c.blob)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
	if _, err := ParseDebugOffsets(debugBlob(debugFields313, ft)); !errors.Is(err, ErrFreeThreaded) {
		t.Errorf("free-threaded: %v is not ErrFreeThreaded", err)
	}
}

// Random bytes after a valid cookie and version never panic the parser.
func FuzzParseDebugOffsets(f *testing.F) {
	f.Add(debugBlob(debugFields314, map[string]uint64{"version": 0x030e00f0}))
	f.Add([]byte("xdebugpy\xf0\x00\x0d\x03\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseDebugOffsets(b)
		if err == nil && (l.Minor < 13 || l.UnicodeASCIIData <= 0) {
			t.Fatalf("accepted %+v", l)
		}
	})
}

// The table's shape follows the versions' history: native_thread_id, co_qualname,
// frame owners and co_code_adaptive from 3.11, the _PyCFrame hop only in 3.11 and
// 3.12, the tagged f_executable only in 3.14; pointers 8-aligned.
func TestLayoutTableShape(t *testing.T) {
	for minor := 9; minor <= 14; minor++ {
		l, err := LayoutFor(minor)
		if err != nil || l.Minor != minor {
			t.Fatalf("3.%d: %+v, %v", minor, l, err)
		}
		modern := minor >= 11
		if (l.NativeThreadID != Absent) != modern || (l.CodeQualname != Absent) != modern ||
			(l.FrameOwner != Absent) != modern || (l.CodeAdaptive != Absent) != modern {
			t.Errorf("3.%d: fields of 3.11+ present or absent wrongly: %+v", minor, l)
		}
		if (l.CFrameCurrentFrame != Absent) != (minor == 11 || minor == 12) {
			t.Errorf("3.%d: CFrameCurrentFrame %d", minor, l.CFrameCurrentFrame)
		}
		if (l.ExecutableTagMask != 0) != (minor == 14) {
			t.Errorf("3.%d: ExecutableTagMask %d", minor, l.ExecutableTagMask)
		}
		if (len(l.OwnerNotPython) != 0) != (minor >= 12) {
			t.Errorf("3.%d: OwnerNotPython %v", minor, l.OwnerNotPython)
		}
		wantKind := map[int]InstrKind{9: LastiBytes, 10: LastiCodeUnits}[minor]
		if modern {
			wantKind = InstrPointer
		}
		if l.InstrKind != wantKind {
			t.Errorf("3.%d: InstrKind %d, want %d", minor, l.InstrKind, wantKind)
		}
		for name, off := range map[string]int64{
			"RuntimeInterpretersHead": l.RuntimeInterpretersHead, "InterpNext": l.InterpNext,
			"InterpThreadsHead": l.InterpThreadsHead, "ThreadNext": l.ThreadNext, "ThreadID": l.ThreadID,
			"NativeThreadID": l.NativeThreadID, "ThreadFrame": l.ThreadFrame, "CFrameCurrentFrame": l.CFrameCurrentFrame,
			"FramePrevious": l.FramePrevious, "FrameCode": l.FrameCode, "CodeFilename": l.CodeFilename,
			"CodeName": l.CodeName, "CodeQualname": l.CodeQualname, "CodeLineTable": l.CodeLineTable,
			"UnicodeLength": l.UnicodeLength, "BytesSize": l.BytesSize,
		} {
			if off != Absent && (off < 0 || off%8 != 0) {
				t.Errorf("3.%d: %s = %d is not an 8-aligned offset", minor, name, off)
			}
		}
		if l.UnicodeCompactData-l.UnicodeASCIIData != map[bool]int64{true: 24, false: 16}[minor <= 11] {
			t.Errorf("3.%d: str data at %d (ASCII) and %d", minor, l.UnicodeASCIIData, l.UnicodeCompactData)
		}
	}
	for _, minor := range []int{8, 15, 0, -1} {
		if _, err := LayoutFor(minor); !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("LayoutFor(%d): %v", minor, err)
		}
	}
	// The caller's copy cannot change the table.
	l, _ := LayoutFor(12)
	l.OwnerNotPython[0] = 9
	if again, _ := LayoutFor(12); again.OwnerNotPython[0] != 3 {
		t.Error("LayoutFor shares OwnerNotPython with the table")
	}
}

func TestVersionFromFileName(t *testing.T) {
	for name, want := range map[string]int{
		"python3.11": 11, "/usr/bin/python3.9": 9, "libpython3.12.so.1.0": 12,
		"/usr/lib/x86_64-linux-gnu/libpython3.10.so.1.0": 10, "libpython3.14.so": 14,
		"python3.13": 13, "libpython3.11.a": 11,
	} {
		if got, err := VersionFromFileName(name); err != nil || got != want {
			t.Errorf("VersionFromFileName(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	for name, want := range map[string]error{
		"libpython3.13t.so":           ErrFreeThreaded,
		"/usr/bin/python3.14t":        ErrFreeThreaded,
		"libpython3.13t.so.1.0":       ErrFreeThreaded,
		"python3.12d":                 ErrUnsupportedVersion,
		"python3.8":                   ErrUnsupportedVersion,
		"libpython3.15.so.1.0":        ErrUnsupportedVersion,
		"python3.7m":                  ErrUnsupportedVersion,
		"libpython3.11.so.1.0.backup": nil,
		"python3":                     nil,
		"python2.7":                   nil,
		"python3.11-config":           nil,
	} {
		got, err := VersionFromFileName(name)
		if err == nil || (want != nil && !errors.Is(err, want)) {
			t.Errorf("VersionFromFileName(%q) = %d, %v; want error %v", name, got, err, want)
		}
	}
}

func TestVersionFromHex(t *testing.T) {
	for hex, want := range map[uint32]int{0x030907f0: 9, 0x030a0000: 10, 0x030b07f0: 11, 0x030c0af0: 12, 0x030d00c1: 13, 0x030e02f0: 14} {
		if got, err := VersionFromHex(hex); err != nil || got != want {
			t.Errorf("VersionFromHex(%#x) = %d, %v; want %d", hex, got, err, want)
		}
	}
	for _, hex := range []uint32{0x030800f0, 0x030f00a1, 0x020712f0, 0x040000f0, 0} {
		if got, err := VersionFromHex(hex); !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("VersionFromHex(%#x) = %d, %v; want ErrUnsupportedVersion", hex, got, err)
		}
	}
}
