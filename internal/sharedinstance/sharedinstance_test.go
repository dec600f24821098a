package sharedinstance

import (
	"errors"
	"testing"

	"go.opentelemetry.io/collector/component"
)

// Two users of one ID share one instance, made once; it is gone after the second
// release; a failed create holds nothing.
func TestOneInstancePerIDUntilItsLastUserReleasesIt(t *testing.T) {
	var m Map[*int]
	id := component.MustNewIDWithName("straggler", "a")
	made := 0
	create := func() (*int, error) { made++; v := made; return &v, nil }
	a, _ := m.Acquire(id, create)
	b, _ := m.Acquire(id, create)
	if a != b || made != 1 || m.Len() != 1 {
		t.Fatalf("two acquires made %d instances, shared %v", made, a == b)
	}
	m.Release(id)
	if got, ok := m.Get(id); !ok || got != a {
		t.Fatalf("released by one of two users: %v %v", got, ok)
	}
	m.Release(id)
	if _, ok := m.Get(id); ok || m.Len() != 0 {
		t.Fatalf("still held after its last release")
	}
	if _, err := m.Acquire(id, func() (*int, error) { return nil, errors.New("bad config") }); err == nil || m.Len() != 0 {
		t.Fatalf("a failed create: err %v, %d held", err, m.Len())
	}
}
