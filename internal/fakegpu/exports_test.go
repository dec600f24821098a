package fakegpu

import (
	"bytes"
	"debug/elf"
	"slices"
	"strings"
	"testing"
)

// endbr64; push %rbp: the probe loader attaches at the push, which the kernel emulates
// instead of single-stepping, so every probed symbol must start exactly like this.
var wantPrologue = []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55}

func TestLibrariesExportExactlyTheAPI(t *testing.T) {
	p := Build(t)
	for _, lib := range []struct {
		path, soname string
		apis, hooks  []string
	}{
		{p.Cudart, "libcudart.so.12", RuntimeAPIs, HookSymbols},
		{p.Cuda, "libcuda.so.1", DriverAPIs, nil},
		{p.NCCL, "libnccl.so.2", NCCLAPIs, nil},
		{p.IBVerbs, "libibverbs.so.1", IBVerbsAPIs, nil},
		{p.NVML, "libnvidia-ml.so.1", NVMLAPIs, nil},
		{p.HIP, "libamdhip64.so.5", HIPAPIs, HookSymbols},
		{p.RCCL, "librccl.so.1", NCCLAPIs, nil},
		{p.ROCmSMI, "librocm_smi64.so.1", ROCmSMIAPIs, nil},
	} {
		t.Run(lib.soname, func(t *testing.T) {
			f, err := elf.Open(lib.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != elf.EM_X86_64 {
				t.Fatalf("machine %v, want x86-64", f.Machine)
			}
			soname, err := f.DynString(elf.DT_SONAME)
			if err != nil || !slices.Equal(soname, []string{lib.soname}) {
				t.Errorf("DT_SONAME = %v (%v), want %s", soname, err, lib.soname)
			}
			exported := exportedFunctions(t, f)
			var names []string
			for name := range exported {
				names = append(names, name)
			}
			slices.Sort(names)
			want := slices.Sorted(slices.Values(slices.Concat(lib.apis, lib.hooks)))
			for _, hook := range lib.hooks {
				if !strings.HasPrefix(hook, "fakegpu_") {
					t.Errorf("%s: an internal export must carry the fakegpu_ prefix, never a name a real library could use", hook)
				}
			}
			if !slices.Equal(names, want) {
				t.Errorf("exported functions\n got %v\nwant %v", names, want)
			}
			for _, name := range lib.apis {
				sym, ok := exported[name]
				if !ok {
					continue
				}
				code := symbolBytes(t, f, sym, len(wantPrologue))
				if !bytes.Equal(code, wantPrologue) {
					t.Errorf("%s starts with % x, want % x (endbr64; push %%rbp)", name, code, wantPrologue)
				}
			}
		})
	}
}

// exportedFunctions returns the functions a library defines in its dynamic symbol table,
// what `nm -D --defined-only` lists as T.
func exportedFunctions(t *testing.T, f *elf.File) map[string]elf.Symbol {
	t.Helper()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]elf.Symbol{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
			continue
		}
		if bind := elf.ST_BIND(s.Info); bind != elf.STB_GLOBAL && bind != elf.STB_WEAK {
			continue
		}
		out[s.Name] = s
	}
	return out
}

func symbolBytes(t *testing.T, f *elf.File, sym elf.Symbol, n int) []byte {
	t.Helper()
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_PROGBITS || sym.Value < sec.Addr || sym.Value+uint64(n) > sec.Addr+sec.Size {
			continue
		}
		buf := make([]byte, n)
		if _, err := sec.ReadAt(buf, int64(sym.Value-sec.Addr)); err != nil {
			t.Fatalf("reading %s: %v", sym.Name, err)
		}
		return buf
	}
	t.Fatalf("%s at %#x lies in no section", sym.Name, sym.Value)
	return nil
}
