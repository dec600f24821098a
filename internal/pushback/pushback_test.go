package pushback

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"slices"
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
	in[1].Windows = []WindowLine{{Seconds: 3, Median: 0.3, Line: 0.28}, {Seconds: 12, Median: 0.30125, Line: 0.2975}}
	v, left := Encode(in, 1024)
	if left != 0 || !strings.HasPrefix(v, "v3.") {
		t.Fatalf("encoded %q, %d left out", v, left)
	}
	for _, r := range v {
		if r < '!' || r > '~' {
			t.Fatalf("value %q has a byte a header cannot carry", v)
		}
	}
	out, err := Decode(v)
	if err != nil || !reflect.DeepEqual(out, in) {
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
	// One line of a cohort of its own takes about 120 bytes.
	if len(one) > 130 {
		t.Errorf("one threshold takes %d bytes", len(one))
	}
}

// The six default signals of one cohort fit well inside 1 KiB: the cohort is said once,
// and the signals' common prefix not at all. Values come back to seven significant
// digits, and signals that do not start with fathom.rank. come back whole.
func TestOneCohortsSixLinesFitInOneKiB(t *testing.T) {
	signals := []string{"fathom.rank.device_wait.time", "fathom.rank.host_lead.time", "fathom.rank.gpu.sm_clock.deficit",
		"fathom.rank.gpu.errors", "fathom.rank.rdma.errors", "custom.xmit_wait"}
	var in []Threshold
	for i, s := range signals {
		in = append(in, Threshold{Cluster: "prod-eu-west", Cohort: "nccl:f09f67cf0e91f865", Signal: s,
			Median: 0.30099999999999993 * float64(i+1), Line: 0.23406060999999995 * float64(i+1), Worse: []string{"lower", "higher"}[i%2], At: 1_800_000_013_000})
	}
	v, left := Encode(in, 1024)
	if left != 0 || len(v) > 560 {
		t.Fatalf("six lines of one cohort: %d bytes, %d left out", len(v), left)
	}
	out, err := Decode(v)
	if err != nil || len(out) != len(in) {
		t.Fatalf("decoded %+v (%v)", out, err)
	}
	for i := range in {
		got, want := out[i], in[i]
		if got.Signal != want.Signal || got.Cluster != want.Cluster || got.Cohort != want.Cohort || got.Worse != want.Worse || got.At != want.At ||
			math.Abs(got.Median-want.Median) > 1e-6*want.Median || math.Abs(got.Line-want.Line) > 1e-6*want.Line {
			t.Errorf("line %d: got %+v, want %+v", i, got, want)
		}
	}
	t.Logf("six lines of one cohort: %d bytes", len(v))
}

// Lines of two cohorts that alternate keep their order (the rotation relies on it), and
// a line that is not a finite number cannot be written.
func TestEncodeKeepsTheOrderGiven(t *testing.T) {
	a, b := sample("a"), sample("b")
	a2 := a
	a2.Signal = "fathom.rank.host_lead.time"
	v, _ := Encode([]Threshold{a, b, a2}, 1024)
	out, err := Decode(v)
	if err != nil || !reflect.DeepEqual(out, []Threshold{a, b, a2}) {
		t.Errorf("decoded %+v (%v)", out, err)
	}
	bad := a
	bad.Line = math.NaN()
	if v, left := Encode([]Threshold{bad}, 1024); v != "" || left != 1 {
		t.Errorf("a NaN line was written: %q", v)
	}
	bad = a
	bad.Windows = []WindowLine{{Seconds: 3, Median: math.Inf(1), Line: 1}}
	if v, left := Encode([]Threshold{bad}, 1024); v != "" || left != 1 {
		t.Errorf("an infinite window line was written: %q", v)
	}
}

