package pushback

import (
	"context"
	"strings"
	"testing"
)

func sample(cohort string) Threshold {
	return Threshold{Cluster: "c1", Cohort: cohort, Signal: "fathom.rank.device_wait.time", Median: 0.301, Line: 0.2341, Worse: "lower", At: 1_800_000_013_000}
}

// What the gateway writes, the node reads back exactly; the value is bounded, and the
// thresholds that do not fit are counted, not cut in the middle.
func TestEncodeDecode(t *testing.T) {
	in := []Threshold{sample("comm-1"), sample("comm-2 ünïcode")}
	v, left := Encode(in, 1024)
	if left != 0 || !strings.HasPrefix(v, "v1.") {
		t.Fatalf("encoded %q, %d left out", v, left)
	}
	for _, r := range v {
		if r < '!' || r > '~' {
			t.Fatalf("value %q has a byte a header cannot carry", v)
		}
	}
	out, err := Decode(v)
	if err != nil || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("decoded %+v (%v), want %+v", out, err, in)
	}
	one, _ := Encode(in[:1], 1024)
	v, left = Encode(in, len(one))
	if left != 1 || v != one {
		t.Errorf("with room for one: %q, %d left out; want the first alone", v, left)
	}
	if v, left := Encode(in, 10); v != "" || left != 2 {
		t.Errorf("with room for none: %q, %d left out", v, left)
	}
	// The one-threshold form is about 200 bytes, so 1 KiB carries four cohorts.
	if len(one) > 220 {
		t.Errorf("one threshold takes %d bytes", len(one))
	}
}

func TestDecodeRefusesWhatItCannotTrust(t *testing.T) {
	good, _ := Encode([]Threshold{sample("c")}, 1024)
	incomplete, _ := Encode([]Threshold{{Cohort: "c", Signal: "s", Worse: "sideways"}}, 1024)
	for name, v := range map[string]string{
		"no version":     strings.TrimPrefix(good, "v1."),
		"future version": "v2." + strings.TrimPrefix(good, "v1."),
		"not base64":     "v1.!!!",
		"not json":       "v1.bm90IGpzb24",
		"incomplete":     incomplete,
		"oversized":      "v1." + strings.Repeat("A", MaxDecode),
	} {
		if _, err := Decode(v); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestBeyondFollowsTheWorseSide(t *testing.T) {
	low := sample("c")
	high := low
	high.Worse, high.Line = "higher", 0.5
	if !low.Beyond(0.1) || low.Beyond(0.3) || !high.Beyond(0.6) || high.Beyond(0.4) {
		t.Error("Beyond does not follow the worse side")
	}
}

// The request context collects one threshold per cohort and signal, the latest, in
// the order first added; a context without a collector has none.
func TestResponseCollects(t *testing.T) {
	if FromContext(context.Background()) != nil {
		t.Fatal("a plain context has a collector")
	}
	ctx, r := NewContext(context.Background())
	a, b := sample("a"), sample("b")
	r.Add(a)
	r.Add(b)
	a2 := a
	a2.Line = 0.2
	FromContext(ctx).Add(a2)
	got := r.Thresholds()
	if len(got) != 2 || got[0] != a2 || got[1] != b {
		t.Errorf("collected %+v", got)
	}
}
