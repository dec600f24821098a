//go:build linux

package probes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// A restart that loses no call (Options.KeepProbes): the library probes' links are
// pinned, so they stay attached while no collector runs and keep counting into the
// pinned call statistics; the stopping collector hands over (HandOff) the statistics
// its last export carried; the next one adopts the links and counts each process from
// what was handed over, so the calls made meanwhile are in its first export. Without a
// handoff (the previous collector was killed) a slot counts from what the kernel held
// at adoption, as before: what happened since the dead collector's last export is lost.

// callStatsHandoff is struct call_stats_handoff.
type callStatsHandoff struct {
	Owner uint64
	API   [APICount]CallStats
}

// HandOff writes last, the statistics the collector's last ReadCallStats returned and
// its last export carried, for the next collector on this kernel state (KeepProbes; a
// no-op otherwise). They are handed over as the kernel counted them: with the base this
// collector adopted added back.
func (p *Probes) HandOff(last []ProcessCallStats) error {
	if !p.keepProbes {
		return nil
	}
	var errs []error
	for i := range last {
		s := &last[i]
		v := callStatsHandoff{Owner: uint64(s.PID), API: s.ByAPI}
		if base := p.adoptedBase; base != nil {
			base.mu.Lock()
			if adopted := base.calls[s.slot]; adopted != nil {
				for api := range v.API {
					v.API[api].add(&adopted[api])
				}
			}
			base.mu.Unlock()
		}
		if err := p.cuda.HandoffStats.Put(s.slot, asBytes(unsafe.Slice(&v, 1))); err != nil {
			errs = append(errs, fmt.Errorf("hand over slot %d: %w", s.slot, err))
		}
	}
	return errors.Join(errs...)
}

// takeHandoff replaces the adopted base of each slot whose owner is still the process
// the previous collector handed over with what that collector last read, and empties
// the handoff.
func (p *Probes) takeHandoff(base *adoptedTotals, owners map[uint32]uint32) error {
	var (
		slot uint32
		v    callStatsHandoff
		seen []uint32
	)
	it := p.cuda.HandoffStats.Iterate()
	for it.Next(&slot, asBytes(unsafe.Slice(&v, 1))) {
		seen = append(seen, slot)
		if pid, ok := owners[slot]; ok && uint64(pid) == v.Owner {
			handed := v.API
			base.calls[slot] = &handed
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read the handoff: %w", err)
	}
	for _, s := range seen {
		if err := p.cuda.HandoffStats.Delete(s); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear the handoff: %w", err)
		}
	}
	return nil
}

func (s *kernelState) linksDir() string { return filepath.Join(s.dir, "links") }

// pinLinks pins one library file's links as links/<library>-<dev>-<inode>/<n>.
func (s *kernelState) pinLinks(lib Library, id fileID, links []link.Link) error {
	dir := filepath.Join(s.linksDir(), fmt.Sprintf("%s-%d-%d", lib, id.dev, id.ino))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for i, l := range links {
		if err := l.Pin(filepath.Join(dir, strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

// unpinLinks removes every pinned link: each detaches once no collector holds it.
func (s *kernelState) unpinLinks() error {
	if err := os.RemoveAll(s.linksDir()); err != nil {
		return fmt.Errorf("unpin the probes: %w", err)
	}
	return nil
}

// adoptLinks takes over the links a previous collector pinned: their files count as
// probed (AttachLibrary does not attach them again), and this collector holds them.
func (p *Probes) adoptLinks() error {
	dirs, err := os.ReadDir(p.state.linksDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range dirs {
		lib, id, ok := parseLinkDir(d.Name())
		if !ok {
			continue
		}
		dir := filepath.Join(p.state.linksDir(), d.Name())
		pins, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var adopted []link.Link
		for _, pin := range pins {
			l, err := link.LoadPinnedLink(filepath.Join(dir, pin.Name()), nil)
			if err != nil {
				closeAll(adopted)
				return fmt.Errorf("%s: %w", filepath.Join(dir, pin.Name()), err)
			}
			adopted = append(adopted, l)
		}
		p.links = append(p.links, adopted...)
		p.probes += len(adopted)
		p.attached[id] = LibraryAttachment{Library: lib}
	}
	return nil
}

func parseLinkDir(name string) (Library, fileID, bool) {
	parts := strings.Split(name, "-")
	if len(parts) < 3 {
		return "", fileID{}, false
	}
	dev, err1 := strconv.ParseUint(parts[len(parts)-2], 10, 64)
	ino, err2 := strconv.ParseUint(parts[len(parts)-1], 10, 64)
	if err1 != nil || err2 != nil {
		return "", fileID{}, false
	}
	return Library(strings.Join(parts[:len(parts)-2], "-")), fileID{dev: dev, ino: ino}, true
}