// The lines the default signal list pushes for one cohort fit the 1 KiB an answer
// carries by default: device wait, host lead and CPU time with their three windows
// (min_duration 1.5 s: 3, 6 and 12 s) and their noise, CPU time a collective with its
// noise and no windows, and the five signals judged by their samples alone (GPU,
// fabric, TCP) without either, each with the time of the samples it was drawn from and
// the gateway's verdict on the node's ranks, one of them flagged on each host-side
// signal. The windows come back to five significant digits, the noise to three, the
// sample times and verdicts exact (786 bytes before the sample times, 843 before the
// verdicts, 923 before CPU time a collective). Seven lines that all had windows fit
// before the noise (1,022 bytes with it: one left out), and so CPU time a collective
// has none.
func TestOneCohortsDefaultLinesFitInOneKiB(t *testing.T) {
	signals := []string{"fathom.rank.device_wait.time", "fathom.rank.host_lead.time", "fathom.rank.cpu.time", "fathom.rank.cpu.per_collective",
		"fathom.rank.gpu.sm_clock.deficit", "fathom.rank.gpu.errors", "fathom.rank.rdma.errors", "fathom.rank.rdma.xmit_wait", "fathom.rank.tcp.retransmits"}
	var in []Threshold
	for i, s := range signals {
		f := float64(i + 1)
		th := Threshold{Cluster: "prod-eu-west", Cohort: "nccl:f09f67cf0e91f865", Signal: s,
			Median: 0.30099999999999993 * f, Line: 0.23406060999999995 * f, Worse: []string{"lower", "higher"}[i%2], At: 1_800_000_013_000,
			Drawn: 1_800_000_012_655 - int64(i/3)*1000, Verdicts: true}
		if i == 3 {
			th.Noise = 0.28712345 * f
			th.Flagged = []Flag{{Rank: 13, Since: 1_800_000_001_250, Rule: RuleEvidence}}
		}
		if i < 3 {
			th.Windows = []WindowLine{{3, 0.30123456 * f, 0.2812345 * f}, {6, 0.30123456 * f, 0.2912345 * f}, {12, 0.30123456 * f, 0.2962345 * f}}
			th.Noise = 0.28712345 * f
			// The node's slow rank, flagged on each host-side signal by another rule.
			th.Flagged = []Flag{{Rank: 13, Since: 1_800_000_001_250, Rule: []string{RuleEvidence, RuleWindow, RuleSamples}[i]}}
			if i == 1 {
				th.Flagged[0].Window = 12
			}
		}
		in = append(in, th)
	}
	v, left := Encode(in, 1024)
	if left != 0 {
		t.Fatalf("the default lines: %d bytes, %d left out", len(v), left)
	}
	out, err := Decode(v)
	if err != nil || len(out) != len(in) {
		t.Fatalf("decoded %+v (%v)", out, err)
	}
	for i := range in {
		for j, w := range in[i].Windows {
			got := out[i].Windows[j]
			if got.Seconds != w.Seconds || math.Abs(got.Median-w.Median) > 1e-4*w.Median || math.Abs(got.Line-w.Line) > 1e-4*w.Line {
				t.Errorf("line %d window %d: got %+v, want %+v", i, j, got, w)
			}
		}
		if math.Abs(out[i].Noise-in[i].Noise) > 5e-3*in[i].Noise {
			t.Errorf("line %d: noise %v, want %v", i, out[i].Noise, in[i].Noise)
		}
		if out[i].Drawn != in[i].Drawn {
			t.Errorf("line %d: drawn from samples of %d, want %d", i, out[i].Drawn, in[i].Drawn)
		}
		if !out[i].Verdicts || !reflect.DeepEqual(out[i].Flagged, in[i].Flagged) {
			t.Errorf("line %d: verdict %v %+v, want %+v", i, out[i].Verdicts, out[i].Flagged, in[i].Flagged)
		}
	}
	t.Logf("the default lines with windows, noise, sample times and a rank flagged on four: %d bytes", len(v))
}

