package pyframes

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
)

// pythonFileName matches the interpreter executable (python3.11) and the shared or
// static library (libpython3.12.so.1.0, libpython3.13t.so, libpython3.9.a), with the
// ABI flags CPython appends to the version: "t" for a free-threaded build, "d" for a
// debug one ("m" only existed before 3.8).
var pythonFileName = regexp.MustCompile(`^(?:lib)?python3\.(\d{1,3})([a-z]*)(?:\.so(?:\.[0-9.]+)?|\.a)?$`)

// VersionFromFileName returns the minor version (11 for 3.11) of the CPython whose
// executable or libpython a mapping of a process names (a path or a base name, as in
// /proc/PID/maps). A free-threaded build (ABI flag "t") is ErrFreeThreaded, a debug
// build ("d") and versions outside 3.9..3.14 ErrUnsupportedVersion, and a name that
// carries no version ("python3", "python") an error: the interpreter's own Py_Version
// is then the only source.
//
// The file name is a hint that a renamed or copied binary defeats. From 3.11 on a
// running interpreter exports Py_Version, a C unsigned long (8 bytes on x86_64) holding
// PY_VERSION_HEX; read it where the process's memory is readable and pass its low 32
// bits to VersionFromHex. From 3.13 on _PyRuntime also opens with _Py_DebugOffsets,
// whose version field is the same number (ParseDebugOffsets).
func VersionFromFileName(name string) (int, error) {
	base := filepath.Base(name)
	m := pythonFileName.FindStringSubmatch(base)
	if m == nil {
		return 0, fmt.Errorf("pyframes: %q does not name a versioned CPython executable or libpython", base)
	}
	minor, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, fmt.Errorf("pyframes: %q: %w", base, err)
	}
	for _, flag := range m[2] {
		switch flag {
		case 't':
			return 0, fmt.Errorf("%w: %s", ErrFreeThreaded, base)
		case 'd':
			return 0, fmt.Errorf("%w: %s is a debug build", ErrUnsupportedVersion, base)
		default:
			return 0, fmt.Errorf("%w: %s has unknown ABI flag %q", ErrUnsupportedVersion, base, flag)
		}
	}
	if _, ok := layouts[minor]; !ok {
		return 0, fmt.Errorf("%w: %s is 3.%d", ErrUnsupportedVersion, base, minor)
	}
	return minor, nil
}

// VersionFromHex returns the minor version from a PY_VERSION_HEX value (major in bits
// 24..31, minor in 16..23, micro in 8..15, release level and serial below): what
// Py_Version and _Py_DebugOffsets.version hold. Versions outside 3.9..3.14 are
// ErrUnsupportedVersion.
func VersionFromHex(hex uint32) (int, error) {
	major, minor := int(hex>>24), int(hex>>16&0xff)
	if major != 3 {
		return 0, fmt.Errorf("%w: version hex %#08x is Python %d.%d", ErrUnsupportedVersion, hex, major, minor)
	}
	if _, ok := layouts[minor]; !ok {
		return 0, fmt.Errorf("%w: version hex %#08x is Python 3.%d", ErrUnsupportedVersion, hex, minor)
	}
	return minor, nil
}
