//go:build !linux

package procinfo

import "errors"

// CgroupPathByID needs Linux's cgroup v2 file handles.
func CgroupPathByID(cgroupRoot string, id uint64) (string, error) {
	return "", errors.New("cgroups are a Linux feature")
}
