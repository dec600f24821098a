package pyframes

import (
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"testing"
)

// python311 is Debian's CPython 3.11, the interpreter the live tests read.
const python311 = "/usr/bin/python3.11"

type liveCode struct {
	Snippet     string `json:"snippet"`
	Qualname    string `json:"qualname"`
	FirstLineNo int    `json:"firstlineno"`
	LineTable   string `json:"linetable"`
	Lines       []*int `json:"lines"` // per code unit; nil: no line
}

// Every code unit of every code object testdata/linetables.py compiles gets, from the
// Go decoder, the line the 3.11 interpreter gives it (co_lines, co_positions and dis
// agreeing), and no line where it has none.
func TestLineMatchesLivePython311(t *testing.T) {
	out, err := exec.Command(python311, "testdata/linetables.py").Output()
	if err != nil {
		t.Fatalf("running %s testdata/linetables.py (the 3.11 line table check needs Debian's python3.11): %v", python311, err)
	}
	var doc struct {
		Version []int      `json:"version"`
		Code    []liveCode `json:"code"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Version) != 2 || doc.Version[0] != 3 || doc.Version[1] != 11 {
		t.Fatalf("%s is Python %v, want 3.11", python311, doc.Version)
	}
	if len(doc.Code) < 20 {
		t.Fatalf("only %d code objects", len(doc.Code))
	}
	forms := map[int]bool{}
	units, noLine, longFunction := 0, 0, false
	for _, c := range doc.Code {
		table, err := hex.DecodeString(c.LineTable)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range table {
			if b&locEntryStart != 0 {
				forms[int(b>>3&15)] = true
			}
		}
		for unit, want := range c.Lines {
			got, ok := Line(11, c.FirstLineNo, table, unit)
			switch {
			case want == nil && ok:
				t.Errorf("%s %s unit %d: line %d, want none", c.Snippet, c.Qualname, unit, got)
			case want != nil && (!ok || got != *want):
				t.Errorf("%s %s unit %d: line %d (%v), want %d", c.Snippet, c.Qualname, unit, got, ok, *want)
			}
			if want == nil {
				noLine++
			} else if c.Qualname == "long_function" && *want > 300 {
				longFunction = true
			}
			units++
		}
		if _, ok := Line(11, c.FirstLineNo, table, len(c.Lines)); ok {
			t.Errorf("%s %s: a line past the last code unit", c.Snippet, c.Qualname)
		}
	}
	// The snippets are there to exercise every form of entry; a Python that stopped
	// producing some would make this test weaker without failing it.
	for form := range 16 {
		if !forms[form] {
			t.Errorf("no code object used location form %d", form)
		}
	}
	if noLine == 0 || !longFunction {
		t.Errorf("no instruction without a line (%d) or none past line 300 of the long function (%v)", noLine, longFunction)
	}
	t.Logf("%d code objects, %d code units (%d without a line) match python3.11", len(doc.Code), units, noLine)
}

type lineCase struct {
	unit int
	line int // -1: no line
}

func checkLines(t *testing.T, minor, first int, table []byte, cases []lineCase) {
	t.Helper()
	for _, c := range cases {
		got, ok := Line(minor, first, table, c.unit)
		if c.line < 0 {
			if ok {
				t.Errorf("3.%d unit %d: line %d, want none", minor, c.unit, got)
			}
			continue
		}
		if !ok || got != c.line {
			t.Errorf("3.%d unit %d: line %d (%v), want %d", minor, c.unit, got, ok, c.line)
		}
	}
}

// 3.9's co_lnotab, from Objects/lnotab_notes.txt at v3.9.x: (byte increment, signed line
// increment) pairs, applied while the accumulated byte offset is at most the address.
// Hand-checked from the format, not against a live 3.9.
func TestLine39(t *testing.T) {
	// Bytes 0-5 line 10, 6-9 line 11, 10-17 line 10 (+2 then -3 at the same address),
	// 18 on line 11.
	table := []byte{6, 1, 4, 2, 0, 0xfd, 8, 1}
	checkLines(t, 9, 10, table, []lineCase{
		{-1, 10}, {0, 10}, {2, 10}, {3, 11}, {4, 11}, {5, 10}, {8, 10}, {9, 11}, {100, 11},
	})
	// A jump of 130 lines is split as (0, 127), (0, 3): both apply at address 0.
	checkLines(t, 9, 1, []byte{0, 127, 0, 3, 4, 1}, []lineCase{{0, 131}, {1, 131}, {2, 132}})
	checkLines(t, 9, 7, nil, []lineCase{{0, 7}, {50, 7}})
	checkLines(t, 9, 10, table[:7], []lineCase{{0, -1}}) // odd length: truncated
}

// 3.10's co_linetable, from Objects/lnotab_notes.txt at v3.10.x: (byte length of a
// range, signed line delta) pairs, -128 for a range with no line. Hand-checked from
// the format, not against a live 3.10.
func TestLine310(t *testing.T) {
	// [0,6) line 2; [6,10) no line; an empty range moving to line 4; [10,18) line 5;
	// [18,20) line 5 again; nothing after byte 20.
	table := []byte{6, 1, 4, 0x80, 0, 2, 8, 1, 2, 0}
	checkLines(t, 10, 1, table, []lineCase{
		{-1, 1}, {0, 2}, {2, 2}, {3, -1}, {4, -1}, {5, 5}, {8, 5}, {9, 5}, {10, -1}, {11, -1},
	})
	// A range longer than 254 bytes and a line jump past 127 are split in several pairs.
	checkLines(t, 10, 100, []byte{254, 127, 4, 0, 0, 30, 2, -10 & 0xff}, []lineCase{
		{0, 227}, {126, 227}, {128, 227}, {129, 247}, {130, -1},
	})
	checkLines(t, 10, 1, table[:9], []lineCase{{0, -1}})
}

// 3.11+'s location table, from Objects/locations.md (unchanged 3.11 to 3.14). The 3.11
// decoding is checked against the interpreter above; these hand-built entries hold the
// other versions to the same reading and pin each form, not checked against a live
// 3.12, 3.13 or 3.14.
func TestLineLocationTable(t *testing.T) {
	table := []byte{
		0x80 | 13<<3 | 1, 0x02, // no columns, 2 units, line +1 (svarint 2): 6
		0x80, 0x05, // short form (form 0), 1 unit, same line: 6
		0x80 | 12<<3 | 2, 0x04, 0x10, // one-line form +2, 3 units: 8
		0x80 | 15<<3,                               // no location, 1 unit
		0x80 | 14<<3, 0x07, 0x00, 0x01, 0x48, 0x03, // long form, line -3 (svarint 7), end column+1 = 200: 5
		0x80 | 13<<3, 0x6c, 0x04, // no columns, line +150 (svarint 300 in two chunks): 155
	}
	want := []lineCase{
		{-1, 5}, {0, 6}, {1, 6}, {2, 6}, {3, 8}, {5, 8}, {6, -1}, {7, 5}, {8, 155}, {9, -1},
	}
	for minor := 11; minor <= 14; minor++ {
		checkLines(t, minor, 5, table, want)
	}
	// Cut inside the last entry's varint: what precedes still decodes, the rest not.
	checkLines(t, 12, 5, table[:len(table)-1], []lineCase{{7, 5}, {8, -1}})
	// A continuation byte where an entry must start, and extra bytes after a short
	// form, are malformed.
	checkLines(t, 13, 5, []byte{0x05, 0x80, 0x00}, []lineCase{{0, -1}})
	checkLines(t, 13, 5, []byte{0x80, 0x05, 0x05, 0x80, 0x00}, []lineCase{{0, -1}})
	// The "no location" entry still moves no line, and the line delta of an entry
	// applies even where its own code units come before the wanted one.
	checkLines(t, 14, 1, []byte{0x80 | 15<<3 | 7, 0x80 | 11<<3, 0, 0}, []lineCase{{7, -1}, {8, 2}, {9, -1}})
	checkLines(t, 8, 1, table, []lineCase{{0, -1}})
	checkLines(t, 15, 1, table, []lineCase{{0, -1}})
}

// Random and truncated tables of every version never panic or read outside the table.
func FuzzLine(f *testing.F) {
	f.Add(11, 1, []byte{0x80 | 13<<3 | 1, 0x02, 0x80 | 14<<3, 0x07, 0x00, 0x01, 0x48, 0x03}, 1)
	f.Add(10, 1, []byte{6, 1, 4, 0x80, 0, 2}, 4)
	f.Add(9, 1, []byte{6, 1, 4, 2}, 3)
	f.Add(14, 1, []byte{0xff, 0xff, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f}, 100)
	f.Fuzz(func(t *testing.T, minor, first int, table []byte, unit int) {
		line, ok := Line(minor, first, table, unit)
		if ok && unit >= 0 && line < 0 {
			t.Fatalf("negative line %d reported as found", line)
		}
	})
}
