// Package symbolize names the native return addresses the kernel read off a process's
// stack: the file each falls in (from /proc/PID/maps) and the function (from that
// file's ELF symbols), with bounded caches keyed by the file's build id.
package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds on what is kept: processes whose maps are cached, files whose symbols are,
// and symbols per file (libtorch_cuda.so has about a million; past the bound a file's
// addresses are named by offset only).
const (
	MaxProcesses      = 512
	MaxFiles          = 128
	MaxSymbolsPerFile = 2_000_000
)

// Frame is one native frame.
type Frame struct {
	Addr   uint64
	File   string // base name of the mapped file; "" when the address is in no file mapping
	Symbol string // "" when the file has no symbol for it (stripped)
	Offset uint64 // from the symbol's start, or from the file's start without one
}

// String is "symbol+0x1f (libfoo.so)", "libfoo.so+0x1234" without a symbol, or the bare
// address outside any file.
func (f Frame) String() string {
	switch {
	case f.File == "":
		return fmt.Sprintf("%#x", f.Addr)
	case f.Symbol == "":
		return fmt.Sprintf("%s+%#x", f.File, f.Offset)
	}
	return fmt.Sprintf("%s+%#x (%s)", f.Symbol, f.Offset, f.File)
}

// Symbolizer names addresses of the processes under ProcRoot. Safe for concurrent use.
type Symbolizer struct {
	procRoot string
	mu       sync.Mutex
	procs    map[uint32]*processMaps
	files    map[string]*symtab // by device and inode, and by build id
}

// New names addresses of processes under procRoot (/proc, or the host's in a pod).
func New(procRoot string) *Symbolizer {
	return &Symbolizer{procRoot: procRoot, procs: map[uint32]*processMaps{}, files: map[string]*symtab{}}
}

// mapping is one executable file mapping of a process, with the file's symbols once
// read: a process that exits right after its call is still named from them.
type mapping struct {
	start, end, offset uint64
	path               string
	tab                *symtab
	read               bool // tab was looked for (nil: the file cannot be read)
}

// Frames names each address, innermost first. Addresses past the first that falls in
// no file mapping are dropped: without frame pointers the kernel's unwinder reads on
// into what are not frames.
func (s *Symbolizer) Frames(pid uint32, addrs []uint64) []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Frame, 0, len(addrs))
	for i, a := range addrs {
		// Only the first address may send for the process's maps again (a library
		// loaded since): the last of a frame-pointer walk often falls in no mapping.
		m, ok := s.mappingOf(pid, a, i == 0)
		if !ok {
			if i == 0 {
				out = append(out, Frame{Addr: a})
			}
			break
		}
		f := Frame{Addr: a, File: filepath.Base(m.path), Offset: a - m.start + m.offset}
		if !m.read {
			m.tab, m.read = s.symbolsOf(pid, m.path), true
		}
		if t := m.tab; t != nil {
			// A return address points after the call: look up the call's own byte.
			if sym, start, ok := t.lookup(t.vaddr(f.Offset - 1)); ok {
				f.Symbol, f.Offset = sym, t.vaddr(f.Offset)-start
			}
		}
		out = append(out, f)
	}
	return out
}

// Forget drops a process's cached maps.
func (s *Symbolizer) Forget(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, pid)
}

// Size is how many processes and symbol tables are cached, and the symbols held in all.
func (s *Symbolizer) Size() (procs, tables, symbols int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[*symtab]bool{}
	for _, t := range s.files {
		if !seen[t] {
			seen[t] = true
			symbols += len(t.addrs)
		}
	}
	return len(s.procs), len(seen), symbols
}

// mapsRefresh is how often at most a process's maps are read again for an address
// they do not hold.
const mapsRefresh = time.Second

// processMaps are a process's executable file mappings as last read.
type processMaps struct {
	maps []mapping
	read time.Time
}

func (s *Symbolizer) mappingOf(pid uint32, addr uint64, mayRefresh bool) (*mapping, bool) {
	pm, ok := s.procs[pid]
	if !ok {
		pm = s.readMaps(pid)
		if len(s.procs) >= MaxProcesses {
			clear(s.procs)
		}
		s.procs[pid] = pm
	}
	if m, ok := pm.find(addr); ok || !mayRefresh || time.Since(pm.read) < mapsRefresh {
		return m, ok
	}
	if next := s.readMaps(pid); len(next.maps) > 0 { // a process gone keeps its last maps
		*pm = *next
	}
	return pm.find(addr)
}

