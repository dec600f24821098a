package pyframes

import (
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// fakeMemory is one region of a pretend process, handed out 16 bytes aligned.
type fakeMemory struct {
	base uint64
	buf  []byte
}

func newFakeMemory() *fakeMemory { return &fakeMemory{base: 0x7f0000000000} }

func (m *fakeMemory) ReadAt(p []byte, off int64) (int, error) {
	a := uint64(off)
	if a < m.base || a-m.base >= uint64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[a-m.base:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *fakeMemory) alloc(n int64) uint64 {
	for len(m.buf)%16 != 0 {
		m.buf = append(m.buf, 0)
	}
	addr := m.base + uint64(len(m.buf))
	m.buf = append(m.buf, make([]byte, n)...)
	return addr
}

func (m *fakeMemory) put64(addr uint64, off int64, v uint64) {
	binary.LittleEndian.PutUint64(m.buf[addr-m.base+uint64(off):], v)
}

func (m *fakeMemory) put32(addr uint64, off int64, v uint32) {
	binary.LittleEndian.PutUint32(m.buf[addr-m.base+uint64(off):], v)
}

// str lays out a compact str as the layout says: ASCII, or the narrowest kind that
// holds every code point.
func (m *fakeMemory) str(l Layout, s string) uint64 {
	runes := []rune(s)
	kind, ascii := 1, true
	for _, r := range runes {
		if r > 0x7f {
			ascii = false
		}
		if r > 0xff && kind < 2 {
			kind = 2
		}
		if r > 0xffff {
			kind = 4
		}
	}
	data := l.UnicodeCompactData
	if ascii {
		data = l.UnicodeASCIIData
	}
	addr := m.alloc(data + int64(kind*(len(runes)+1)))
	state := uint32(kind<<UnicodeKindShift | UnicodeCompact)
	if ascii {
		state |= UnicodeASCII
	}
	m.put32(addr, l.UnicodeState, state)
	m.put64(addr, l.UnicodeLength, uint64(len(runes)))
	for i, r := range runes {
		at := addr - m.base + uint64(data) + uint64(i*kind)
		switch kind {
		case 1:
			m.buf[at] = byte(r)
		case 2:
			binary.LittleEndian.PutUint16(m.buf[at:], uint16(r))
		case 4:
			binary.LittleEndian.PutUint32(m.buf[at:], uint32(r))
		}
	}
	return addr
}

func (m *fakeMemory) bytesObject(l Layout, b []byte) uint64 {
	addr := m.alloc(l.BytesData + int64(len(b)) + 1)
	m.put64(addr, l.BytesSize, uint64(len(b)))
	copy(m.buf[addr-m.base+uint64(l.BytesData):], b)
	return addr
}

// Each version's line table putting code unit 2 (byte 4) on firstlineno + 2.
var unitTwoTables = map[int][]byte{
	9:  {2, 1, 2, 1, 4, 1},                                  // +1 from byte 2, +2 from 4, +3 from 8
	10: {4, 1, 4, 1, 4, 1},                                  // [0,4) +1, [4,8) +2, [8,12) +3
	11: {0x80 | 13<<3, 2, 0x80 | 13<<3 | 1, 2, 0xe8 | 7, 2}, // unit 0 +1, units 1-2 +2, 3-10 +3
}

type fakeFrame struct {
	file, function string
	skipOwner      int // > 0: an owner value of a frame that runs no Python
}

// buildProcess lays out, with l's offsets, a runtime with one interpreter and two
// thread states, the first with frames (innermost first, shims included), the second
// with none; it returns the _PyRuntime address and the first thread state.
func buildProcess(m *fakeMemory, l Layout, frames []fakeFrame) (uint64, uint64) {
	const firstLine = 40
	runtime := m.alloc(l.RuntimeInterpretersHead + 8)
	interp := m.alloc(max(l.InterpNext, l.InterpThreadsHead) + 8)
	m.put64(runtime, l.RuntimeInterpretersHead, interp)
	threadSize := max(l.ThreadID, l.NativeThreadID, l.ThreadFrame, l.ThreadNext) + 8
	first, second := m.alloc(threadSize), m.alloc(threadSize)
	m.put64(interp, l.InterpThreadsHead, first)
	m.put64(first, l.ThreadNext, second)
	m.put64(first, l.ThreadID, 0x7f00deadb000)
	m.put64(second, l.ThreadID, 0x7f00beefb000)
	if l.NativeThreadID != Absent {
		m.put64(first, l.NativeThreadID, 4242)
		m.put64(second, l.NativeThreadID, 4243)
	}
	table := unitTwoTables[min(l.Minor, 11)]
	frameSize := max(l.FramePrevious, l.FrameCode, l.FrameInstr, l.FrameOwner) + 8
	var prev uint64
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		frame := m.alloc(frameSize)
		m.put64(frame, l.FramePrevious, prev)
		prev = frame
		if f.skipOwner > 0 {
			// A shim has a code object too (3.12's runs the interpreter's cleanup
			// code): only its owner says to skip it.
			m.buf[frame-m.base+uint64(l.FrameOwner)] = byte(f.skipOwner)
			f.file, f.function = "<shim>", "<shim>"
		}
		codeSize := max(l.CodeFilename, l.CodeName, l.CodeQualname, l.CodeLineTable, l.CodeAdaptive) + 64
		code := m.alloc(codeSize)
		m.put64(code, l.CodeFilename, m.str(l, f.file))
		short := f.function[strings.LastIndexByte(f.function, '.')+1:]
		if l.CodeQualname != Absent {
			m.put64(code, l.CodeQualname, m.str(l, f.function))
			m.put64(code, l.CodeName, m.str(l, short))
		} else {
			m.put64(code, l.CodeName, m.str(l, f.function))
		}
		m.put32(code, l.CodeFirstLineNo, firstLine)
		m.put64(code, l.CodeLineTable, m.bytesObject(l, table))
		// Tag bits a 3.14 stack reference may carry on f_executable.
		m.put64(frame, l.FrameCode, code|l.ExecutableTagMask&1)
		switch l.InstrKind {
		case LastiBytes:
			m.put32(frame, l.FrameInstr, 4)
		case LastiCodeUnits:
			m.put32(frame, l.FrameInstr, 2)
		case InstrPointer:
			m.put64(frame, l.FrameInstr, code+uint64(l.CodeAdaptive)+4)
		}
	}
	if l.Minor == 14 {
		// 3.14's base frame at the bottom of every thread: NULL f_executable.
		base := m.alloc(frameSize)
		m.put64(lastFrame(m, l, prev), l.FramePrevious, base)
	}
	head := prev
	if l.CFrameCurrentFrame != Absent {
		cframe := m.alloc(l.CFrameCurrentFrame + 8)
		m.put64(cframe, l.CFrameCurrentFrame, prev)
		head = cframe
	}
	m.put64(first, l.ThreadFrame, head)
	return runtime, first
}

func lastFrame(m *fakeMemory, l Layout, frame uint64) uint64 {
	for {
		next := binary.LittleEndian.Uint64(m.buf[frame-m.base+uint64(l.FramePrevious):])
		if next == 0 {
			return frame
		}
		frame = next
	}
}

// For every version the reader follows that version's layout from _PyRuntime to the
// frames, skips the frames that run no Python, decodes ASCII, latin-1, UCS-2 and
// UCS-4 names, and turns each version's instruction field into the right line. The
// memory is built from the same table, so this checks the walk, not the offsets.
func TestReaderWalksEveryVersion(t *testing.T) {
	for minor := 9; minor <= 14; minor++ {
		l, _ := LayoutFor(minor)
		frames := []fakeFrame{
			{file: "/app/train.py", function: "Trainer.step"},
			{file: "/app/données.py", function: "charger"},
			{file: "/app/模型.py", function: "前向"},
			{file: "/app/emoji.py", function: "f😀"},
			{file: "/app/main.py", function: "<module>"},
		}
		if minor >= 12 {
			// A shim between two Python frames, as each _PyEval_EvalFrameDefault entry
			// pushes, and (3.14) an interpreter-owned one.
			owners := l.OwnerNotPython
			frames = append(frames[:2], append([]fakeFrame{{skipOwner: int(owners[len(owners)-1])}}, frames[2:]...)...)
			frames = append(frames, fakeFrame{skipOwner: int(owners[0])})
		}
		m := newFakeMemory()
		runtime, _ := buildProcess(m, l, frames)
		r := &Reader{Mem: m, Layout: l}
		threads, err := r.Threads(runtime)
		if err != nil {
			t.Fatalf("3.%d: %v", minor, err)
		}
		if len(threads) != 2 || len(threads[1].Frames) != 0 {
			t.Fatalf("3.%d: %d threads: %+v", minor, len(threads), threads)
		}
		if threads[0].ThreadID != 0x7f00deadb000 || threads[1].ThreadID != 0x7f00beefb000 {
			t.Errorf("3.%d: thread ids %#x %#x", minor, threads[0].ThreadID, threads[1].ThreadID)
		}
		wantNative := uint64(0)
		if minor >= 11 {
			wantNative = 4242
		}
		if threads[0].NativeThreadID != wantNative {
			t.Errorf("3.%d: native thread id %d, want %d", minor, threads[0].NativeThreadID, wantNative)
		}
		var got, want []string
		for _, f := range threads[0].Frames {
			got = append(got, f.File+" "+f.Function)
			if f.Line != 42 {
				t.Errorf("3.%d: %s on line %d, want 42", minor, f.Function, f.Line)
			}
		}
		for _, f := range frames {
			if f.skipOwner == 0 {
				want = append(want, f.file+" "+f.function)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("3.%d: frames\n%q\nwant\n%q", minor, got, want)
		}
	}
}

// Cycles, wild pointers and broken objects end the walk with an error, never a hang
// or a panic.
func TestReaderRefusesBrokenMemory(t *testing.T) {
	l, _ := LayoutFor(12)
	fresh := func() (*fakeMemory, uint64, uint64) {
		m := newFakeMemory()
		runtime, tstate := buildProcess(m, l, []fakeFrame{{file: "a.py", function: "f"}, {file: "b.py", function: "g"}})
		return m, runtime, tstate
	}
	innermost := func(m *fakeMemory, tstate uint64) uint64 {
		cframe := binary.LittleEndian.Uint64(m.buf[tstate-m.base+uint64(l.ThreadFrame):])
		return binary.LittleEndian.Uint64(m.buf[cframe-m.base+uint64(l.CFrameCurrentFrame):])
	}
	code := func(m *fakeMemory, frame uint64) uint64 {
		return binary.LittleEndian.Uint64(m.buf[frame-m.base+uint64(l.FrameCode):])
	}

	m, runtime, tstate := fresh()
	frame := innermost(m, tstate)
	m.put64(frame, l.FramePrevious, frame)
	if _, err := (&Reader{Mem: m, Layout: l}).Threads(runtime); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("frame cycle: %v", err)
	}

	m, runtime, tstate = fresh()
	m.put64(tstate, l.ThreadNext, tstate)
	if _, err := (&Reader{Mem: m, Layout: l}).Threads(runtime); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("thread cycle: %v", err)
	}

	m, runtime, tstate = fresh()
	m.put64(innermost(m, tstate), l.FramePrevious, 0x7f0000000003)
	if _, err := (&Reader{Mem: m, Layout: l}).Threads(runtime); !errors.Is(err, ErrBadPointer) {
		t.Errorf("misaligned frame pointer: %v", err)
	}

	m, runtime, tstate = fresh()
	m.put64(innermost(m, tstate), l.FrameInstr, 0x10)
	if _, err := (&Reader{Mem: m, Layout: l}).Threads(runtime); !errors.Is(err, ErrBadPointer) {
		t.Errorf("instruction pointer outside the code: %v", err)
	}

	m, runtime, tstate = fresh()
	c := code(m, innermost(m, tstate))
	name := binary.LittleEndian.Uint64(m.buf[c-m.base+uint64(l.CodeQualname):])
	m.put32(name, l.UnicodeState, 0)
	if _, err := (&Reader{Mem: m, Layout: l}).Threads(runtime); err == nil || !strings.Contains(err.Error(), "not compact") {
		t.Errorf("non-compact str: %v", err)
	}

	m, runtime, tstate = fresh()
	c = code(m, innermost(m, tstate))
	table := binary.LittleEndian.Uint64(m.buf[c-m.base+uint64(l.CodeLineTable):])
	m.put64(table, l.BytesSize, MaxLineTableBytes+1)
	if _, err := (&Reader{Mem: m, Layout: l}).Threads(runtime); err == nil || !strings.Contains(err.Error(), "claims") {
		t.Errorf("huge line table: %v", err)
	}

	m, runtime, _ = fresh()
	if _, err := (&Reader{Mem: m, Layout: l, CodeType: 0x7f0000001000}).Threads(runtime); err == nil || !strings.Contains(err.Error(), "not PyCode_Type") {
		t.Errorf("code object of another type: %v", err)
	}

	// A long name is cut after MaxStringBytes bytes of its characters: 2-byte UCS-2
	// characters here, so half as many, whole.
	m = newFakeMemory()
	runtime, _ = buildProcess(m, l, []fakeFrame{{file: "a.py", function: strings.Repeat("名", MaxStringBytes)}})
	threads, err := (&Reader{Mem: m, Layout: l}).Threads(runtime)
	if err != nil {
		t.Fatal(err)
	}
	if got := threads[0].Frames[0].Function; got != strings.Repeat("名", MaxStringBytes/2) {
		t.Errorf("UCS-2 name of %d characters read as %d characters", MaxStringBytes, utf8.RuneCountInString(got))
	}
}

// Garbage memory under any version's layout never panics the walk.
func FuzzReader(f *testing.F) {
	f.Add(11, []byte{1, 2, 3})
	f.Add(14, make([]byte, 4096))
	f.Fuzz(func(t *testing.T, minor int, input []byte) {
		mem := append([]byte(nil), input...)
		l, err := LayoutFor(9 + (minor%6+6)%6)
		if err != nil {
			t.Fatal(err)
		}
		m := &fakeMemory{base: 0x7f0000000000, buf: mem}
		for off := 0; off+8 <= len(mem); off += 8 {
			// Point some words back into the region so walks go somewhere.
			if mem[off]&3 == 0 {
				binary.LittleEndian.PutUint64(mem[off:], m.base+uint64(binary.LittleEndian.Uint16(mem[off+1:]))%uint64(len(mem))&^7)
			}
		}
		_, _ = (&Reader{Mem: m, Layout: l}).Threads(m.base)
	})
}
