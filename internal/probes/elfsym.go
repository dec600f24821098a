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
// it defines, and for each the offset to attach at (attachOffset).
type symbolTable map[string]uint64

// stubPrologueLen is how much of a function attachOffset reads.
const stubPrologueLen = 12

// attachOffset is where in a function, beginning with code, the probes go: on the first
// instruction the kernel emulates instead of single-stepping, where nothing before it
// has moved %rsp or touched an argument register (so the entry program reads the
// arguments and the return program the return address as at the call).
//   - Past an endbr64 (distro-built libraries, CET): on the push or mov after it.
//   - Past a `cmpl $imm32, disp32(%rip)` followed by a short conditional jump:
//     libcuda's exported cu* functions are stubs that compare a "deinitialised" flag,
//     return 4 if it is set, and jump through a table otherwise. The kernel cannot
//     emulate the rip-relative compare, and single-stepping it cost ~6 µs a call here;
//     the jump is emulated, and every call passes it, whichever way it goes.
func attachOffset(code []byte) uint64 {
	switch {
	case bytes.HasPrefix(code, endbr64):
		return uint64(len(endbr64))
	case len(code) >= stubPrologueLen && code[0] == 0x81 && code[1] == 0x3d && code[10] >= 0x70 && code[10] <= 0x7f:
		return 10
	}
	return 0
}

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
			code, err := readAt(f, s.Value, stubPrologueLen)
			if err != nil { // a function shorter than the stub, at the end of its section
				code, _ = readAt(f, s.Value, len(endbr64))
			}
			table[s.Name] = attachOffset(code)
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
