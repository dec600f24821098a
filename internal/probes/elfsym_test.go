package probes

import "testing"

// Where the probes go in each function shape seen in the libraries Fathom probes: the
// bytes are those of the files (objdump -d).
func TestAttachOffsetSkipsWhatTheKernelWouldSingleStep(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
		want uint64
	}{
		// The fakes, and distro builds with CET: endbr64; push %rbp.
		{"endbr64 then push", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56}, 4},
		// libcudart 11.8.89's cudaLaunchKernel: push %r14 (emulated where it is).
		{"push first", []byte{0x41, 0x56, 0x41, 0x55, 0x41, 0x54, 0x55, 0x53, 0x48, 0x83, 0xec, 0x40}, 0},
		// AMD's libamdhip64 5.2: push %rbp.
		{"push rbp first", []byte{0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41, 0x55, 0x41, 0x54}, 0},
		// libcuda 535's cuLaunchKernel: cmpl $0x321cba00,0x18d933e(%rip); je +0xc;
		// jmp *0x17e18c6(%rip).
		{"libcuda stub", []byte{0x81, 0x3d, 0x3e, 0x93, 0x8d, 0x01, 0x00, 0xba, 0x1c, 0x32, 0x74, 0x0c}, 10},
		// The same compare followed by something other than a short conditional jump:
		// nothing known to be emulated comes next, so the symbol itself.
		{"compare then call", []byte{0x81, 0x3d, 0x3e, 0x93, 0x8d, 0x01, 0x00, 0xba, 0x1c, 0x32, 0xe8, 0x00}, 0},
		{"too short to tell", []byte{0x81, 0x3d, 0x3e, 0x93}, 0},
		{"nothing read", nil, 0},
	} {
		if got := attachOffset(c.code); got != c.want {
			t.Errorf("%s: offset %d, want %d", c.name, got, c.want)
		}
	}
}
