//go:build !linux

package gpuebpfreceiver

import "go.uber.org/zap"

func newEBPFSource(*Config, *zap.Logger) (eventSource, error) { return nil, errNotLinux }

func monotonicNow() int64 { return 0 }
