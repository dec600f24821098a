package probes

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
)

// endbr64 is the CET landing pad that distro-built libraries put first in every
// function. A uprobe on it is single-stepped (~14 µs a hit here); one byte later, on
// `push %rbp`, the kernel emulates the instruction (~2 µs). So probes go past it.
var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// symbolTable is what the attacher needs from a library: which of the probed symbols
// it defines, and for each the offset past any leading endbr64.
type symbolTable map[string]uint64

// readSymbols returns, for each wanted symbol the library defines as a function, the
// offset from the symbol at which to attach. Libraries export their functions in
// .dynsym; an executable with the CUDA runtime linked in (nvcc's default) may keep them
// only in .symtab, which is read when .dynsym lacks some.
func readSymbols(path string, wanted []string) (symbolTable, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("%s: dynamic symbols: %w", path, err)
	}
	want := make(map[string]bool, len(wanted))
	for _, w := range wanted {
		want[w] = true
	}
	table := symbolTable{}
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			if _, have := table[s.Name]; have || !want[s.Name] || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
				continue
			}
			table[s.Name] = 0
			if first, err := readAt(f, s.Value, len(endbr64)); err == nil && bytes.Equal(first, endbr64) {
				table[s.Name] = uint64(len(endbr64))
			}
		}
	}
	add(syms)
	if len(table) < len(want) {
		if local, err := f.Symbols(); err == nil {
			add(local)
		}
	}
	return table, nil
}

// readAt reads n bytes at virtual address addr from the section that holds it.
func readAt(f *elf.File, addr uint64, n int) ([]byte, error) {
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_PROGBITS || addr < sec.Addr || addr+uint64(n) > sec.Addr+sec.Size {
			continue
		}
		buf := make([]byte, n)
		_, err := sec.ReadAt(buf, int64(addr-sec.Addr))
		return buf, err
	}
	return nil, fmt.Errorf("address %#x is in no section", addr)
}
