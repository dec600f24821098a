// Package pystacks finds the CPython processes among those Fathom traces and turns the
// Python frames the kernel captured at their calls (a code object and an instruction
// each) into files, functions and lines, with bounded caches. The layouts it follows
// are internal/pyframes'.
package pystacks

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/fathom-gpu/fathom/internal/pyframes"
)

// ErrNotPython is returned for a process that maps no CPython interpreter.
var ErrNotPython = errors.New("pystacks: not a CPython process")

// ErrGone is returned for a process that exited before it could be looked at.
var ErrGone = errors.New("pystacks: the process is gone")

// Process is where a CPython process keeps its frames.
type Process struct {
	PID      uint32
	Minor    int    // 11 for 3.11
	File     string // the interpreter's file as the process maps it (python3.11, libpython3.11.so.1.0)
	Runtime  uint64 // _PyRuntime, load bias applied
	CodeType uint64 // PyCode_Type, load bias applied; 0 when not exported
	Layout   pyframes.Layout
}

// debugOffsetsBytes is read from _PyRuntime for 3.13+'s _Py_DebugOffsets: more than
// the largest known (3.14's 760 bytes).
const debugOffsetsBytes = 1024

// Find looks at the process's mappings for a CPython interpreter (a libpython, or an
// executable with it linked in) and reads where its runtime state is. Errors other
// than ErrNotPython say why a Python process gets no frames (an unknown version, a
// free-threaded build, a stripped binary).
func (f *Finder) Find(pid uint32) (Process, error) {
	maps, err := os.ReadFile(filepath.Join(f.ProcRoot, strconv.Itoa(int(pid)), "maps"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) || err == nil && len(maps) == 0 {
		return Process{}, ErrGone // a process that exited has no maps, or empty ones
	}
	if err != nil {
		return Process{}, fmt.Errorf("pystacks: %w", err)
	}
	path, start, minor, verr := interpreterMapping(maps)
	if path == "" {
		if verr != nil {
			return Process{}, verr
		}
		return Process{}, ErrNotPython
	}
	file := filepath.Join(f.ProcRoot, strconv.Itoa(int(pid)), "root", path)
	syms, err := f.symbols(file)
	if errors.Is(err, fs.ErrNotExist) {
		return Process{}, ErrGone
	}
	if err != nil {
		return Process{}, err
	}
	if syms.runtime == 0 {
		return Process{}, fmt.Errorf("pystacks: %s exports no _PyRuntime (stripped of its dynamic symbols?)", path)
	}
	bias := start - syms.lowestLoad
	p := Process{PID: pid, Minor: minor, File: path, Runtime: syms.runtime + bias}
	if syms.codeType != 0 {
		p.CodeType = syms.codeType + bias
	}
	if minor >= 13 {
		mem, err := os.Open(filepath.Join(f.ProcRoot, strconv.Itoa(int(pid)), "mem"))
		if err != nil {
			return Process{}, fmt.Errorf("pystacks: %w", err)
		}
		defer mem.Close()
		buf := make([]byte, debugOffsetsBytes)
		if _, err := mem.ReadAt(buf, int64(p.Runtime)); err != nil && !errors.Is(err, io.EOF) {
			return Process{}, fmt.Errorf("pystacks: read _Py_DebugOffsets of pid %d: %w", pid, err)
		}
		if p.Layout, err = pyframes.ParseDebugOffsets(buf); err != nil {
			return Process{}, err
		}
		return p, nil
	}
	if p.Layout, err = pyframes.LayoutFor(minor); err != nil {
		return Process{}, err
	}
	return p, nil
}

// interpreterMapping finds the interpreter's file in /proc/PID/maps text: a libpython
// wins over the executable (a shared build's executable holds no runtime), and its
// mapping of file offset 0 gives the load bias. A versioned name that is not a
// supported build comes back as the error.
func interpreterMapping(maps []byte) (path string, start uint64, minor int, err error) {
	var exe string
	var exeStart uint64
	var exeMinor int
	sc := bufio.NewScanner(bytes.NewReader(maps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[2] != "00000000" {
			continue
		}
		name := strings.Join(fields[5:], " ")
		base := filepath.Base(name)
		if !strings.HasPrefix(base, "python3") && !strings.HasPrefix(base, "libpython3") {
			continue
		}
		m, verr := pyframes.VersionFromFileName(base)
		if verr != nil {
			err = verr
			continue
		}
		lo, _, _ := strings.Cut(fields[0], "-")
		addr, perr := strconv.ParseUint(lo, 16, 64)
		if perr != nil {
			continue
		}
		if strings.HasPrefix(base, "libpython") {
			return name, addr, m, nil
		}
		if exe == "" {
			exe, exeStart, exeMinor = name, addr, m
		}
	}
	if exe != "" {
		return exe, exeStart, exeMinor, nil
	}
	return "", 0, 0, err
}

// Finder finds CPython processes, keeping what it read of each interpreter file.
type Finder struct {
	ProcRoot string

	mu    sync.Mutex
	files map[fileKey]fileSymbols
}

type fileKey struct{ dev, ino uint64 }

type fileSymbols struct {
	runtime, codeType uint64 // link-time addresses, 0 if absent
	lowestLoad        uint64 // the lowest PT_LOAD address, page-aligned
}

// maxFiles bounds the interpreter files remembered: a node runs a few Pythons.
const maxFiles = 64

func (f *Finder) symbols(path string) (fileSymbols, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileSymbols{}, fmt.Errorf("pystacks: %w", err)
	}
	key := fileKey{dev: st.Dev, ino: st.Ino}
	f.mu.Lock()
	syms, ok := f.files[key]
	f.mu.Unlock()
	if ok {
		return syms, nil
	}
	ef, err := elf.Open(path)
	if err != nil {
		return fileSymbols{}, fmt.Errorf("pystacks: %w", err)
	}
	defer ef.Close()
	syms.lowestLoad = ^uint64(0)
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr&^0xfff < syms.lowestLoad {
			syms.lowestLoad = p.Vaddr &^ 0xfff
		}
	}
	if syms.lowestLoad == ^uint64(0) {
		return fileSymbols{}, fmt.Errorf("pystacks: %s has no loadable segment", path)
	}
	for _, table := range []func() ([]elf.Symbol, error){ef.DynamicSymbols, ef.Symbols} {
		list, err := table()
		if err != nil {
			continue
		}
		for _, s := range list {
			switch s.Name {
			case "_PyRuntime":
				syms.runtime = s.Value
			case "PyCode_Type":
				syms.codeType = s.Value
			}
		}
		if syms.runtime != 0 {
			break
		}
	}
	f.mu.Lock()
	if f.files == nil || len(f.files) >= maxFiles {
		f.files = map[fileKey]fileSymbols{}
	}
	f.files[key] = syms
	f.mu.Unlock()
	return syms, nil
}
