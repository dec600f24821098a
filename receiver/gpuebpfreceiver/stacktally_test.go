package gpuebpfreceiver

import (
	"fmt"
	"testing"
	"time"
)

// A stack goes out whole on its first record of each interval and by id on the others;
// past maxStacksPerInterval distinct stacks a process's records carry none, counted.
func TestStacksGoOutWholeOncePerIntervalAndCapped(t *testing.T) {
	var drops counterSet
	tally := stackTally{drops: &drops}
	p := &processSeries{}
	at := uint64(time.Hour)
	if v := tally.admit(p, "a", at); v != stackWhole {
		t.Fatalf("first record of a: %v", v)
	}
	if v := tally.admit(p, "a", at+uint64(time.Second)); v != stackByID {
		t.Fatalf("second record of a: %v", v)
	}
	for i := range maxStacksPerInterval - 1 {
		if v := tally.admit(p, fmt.Sprint(i), at+uint64(2*time.Second)); v != stackWhole {
			t.Fatalf("stack %d: %v", i, v)
		}
	}
	if v := tally.admit(p, "one too many", at+uint64(3*time.Second)); v != stackRefused {
		t.Fatalf("stack %d of the interval: %v", maxStacksPerInterval+1, v)
	}
	if v := tally.admit(p, "a", at+uint64(4*time.Second)); v != stackByID {
		t.Fatalf("a known stack past the cap: %v", v)
	}
	if n := drops.snapshot()["stack_cap"]; n != 1 {
		t.Errorf("stack_cap %d, want 1", n)
	}
	// The next interval: whole again, and room again.
	next := at + uint64(stackInterval)
	if v := tally.admit(p, "a", next); v != stackWhole {
		t.Errorf("a in the next interval: %v", v)
	}
	if v := tally.admit(p, "one too many", next); v != stackWhole {
		t.Errorf("a new stack in the next interval: %v", v)
	}
	// Another process has its own.
	if v := tally.admit(&processSeries{}, "a", at); v != stackWhole {
		t.Errorf("a in another process: %v", v)
	}
}
