package startpages

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestReadOnlyMappingsAreTheExecutablesPrivateUnwritableOnes(t *testing.T) {
	const maps = `00400000-00a9a000 r--p 00000000 08:01 1234 /opt/fathom/bin/fathom
00a9a000-05da0000 r-xp 0069a000 08:01 1234 /opt/fathom/bin/fathom
05da0000-0a777000 r--p 059a0000 08:01 1234 /opt/fathom/bin/fathom
0a777000-0a7f6000 rw-p 0a376000 08:01 1234 /opt/fathom/bin/fathom
0a7f6000-0a800000 r--s 00000000 08:01 1234 /opt/fathom/bin/fathom
0b000000-0b100000 r-xp 00000000 08:01 99 /opt/fathom/bin/fathom-other
0b100000-0b200000 r-xp 00000000 08:01 98 /opt/fathom/bin/fathom two
0c000000-0c100000 r-xp 00000000 08:01 77 /opt/fathom/bin/fathom (deleted)
7f0000000000-7f0000021000 rw-p 00000000 00:00 0
7f0000100000-7f0000200000 r-xp 00000000 08:01 55 /usr/lib/x86_64-linux-gnu/libc.so.6
`
	got, err := readOnlyMappings(strings.NewReader(maps), "/opt/fathom/bin/fathom")
	if err != nil {
		t.Fatal(err)
	}
	want := []addrRange{{0x400000, 0xa9a000}, {0xa9a000, 0x5da0000}, {0x5da0000, 0xa777000}, {0xc000000, 0xc100000}}
	if len(got) != len(want) {
		t.Fatalf("got %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: %x, want %x", i, got[i], want[i])
		}
	}
	if _, err := readOnlyMappings(strings.NewReader("zz-yy r--p 0 0:0 1 /x\n"), "/x"); err == nil {
		t.Error("a malformed address range was accepted")
	}
}

// The test binary is an executable like fathom: after Release, the resident part of
// its read-only mappings is a fraction of what it was, and the process runs on.
func TestReleaseDropsResidentExecutablePages(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before, size := residentReadOnlyKB(t, exe)
	advised, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after, _ := residentReadOnlyKB(t, exe)
	t.Logf("read-only mappings of %s: %d kB, resident %d kB before, %d kB after", exe, size, before, after)
	if advised != size*1024 {
		t.Errorf("advised %d bytes, the read-only mappings span %d kB", advised, size)
	}
	if before < 1024 || after > before/2 {
		t.Errorf("resident read-only pages: %d kB before, %d kB after; want at least half released", before, after)
	}
}

// residentReadOnlyKB sums Rss and Size over exe's private, unwritable mappings.
func residentReadOnlyKB(t *testing.T, exe string) (rss, size int64) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[5] == exe && fields[1][1] != 'w' && fields[1][3] == 'p'
			continue
		}
		if !in || len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "Rss:":
			rss += kb
		case "Size:":
			size += kb
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rss, size
}
