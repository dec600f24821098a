//go:build !linux

package procinfo

import "errors"

// CgroupPathByID needs Linux's cgroup v2 file handles.
func CgroupPathByID(cgroupRoot string, id uint64) (string, error) {
	return "", errors.New("cgroups are a Linux feature")
}

// CgroupV2Mount returns dir: there are no cgroups to look for.
func CgroupV2Mount(dir string) string { return dir }
