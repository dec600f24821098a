//go:build !linux

package gpuebpfreceiver

import (
	"errors"

	"go.uber.org/zap"
)

var errNotLinux = errors.New("the gpuebpf receiver's ebpf mode needs Linux; use mode: synthetic elsewhere")

func newEBPFSource(*Config, *zap.Logger) (eventSource, error) { return nil, errNotLinux }

func monotonicNow() int64 { return 0 }
