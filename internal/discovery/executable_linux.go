//go:build linux

package discovery

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/fathom-gpu/fathom/internal/probes"
)

// runtimeSymbols are the functions the probes attach to in a libcudart: an executable
// that defines one of them carries the CUDA runtime itself.
var runtimeSymbols = func() map[string]bool {
	names := map[string]bool{}
	for _, api := range probes.APIs {
		if api.Library == probes.LibCUDART {
			names[api.Symbol] = true
		}
	}
	return names
}()

// executables remembers, per executable file, whether it carries the CUDA runtime:
// every scan looks at every process's executable, and each file's symbols are read once.
var executables = struct {
	sync.Mutex
	hasRuntime map[fileID]bool
}{hasRuntime: map[fileID]bool{}}

// fileID names a file's content: an inode number can be reused after a file is removed,
// and a file rewritten in place changes its ctime.
type fileID struct {
	dev, ino uint64
	ctime    syscall.Timespec
}

// maxExecutables bounds the memory of executables; past it the memory starts over.
const maxExecutables = 4096

// executableWithRuntime returns the path, inside its mount namespace, of the executable
// of the process at dir when the CUDA runtime is linked into it: nvcc links
// libcudart_static.a by default, and no libcudart file is then mapped. Its functions
// are found among the executable's dynamic symbols (a program linked with -rdynamic)
// or, as nvcc leaves them by default, in its .symtab; a stripped executable keeps
// neither, and is not matched.
func executableWithRuntime(dir string) (string, bool) {
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	if err != nil || !strings.HasPrefix(exe, "/") || strings.HasSuffix(exe, " (deleted)") {
		return "", false
	}
	host := filepath.Join(dir, "root", exe)
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		return "", false
	}
	id := fileID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim}
	executables.Lock()
	has, known := executables.hasRuntime[id]
	executables.Unlock()
	if !known {
		has = definesRuntime(host)
		executables.Lock()
		if len(executables.hasRuntime) >= maxExecutables {
			executables.hasRuntime = map[fileID]bool{}
		}
		executables.hasRuntime[id] = has
		executables.Unlock()
	}
	return exe, has
}

// definesRuntime says whether the ELF file at path defines (not merely calls) a probed
// CUDA runtime function, among its dynamic symbols or in its .symtab. The .symtab of a
// large program holds hundreds of thousands of symbols, so it is parsed only when its
// string table names a runtime function at all.
func definesRuntime(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if syms, err := f.DynamicSymbols(); err == nil && definesOne(syms) {
		return true
	}
	if !strtabNamesRuntime(f) {
		return false
	}
	syms, err := f.Symbols()
	return err == nil && definesOne(syms)
}

func definesOne(syms []elf.Symbol) bool {
	for _, s := range syms {
		if runtimeSymbols[s.Name] && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF && s.Value != 0 {
			return true
		}
	}
	return false
}

// strtabNamesRuntime says whether the .symtab's string table holds the name of a probed
// runtime function (a whole, NUL-terminated name).
func strtabNamesRuntime(f *elf.File) bool {
	sec := f.Section(".strtab")
	if sec == nil {
		return false
	}
	data, err := sec.Data()
	if err != nil {
		return false
	}
	for name := range runtimeSymbols {
		if bytes.Contains(data, append(append([]byte{0}, name...), 0)) {
			return true
		}
	}
	return false
}
