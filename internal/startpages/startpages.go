// Package startpages hands back the pages of the executable that only start-up used.
//
// One fathom binary serves both roles, so a node collector carries the gateway's DuckDB
// too, in a ~230 MB executable. DuckDB never runs on a node, but its C++ static
// initialisers run in every process before main, and with Go's own package
// initialisation they leave 45-60 MB of executable pages mapped that an idle node
// collector never touches again (docs/gpuebpf.md has the measurements). They are clean file pages: the kernel can drop them at any time
// and read them back on use, but until it needs the memory they count in the
// collector's RSS, which is what operators watch and set limits on.
package startpages

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Release asks the kernel to reclaim the resident pages of the executable's read-only
// mappings (code and constant data) now. Pages the process goes on to use fault back in
// from the page cache or the file; the rest stay out. MADV_PAGEOUT never loses data:
// written pages (the relocated GOT, kept read-only after start) are anonymous and, with
// no swap, simply stay. It returns how many bytes of mappings it advised; kernels
// before 5.4 lack MADV_PAGEOUT and get an error, which costs nothing but the memory.
func Release() (int64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer maps.Close()
	ranges, err := readOnlyMappings(maps, exe)
	if err != nil {
		return 0, err
	}
	var advised int64
	for _, r := range ranges {
		// A raw syscall: the range is not Go memory, so there is no slice to hand
		// unix.Madvise.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_PAGEOUT); errno != 0 {
			return advised, fmt.Errorf("madvise(MADV_PAGEOUT) %#x-%#x: %w", r.start, r.end, errno)
		}
		advised += int64(r.end - r.start)
	}
	return advised, nil
}

type addrRange struct{ start, end uintptr }

// readOnlyMappings returns the mappings of file path in a /proc/PID/maps listing that
// are neither writable nor shared. A binary replaced on disk while it runs (an upgrade)
// is listed as "path (deleted)"; its pages still come back from the old inode.
func readOnlyMappings(maps io.Reader, path string) ([]addrRange, error) {
	var out []addrRange
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || len(f[1]) != 4 || f[1][1] == 'w' || f[1][3] != 'p' {
			continue
		}
		if strings.TrimSuffix(strings.Join(f[5:], " "), " (deleted)") != path {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps line %q: no address range", sc.Text())
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("maps line %q: bad address range", sc.Text())
		}
		out = append(out, addrRange{uintptr(start), uintptr(end)})
	}
	return out, sc.Err()
}
