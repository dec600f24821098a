package procinfo

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxSocketFDs bounds the descriptors read from one process: a process holding more
// sockets than this is scanned up to it.
const maxSocketFDs = 4096

// SocketInodes returns the inode numbers of the sockets pid holds open, as its
// /proc/PID/fd links show them (socket:[N]): what a socket's kernel inode is matched
// against to find its owner. A process gone, or one whose fds cannot be read, has none.
func SocketInodes(procRoot string, pid uint32) []uint64 {
	dir := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "fd")
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, err := f.Readdirnames(maxSocketFDs)
	if err != nil && len(names) == 0 {
		return nil
	}
	var out []uint64
	for _, name := range names {
		link, err := os.Readlink(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		rest, ok := strings.CutPrefix(link, "socket:[")
		if !ok {
			continue
		}
		if ino, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64); err == nil {
			out = append(out, ino)
		}
	}
	return out
}