// A line's noise rides beside the lines, under a key of the cohort's own: a node that
// predates it reads the same lines from the same value (it ignores keys it does not
// know, and refuses a line of six fields); a line without noise decodes with none, and
// a value without any noise is what it was before.
func TestNoiseRidesBesideTheLinesAndOldNodesIgnoreIt(t *testing.T) {
	in := []Threshold{
		{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.device_wait.time", Median: 0.3, Line: 0.25, Worse: "lower", At: 1_800_000_013_000},
		{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: 1_800_000_013_000, Noise: 0.2876},
		{Cluster: "c1", Cohort: "comm-2", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: 1_800_000_013_000},
	}
	v, left := Encode(in, 1024)
	if left != 0 {
		t.Fatalf("%d left out", left)
	}
	out, err := Decode(v)
	if err != nil || len(out) != 3 || out[0].Noise != 0 || out[1].Noise != 0.288 || out[2].Noise != 0 {
		t.Fatalf("decoded %+v (%v), want noise 0, 0.288, 0", out, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(v, "v3."))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"n":[0,0.288]`) || strings.Count(string(raw), `"n":`) != 1 {
		t.Errorf("wire form %s, want the noise of comm-1's lines only", raw)
	}
	// The cohort as a node before the noise read it.
	var old []struct {
		Cluster string     `json:"cl,omitempty"`
		Cohort  string     `json:"co"`
		At      int64      `json:"t"`
		Lines   []wireLine `json:"l"`
	}
	if err := json.Unmarshal(raw, &old); err != nil || len(old) != 2 || len(old[0].Lines) != 2 || old[0].Lines[1].line != 0.26 {
		t.Errorf("a node before the noise read %+v (%v)", old, err)
	}
	in[1].Noise = 0
	plain, _ := Encode(in, 1024)
	if raw, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(plain, "v3.")); strings.Contains(string(raw), `"n"`) {
		t.Errorf("no noise, yet the wire form says one: %s", raw)
	}
	bad, _ := json.Marshal([]map[string]any{{"co": "comm-1", "t": 1, "l": [][]any{{".cpu.time", 0.24, 0.26, "h"}}, "n": []float64{0.2, 0.3}}})
	if _, err := Decode("v3." + base64.RawURLEncoding.EncodeToString(bad)); err == nil {
		t.Error("two noises for one line were read")
	}
}

// A node reads the v2 form an older gateway writes: lines without windows.
func TestDecodeReadsVersion2(t *testing.T) {
	raw, _ := json.Marshal([]map[string]any{{"co": "comm-1", "cl": "c1", "t": 1_800_000_013_000, "l": [][]any{{".device_wait.time", 0.301, 0.2341, "l"}}}})
	out, err := Decode("v2." + base64.RawURLEncoding.EncodeToString(raw))
	if err != nil || len(out) != 1 || !reflect.DeepEqual(out[0], sample("comm-1")) {
		t.Errorf("decoded %+v (%v)", out, err)
	}
}

// A node still reads the v1 form an older gateway writes: one object per line.
func TestDecodeReadsVersion1(t *testing.T) {
	raw, _ := json.Marshal([]Threshold{sample("comm-1")})
	out, err := Decode("v1." + base64.RawURLEncoding.EncodeToString(raw))
	if err != nil || len(out) != 1 || !reflect.DeepEqual(out[0], sample("comm-1")) {
		t.Errorf("decoded %+v (%v)", out, err)
	}
}

func TestDecodeRefusesWhatItCannotTrust(t *testing.T) {
	good, _ := Encode([]Threshold{sample("c")}, 1024)
	incomplete, _ := Encode([]Threshold{{Cohort: "c", Signal: "", Worse: "lower"}}, 1024)
	b64 := func(s string) string { return "v3." + base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for name, v := range map[string]string{
		"no version":       strings.TrimPrefix(good, "v3."),
		"future version":   "v4." + strings.TrimPrefix(good, "v3."),
		"not base64":       "v3.!!!",
		"not json":         "v3.bm90IGpzb24",
		"incomplete":       incomplete,
		"sideways":         b64(`[{"co":"c","t":1,"l":[["s",1,2,"s"]]}]`),
		"short line":       b64(`[{"co":"c","t":1,"l":[["s",1,2]]}]`),
		"windows not sets": b64(`[{"co":"c","t":1,"l":[["s",1,2,"l",[3,1]]]}]`),
		"window no length": b64(`[{"co":"c","t":1,"l":[["s",1,2,"l",[0,1,2]]]}]`),
		"windows by text":  b64(`[{"co":"c","t":1,"l":[["s",1,2,"l","3s"]]}]`),
		"too many windows": b64(`[{"co":"c","t":1,"l":[["s",1,2,"l",[` + strings.Repeat("1,1,1,", 8) + `1,1,1]]]}]`),
		"six fields":       b64(`[{"co":"c","t":1,"l":[["s",1,2,"l",[3,1,2],1]]}]`),
		"pair sideways":    b64(`[{"co":"c","t":1,"p":[["s","s"]]}]`),
		"pair of three":    b64(`[{"co":"c","t":1,"p":[["s","h",[1,0,1,1,1,1],[2,0,1,1,1,1],[3,0,1,1,1,1]]]}]`),
		"pair rank half":   b64(`[{"co":"c","t":1,"p":[["s","h",[1.5,0,1,1,1,1]]]}]`),
		"pair rank short":  b64(`[{"co":"c","t":1,"p":[["s","h",[1,0,1,1,1]]]}]`),
		"pair since ages":  b64(`[{"co":"c","t":1,"p":[["s","h",[1,1e15,1,1,1,1]]]}]`),
		"pair by text":     b64(`[{"co":"c","t":1,"p":[["s","h","rank 1"]]}]`),
		"flag of no line":  b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[1,3,0,"e"]]}]`),
		"flag no rule":     b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[0,3,0,"x"]]}]`),
		"flag rank half":   b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[0,1.5,0,"e"]]}]`),
		"flag rank minus":  b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[0,-1,0,"e"]]}]`),
		"flag since ages":  b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[0,1,1e15,"e"]]}]`),
		"flag no window":   b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[0,1,0,"w"]]}]`),
		"window of 0 s":    b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[0,1,0,"w",0]]}]`),
		"samples windowed": b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[[0,1,0,"s",3]]}]`),
		"too many flags":   b64(`[{"co":"c","t":1,"l":[["s",1,2,"l"]],"f":[` + strings.Repeat(`[0,1,0,"e"],`, 256) + `[0,1,0,"e"]]}]`),
		"v1 incomplete":    "v1." + base64.RawURLEncoding.EncodeToString([]byte(`[{"co":"c","s":"s","w":"sideways"}]`)),
		"oversized":        "v3." + strings.Repeat("A", MaxDecode),
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
	if !reflect.DeepEqual(got, []Threshold{a2, b}) {
		t.Errorf("collected %+v", got)
	}
}

// The time a line's samples ended rides beside the lines as each line's age before the
// evaluation, under a key of the cohort's own that a node before it ignores. A cohort
// with a line that has none says none for any (0 would read as "drawn at the
// evaluation"), and a count that does not match the lines is refused.
func TestSampleTimesRideBesideTheLines(t *testing.T) {
	in := []Threshold{
		{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.device_wait.time", Median: 0.3, Line: 0.25, Worse: "lower", At: 1_800_000_013_000, Drawn: 1_800_000_012_640},
		{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: 1_800_000_013_000, Drawn: 1_800_000_013_020},
		{Cluster: "c1", Cohort: "comm-2", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: 1_800_000_013_000, Drawn: 1_800_000_012_700},
		{Cluster: "c1", Cohort: "comm-2", Signal: "fathom.rank.host_lead.time", Median: 0.3, Line: 0.4, Worse: "higher", At: 1_800_000_013_000},
	}
	v, left := Encode(in, 1024)
	if left != 0 {
		t.Fatalf("%d left out", left)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(v, "v3."))
	if err != nil {
		t.Fatal(err)
	}
	// A sample that ended after the evaluation (a node's clock ahead of the
	// gateway's) is a negative age.
	if !strings.Contains(string(raw), `"d":[360,-20]`) || strings.Count(string(raw), `"d":`) != 1 {
		t.Errorf("wire form %s, want comm-1's sample ages only", raw)
	}
	out, err := Decode(v)
	if err != nil || len(out) != 4 {
		t.Fatalf("decoded %+v (%v)", out, err)
	}
	for i, want := range []int64{1_800_000_012_640, 1_800_000_013_020, 0, 0} {
		if out[i].Drawn != want {
			t.Errorf("line %d: drawn %d, want %d", i, out[i].Drawn, want)
		}
	}
	var old []struct {
		Cohort string     `json:"co"`
		Lines  []wireLine `json:"l"`
	}
	if err := json.Unmarshal(raw, &old); err != nil || len(old) != 2 || len(old[0].Lines) != 2 {
		t.Errorf("a node before the sample times read %+v (%v)", old, err)
	}
	bad, _ := json.Marshal([]map[string]any{{"co": "comm-1", "t": 1, "l": [][]any{{".cpu.time", 0.24, 0.26, "h"}}, "d": []int64{3, 4}}})
	if _, err := Decode("v3." + base64.RawURLEncoding.EncodeToString(bad)); err == nil {
		t.Error("two sample times for one line were read")
	}
}

// A pair's verdict rides in the cohort's answer apart from its lines: the node reads
// back which rank the gateway holds flagged, since when and what its record said, and
// a node that predates verdicts sees a cohort without lines, not a line at 0.
func TestPairVerdictsRideApartFromTheLines(t *testing.T) {
	at := int64(1_800_000_013_000)
	in := []Threshold{
		{Cluster: "c1", Cohort: "pair-1", Signal: "fathom.rank.cpu.time", Worse: "higher", At: at, Pair: true,
			Flagged: []Flag{{Rank: 1, Since: at - 2250, Value: 0.2875, Expected: 0.2401, Line: 0.2612, Score: 4.125}}},
		{Cluster: "c1", Cohort: "pair-1", Signal: "fathom.rank.device_wait.time", Worse: "lower", At: at, Pair: true},
		{Cluster: "c1", Cohort: "comm-2", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: at},
	}
	v, left := Encode(in, 1024)
	if left != 0 {
		t.Fatalf("%d left out", left)
	}
	out, err := Decode(v)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("decoded %+v (%v), want %+v", out, err, in)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(v, "v3."))
	if err != nil {
		t.Fatal(err)
	}
	var old []struct {
		Cohort string     `json:"co"`
		Lines  []wireLine `json:"l"`
	}
	if err := json.Unmarshal(raw, &old); err != nil || len(old) != 2 || len(old[0].Lines) != 0 || len(old[1].Lines) != 1 {
		t.Errorf("a node before pair verdicts read %+v (%v) from %s, want no line for pair-1", old, err, raw)
	}
	in[0].Flagged[0].Score = math.NaN()
	if v, _ := Encode(in, 1024); v != "" {
		t.Errorf("a verdict with a NaN score was written: %q", v)
	}
}

// A cohort's verdicts ride with its lines: the node reads back, for each line, which of
// its ranks the gateway holds flagged, since when and by what rule (a window's with its
// length); a line with nobody flagged still says the gateway sent a verdict, a cohort
// one of whose lines has none says none for all, and a node that predates verdicts
// reads the same lines.
func TestCohortVerdictsRideWithTheLines(t *testing.T) {
	at := int64(1_800_000_013_000)
	in := []Threshold{
		{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: at, Verdicts: true,
			Flagged: []Flag{{Rank: 1, Since: at - 2250, Rule: RuleEvidence}, {Rank: 4, Since: at - 7000, Rule: RuleWindow, Window: 6}}},
		{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.device_wait.time", Median: 0.3, Line: 0.2, Worse: "lower", At: at, Verdicts: true},
		{Cluster: "c1", Cohort: "comm-1", Signal: "fathom.rank.host_lead.time", Median: 0.3, Line: 0.4, Worse: "higher", At: at, Verdicts: true,
			Flagged: []Flag{{Rank: 1, Since: at + 20, Rule: RuleSamples}}},
		{Cluster: "c1", Cohort: "comm-2", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: at, Verdicts: true},
		{Cluster: "c1", Cohort: "comm-3", Signal: "fathom.rank.cpu.time", Median: 0.24, Line: 0.26, Worse: "higher", At: at, Verdicts: true,
			Flagged: []Flag{{Rank: 2, Since: at - 1000, Rule: RuleSamples}}},
		{Cluster: "c1", Cohort: "comm-3", Signal: "fathom.rank.host_lead.time", Median: 0.3, Line: 0.4, Worse: "higher", At: at},
	}
	v, left := Encode(in, 1024)
	if left != 0 {
		t.Fatalf("%d left out", left)
	}
	out, err := Decode(v)
	want := slices.Clone(in)
	// comm-3 has a line without a verdict: none of its lines says one.
	want[4].Verdicts, want[4].Flagged = false, nil
	if err != nil || !reflect.DeepEqual(out, want) {
		t.Fatalf("decoded %+v (%v), want %+v", out, err, want)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(v, "v3."))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"f":[]`) {
		t.Errorf("comm-2's verdict of nobody flagged is not in %s", raw)
	}
	var old []struct {
		Cohort string     `json:"co"`
		Lines  []wireLine `json:"l"`
	}
	if err := json.Unmarshal(raw, &old); err != nil || len(old) != 3 || len(old[0].Lines) != 3 || old[0].Lines[0].line != 0.26 {
		t.Errorf("a node before verdicts read %+v (%v) from %s, want comm-1's three lines", old, err, raw)
	}
	in[0].Flagged[1].Window = 0
	if v, _ := Encode(in, 1024); v != "" {
		t.Errorf("a window's flag without its window was written: %q", v)
	}
}
