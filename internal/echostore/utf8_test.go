package echostore

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// One row with bytes that are not UTF-8 (a sender's protobuf strings are not checked
// on the way in) used to make DuckDB refuse the whole batch; now that row is stored
// with U+FFFD in their place, the row beside it as sent, and the caller's rows are
// left as they were.
func TestAppendStoresInvalidUTF8AsReplacementCharacters(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "echo.duckdb"))
	defer s.Close()
	rows := testRows(2, "n1", time.Unix(1_700_000_000, 0))
	rows[0].Node = "gpu-\xff"
	rows[0].Name = "bad\xc3\x28name"
	rows[0].Body = "body \xed\xa0\x80 end"
	rows[0].Attributes = "{\"k\":\"\xfe\"}"
	if err := s.Append(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
	if rows[0].Node != "gpu-\xff" {
		t.Fatalf("Append changed the caller's row: %q", rows[0].Node)
	}
	got, err := s.DB().Query(`SELECT node, name, body, attributes FROM events ORDER BY ts`)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	want := [][4]string{
		{"gpu-\uFFFD", "bad\uFFFD(name", "body \uFFFD end", `{"k":"` + "\uFFFD" + `"}`},
		{"n1", "nccl.allreduce.duration", "", `{"k":"v"}`},
	}
	i := 0
	for ; got.Next(); i++ {
		var node, name, attrs string
		var body *string
		if err := got.Scan(&node, &name, &body, &attrs); err != nil {
			t.Fatal(err)
		}
		b := ""
		if body != nil {
			b = *body
		}
		if i >= len(want) || [4]string{node, name, b, attrs} != want[i] {
			t.Fatalf("row %d: %q %q %q %q", i, node, name, b, attrs)
		}
	}
	if err := got.Err(); err != nil || i != len(want) {
		t.Fatalf("%d rows, %v", i, err)
	}
}