func (pm *processMaps) find(addr uint64) (*mapping, bool) {
	i := sort.Search(len(pm.maps), func(i int) bool { return pm.maps[i].end > addr })
	if i < len(pm.maps) && pm.maps[i].start <= addr {
		return &pm.maps[i], true
	}
	return nil, false
}

func (s *Symbolizer) readMaps(pid uint32) *processMaps {
	pm := &processMaps{read: time.Now()}
	data, err := os.ReadFile(filepath.Join(s.procRoot, strconv.Itoa(int(pid)), "maps"))
	if err != nil {
		return pm
	}
	var ms []mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		ms = append(ms, mapping{start: start, end: end, offset: off, path: strings.Join(fields[5:], " ")})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].start < ms[j].start })
	pm.maps = ms
	return pm
}

// symtab is one file's function symbols, sorted, and its loadable segments.
type symtab struct {
	addrs []uint64
	sizes []uint64
	names []string
	segs  []elf.ProgHeader
}

// vaddr turns a file offset into the address the file's symbols use.
func (t *symtab) vaddr(off uint64) uint64 {
	for _, p := range t.segs {
		if off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr
		}
	}
	return off
}

func (t *symtab) lookup(addr uint64) (string, uint64, bool) {
	i := sort.Search(len(t.addrs), func(i int) bool { return t.addrs[i] > addr }) - 1
	if i < 0 || (t.sizes[i] != 0 && addr >= t.addrs[i]+t.sizes[i]) {
		return "", 0, false
	}
	return t.names[i], t.addrs[i], true
}

// symbolsOf reads (once) the symbols of a file a process maps; nil when it cannot be
// read. The same file seen through two containers' roots, or two copies with one build
// id, share one table.
func (s *Symbolizer) symbolsOf(pid uint32, path string) *symtab {
	full := filepath.Join(s.procRoot, strconv.Itoa(int(pid)), "root", path)
	var st syscall.Stat_t
	if syscall.Stat(full, &st) != nil {
		return nil
	}
	file := fmt.Sprintf("dev %d ino %d", st.Dev, st.Ino)
	if t, ok := s.files[file]; ok {
		return t
	}
	f, err := elf.Open(full)
	if err != nil {
		return nil
	}
	defer f.Close()
	// A stripped file is named from another with its build id and symbols (the
	// unstripped build of the same binary), as debuginfod does.
	id := buildID(f)
	if t, ok := s.files[id]; ok && id != "" {
		s.remember(file, t)
		return t
	}
	t := &symtab{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			t.segs = append(t.segs, p.ProgHeader)
		}
	}
	type sym struct {
		addr, size uint64
		name       string
	}
	var syms []sym
	seen := map[uint64]bool{}
	for _, table := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		list, err := table()
		if err != nil {
			continue
		}
		for _, x := range list {
			if elf.ST_TYPE(x.Info) != elf.STT_FUNC || x.Value == 0 || seen[x.Value] || len(syms) >= MaxSymbolsPerFile {
				continue
			}
			seen[x.Value] = true
			syms = append(syms, sym{x.Value, x.Size, x.Name})
		}
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	for _, x := range syms {
		t.addrs = append(t.addrs, x.addr)
		t.sizes = append(t.sizes, x.size)
		t.names = append(t.names, x.name)
	}
	s.remember(file, t)
	if id != "" && len(t.addrs) > 0 {
		s.remember(id, t)
	}
	return t
}

func (s *Symbolizer) remember(key string, t *symtab) {
	if len(s.files) >= 2*MaxFiles {
		clear(s.files)
	}
	s.files[key] = t
}

// buildID is the file's GNU build id in hex, "" without one.
func buildID(f *elf.File) string {
	sec := f.Section(".note.gnu.build-id")
	if sec == nil {
		return ""
	}
	data, err := sec.Data()
	// namesz, descsz, type, "GNU\0", desc
	if err != nil || len(data) < 16 {
		return ""
	}
	descsz := int(f.ByteOrder.Uint32(data[4:8]))
	if 16+descsz > len(data) {
		return ""
	}
	return "build-id " + hex.EncodeToString(data[16:16+descsz])
}
