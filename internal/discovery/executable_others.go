//go:build !linux

package discovery

// executableWithRuntime finds no CUDA runtime in executables off Linux, where nothing
// is probed.
func executableWithRuntime(string) (string, bool) { return "", false }
