package procinfo

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// fileidKernfs is the file handle type of kernfs (cgroup v2) nodes, whose 8 bytes are
// the node's id: the cgroup id BPF's bpf_get_current_cgroup_id returns.
const fileidKernfs = 0xfe

// CgroupPathByID finds the path, relative to the cgroup v2 mount at cgroupRoot, of the
// cgroup with id: what a process's identity record carries when the process left
// /proc before its cgroup file could be read. It opens the cgroup by file handle
// (CAP_DAC_READ_SEARCH), without walking the tree; a cgroup removed since is an error.
func CgroupPathByID(cgroupRoot string, id uint64) (string, error) {
	root, err := os.Open(cgroupRoot)
	if err != nil {
		return "", err
	}
	defer root.Close()
	handle := make([]byte, 8)
	binary.NativeEndian.PutUint64(handle, id)
	fd, err := unix.OpenByHandleAt(int(root.Fd()), unix.NewFileHandle(fileidKernfs, handle), unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("open cgroup %d under %s: %w", id, cgroupRoot, err)
	}
	defer unix.Close(fd)
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	rootPath, err := filepath.EvalSymlinks(cgroupRoot)
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(target, strings.TrimSuffix(rootPath, "/"))
	if !ok {
		return "", fmt.Errorf("cgroup %d is at %s, outside %s", id, target, rootPath)
	}
	if rel == "" {
		rel = "/"
	}
	return rel, nil
}

// CgroupV2Mount returns dir when the cgroup v2 hierarchy is mounted there, or dir's
// unified/ when that is where a hybrid host (v1 controllers at /sys/fs/cgroup) mounts
// it; otherwise dir, for the caller to fail on.
func CgroupV2Mount(dir string) string {
	for _, d := range []string{dir, filepath.Join(dir, "unified")} {
		var fs unix.Statfs_t
		if unix.Statfs(d, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC {
			return d
		}
	}
	return dir
}
