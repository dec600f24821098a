// Package sharedinstance keeps one instance of a component per component ID. A
// processor that sits in a metrics and a logs pipeline under one name is created once
// per pipeline, yet must be one object (the straggler processor's cohorts, the
// causalchain processor's windows); the last pipeline to shut it down removes it. The
// collector has the same helper, but internal to contrib.
package sharedinstance

import (
	"sync"

	"go.opentelemetry.io/collector/component"
)

// Map holds the instances; its zero value is ready.
type Map[T any] struct {
	mu   sync.Mutex
	byID map[component.ID]*entry[T]
}

type entry[T any] struct {
	v     T
	users int
}

// Acquire returns the instance for id, made by create the first time, and counts one
// more user of it.
func (m *Map[T]) Acquire(id component.ID, create func() (T, error)) (T, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.byID[id]; e != nil {
		e.users++
		return e.v, nil
	}
	v, err := create()
	if err != nil {
		return v, err
	}
	if m.byID == nil {
		m.byID = map[component.ID]*entry[T]{}
	}
	m.byID[id] = &entry[T]{v: v, users: 1}
	return v, nil
}

// Release counts one user less, and forgets the instance when none is left.
func (m *Map[T]) Release(id component.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.byID[id]; e != nil {
		if e.users--; e.users == 0 {
			delete(m.byID, id)
		}
	}
}

// Get returns the instance for id, if one is held.
func (m *Map[T]) Get(id component.ID) (T, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.byID[id]; e != nil {
		return e.v, true
	}
	var zero T
	return zero, false
}

// Len is how many instances are held.
func (m *Map[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID)
}
