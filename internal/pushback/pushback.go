// Package pushback carries straggler thresholds from the gateway to the nodes in the
// answers to their own OTLP exports: the gateway's straggler processor adds the lines of
// the cohorts it saw in a request to that request's context, the thresholds extension's
// server middleware writes them into the response (an HTTP header, gRPC header
// metadata), and its client middleware on the node reads them back. The wire form is
// small, bounded and versioned: "v3." and base64url of a JSON array of cohorts, each
// with its lines and their windows' lines (v2, lines without windows, and v1, one object
// per line, are still read).
package pushback

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HTTPHeader is the response header (HTTP) and MetadataKey the header metadata key
// (gRPC) that carry thresholds.
const (
	HTTPHeader  = "Fathom-Thresholds"
	MetadataKey = "fathom-thresholds"
	version     = "v3."
	versionV2   = "v2."
	versionV1   = "v1."
)

// Threshold is one cohort's line for one signal at one evaluation.
type Threshold struct {
	Cluster string  `json:"cl,omitempty"`
	Cohort  string  `json:"co"`
	Signal  string  `json:"s"`
	Median  float64 `json:"m"`
	Line    float64 `json:"l"`
	// Worse is "higher" or "lower": the side of the line a straggler is on.
	Worse string `json:"w"`
	// At is when the gateway computed it (unix milliseconds).
	At int64 `json:"t"`
	// Windows are the lines for the median of a rank's samples over each window
	// (v3): a node judges its ranks' windows by them as the gateway does.
	Windows []WindowLine `json:"-"`
	// Noise is how much one rank's score varies from sample to sample across the
	// cohort, in the line's spreads (0: not sent): a node weighs its ranks'
	// accumulated evidence by it as the gateway does, instead of by its own few
	// ranks' noise.
	Noise float64 `json:"-"`
	// Drawn is when the newest sample the line was drawn from ended (unix
	// milliseconds, on its node's clock; 0: not sent): a node judges a sample by a line
	// drawn from its peers' samples of the same time, not by one drawn before they came.
	Drawn int64 `json:"-"`
	// Pair says this is no line but the gateway's verdict on a cohort of two ranks,
	// judged by the difference between them over time: a node cannot draw that from
	// its own ranks' samples, so it says what the gateway holds. Flagged are the ranks
	// the gateway holds flagged on the signal (none: both judged healthy); Median and
	// Line are unused.
	Pair bool `json:"-"`
	// Verdicts says that Flagged is the gateway's verdict on the line's cohort as well
	// (v3 with `f`): of the ranks of the node it answers, the ones it holds flagged on
	// the signal. A node says that verdict rather than judging its ranks by the line
	// itself: it sees its own ranks' samples sooner than their peers', and a line
	// drawn before a burst that slows the whole host flags its ranks alone.
	Verdicts bool   `json:"-"`
	Flagged  []Flag `json:"-"`
}

// Flag is a rank the gateway holds flagged: since when (unix milliseconds, the
// gateway's clock) and, for a cohort's verdict, the rule that flagged it and its
// window (seconds, 0 but for the window rule); for a pair's, what its record said:
// the sample that flagged it, the value its partner made expected, the line and the
// score. A node writes a cohort flag's numbers from its own sample and the line.
type Flag struct {
	Rank                         int64
	Since                        int64
	Rule                         string
	Window                       float64
	Value, Expected, Line, Score float64
}

// WindowLine is a cohort's line for the medians of its ranks' samples over the last
// Seconds.
type WindowLine struct {
	Seconds      float64
	Median, Line float64
}

// Beyond says whether value lies past the line on the worse side.
func (t Threshold) Beyond(value float64) bool {
	if t.Worse == "lower" {
		return value < t.Line
	}
	return value > t.Line
}

// Key identifies a threshold: one signal of one cohort.
type Key struct{ Cluster, Cohort, Signal string }

func (t Threshold) Key() Key { return Key{t.Cluster, t.Cohort, t.Signal} }

// Encode writes thresholds in the wire form, as many as fit in maxBytes (in the order
// given), and returns how many were left out.
func Encode(ts []Threshold, maxBytes int) (string, int) {
	for n := len(ts); n > 0; n-- {
		raw, err := json.Marshal(group(ts[:n]))
		if err != nil {
			return "", len(ts)
		}
		s := version + base64.RawURLEncoding.EncodeToString(raw)
		if len(s) <= maxBytes {
			return s, len(ts) - n
		}
	}
	return "", len(ts)
}

// The v2 form says each cohort once per evaluation: a node's answer is mostly the
// lines of one or two cohorts, and v1, which repeated cluster, cohort and time in
// every line, needed 1,300 bytes for the six default signals of one. v2 needs about
// 500, so 1 KiB carries them.
type wireCohort struct {
	Cluster string     `json:"cl,omitempty"`
	Cohort  string     `json:"co"`
	At      int64      `json:"t"`
	Lines   []wireLine `json:"l"`
	// Noise is each line's Noise, in the order of Lines, when any is known. A key of
	// its own and not a sixth field of a line: a node that predates it ignores a key
	// it does not know, where it rejects a line of six fields (and with it the answer).
	Noise []wireNoise `json:"n,omitempty"`
	// Drawn is each line's At less its Drawn, in milliseconds, in the order of Lines,
	// when every line has one: a key of its own, for the same reason as Noise.
	Drawn []int64 `json:"d,omitempty"`
	// Pairs are the cohort's pair verdicts (Threshold.Pair), apart from its lines: a
	// node that predates them ignores the key and sees a cohort of no lines, where a
	// verdict written as a line would be judged as one.
	Pairs []wirePair `json:"p,omitempty"`
	// Flags are the gateway's verdicts on the cohort's lines for the ranks of the
	// node it answers (Threshold.Verdicts), sent when every line has them; present
	// and empty when it holds none of them flagged. A node that predates them ignores
	// the key and judges by the lines.
	Flags *[]wireFlag `json:"f,omitempty"`
}

// wireFlag is a rank flagged on one of its cohort's lines, written as [line index,
// rank, ms from since to the cohort's time, rule] or, for the window rule, [line
// index, rank, ms, "w", window seconds]; the rule is its first letter.
type wireFlag struct {
	line int
	Flag
}

// maxFlags bounds the flagged ranks read per cohort: a node's ranks, many times over.
const maxFlags = 256

func (f wireFlag) MarshalJSON() ([]byte, error) {
	out := strconv.AppendInt([]byte{'['}, int64(f.line), 10)
	out = append(out, ',')
	out = strconv.AppendInt(out, f.Rank, 10)
	out = append(out, ',')
	out = strconv.AppendInt(out, f.Since, 10)
	switch f.Rule {
	case RuleSamples, RuleEvidence:
		out = append(out, `,"`...)
		out = append(out, f.Rule[0], '"', ']')
	case RuleWindow:
		if !(f.Window > 0) || !finite(f.Window) {
			return nil, fmt.Errorf("a window flag's window of %v s is not a length", f.Window)
		}
		out = append(out, `,"w",`...)
		out = strconv.AppendFloat(out, f.Window, 'g', 5, 64)
		out = append(out, ']')
	default:
		return nil, fmt.Errorf("a flag's rule %q is not samples, window or evidence", f.Rule)
	}
	return out, nil
}

func (f *wireFlag) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) != 4 && len(raw) != 5 {
		return fmt.Errorf("a flag has %d fields, want [line, rank, ms since, rule] or a window's [line, rank, ms since, \"w\", seconds]", len(raw))
	}
	var rule string
	if err := errors.Join(json.Unmarshal(raw[0], &f.line), json.Unmarshal(raw[1], &f.Rank),
		json.Unmarshal(raw[2], &f.Since), json.Unmarshal(raw[3], &rule)); err != nil {
		return fmt.Errorf("a flag: %w", err)
	}
	if f.line < 0 || f.Rank < 0 || f.Since < -maxSinceMillis || f.Since > maxSinceMillis {
		return fmt.Errorf("a flag [%d, %d, %d] is not [line, rank, ms since]", f.line, f.Rank, f.Since)
	}
	switch {
	case rule == "s" && len(raw) == 4:
		f.Rule = RuleSamples
	case rule == "e" && len(raw) == 4:
		f.Rule = RuleEvidence
	case rule == "w" && len(raw) == 5:
		f.Rule = RuleWindow
		if err := json.Unmarshal(raw[4], &f.Window); err != nil || !(f.Window > 0) {
			return fmt.Errorf("a window flag's window %s is not a length", raw[4])
		}
	default:
		return fmt.Errorf("a flag's rule %q with %d fields is not s, e, or w with its window", rule, len(raw))
	}
	return nil
}

// The rules a cohort's verdict names (semconv's fathom.straggler.rule values).
const (
	RuleSamples  = "samples"
	RuleWindow   = "window"
	RuleEvidence = "evidence"
)

// wirePair is written as [signal, worse] and then one array per flagged rank: [rank,
// milliseconds from since to the cohort's time, value, expected, line, score], the
// numbers with seven significant digits.
type wirePair struct {
	signal  string
	worse   string
	flagged []Flag
	at      int64
}

// maxPairFlags bounds the flagged ranks read per pair verdict: a pair has two.
const maxPairFlags = 2

func (p wirePair) MarshalJSON() ([]byte, error) {
	out, err := appendSignal([]byte{'['}, p.signal)
	if err != nil {
		return nil, err
	}
	out = append(out, `,"`...)
	out = append(out, p.worse[0], '"')
	for _, f := range p.flagged {
		if !finite(f.Value) || !finite(f.Expected) || !finite(f.Line) || !finite(f.Score) {
			return nil, fmt.Errorf("pair verdict of %s is not a finite number", p.signal)
		}
		out = append(out, ",["...)
		out = strconv.AppendInt(out, f.Rank, 10)
		out = append(out, ',')
		out = strconv.AppendInt(out, p.at-f.Since, 10)
		for _, v := range []float64{f.Value, f.Expected, f.Line, f.Score} {
			out = append(out, ',')
			out = strconv.AppendFloat(out, v, 'g', 7, 64)
		}
		out = append(out, ']')
	}
	return append(out, ']'), nil
}

func (p *wirePair) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) < 2 || len(raw) > 2+maxPairFlags {
		return fmt.Errorf("a pair verdict has %d fields, want a signal, its worse side and up to %d flagged ranks", len(raw), maxPairFlags)
	}
	var worse string
	if err := errors.Join(json.Unmarshal(raw[0], &p.signal), json.Unmarshal(raw[1], &worse)); err != nil {
		return err
	}
	var err error
	if p.worse, err = readWorse(worse); err != nil {
		return err
	}
	p.signal = readSignal(p.signal)
	for _, r := range raw[2:] {
		var nums []float64
		if err := json.Unmarshal(r, &nums); err != nil {
			return fmt.Errorf("a pair verdict's flagged rank: %w", err)
		}
		if len(nums) != 6 || nums[0] != math.Trunc(nums[0]) || nums[0] < 0 || nums[1] != math.Trunc(nums[1]) || math.Abs(nums[1]) > maxSinceMillis {
			return fmt.Errorf("a pair verdict's flagged rank %v is not [rank, ms since, value, expected, line, score]", nums)
		}
		p.flagged = append(p.flagged, Flag{Rank: int64(nums[0]), Since: -int64(nums[1]), Value: nums[2], Expected: nums[3], Line: nums[4], Score: nums[5]})
	}
	return nil
}

// maxSinceMillis bounds how long before its verdict a flag may say it began: a year.
const maxSinceMillis = 366 * 24 * 3600 * 1000

// wireNoise is a line's noise with three significant digits.
type wireNoise float64

func (n wireNoise) MarshalJSON() ([]byte, error) {
	if !finite(float64(n)) || n < 0 {
		return nil, fmt.Errorf("noise %v is not a finite spread", float64(n))
	}
	return strconv.AppendFloat(nil, float64(n), 'g', 3, 64), nil
}

// wireLine is written as [signal, median, line, worse] or, with windows, [signal,
// median, line, worse, [seconds, median, line, ...]]: worse is "l" or "h", and a
// signal named "fathom.rank.<rest>" is written ".<rest>". Values keep seven
// significant digits, far finer than any line's own noise; a window's five, which keeps
// three windows of the seven default signals within the 1 KiB an answer carries.
type wireLine struct {
	signal       string
	median, line float64
	worse        string
	windows      []WindowLine
}

const rankSignalPrefix = "fathom.rank."

func (l wireLine) MarshalJSON() ([]byte, error) {
	if math.IsNaN(l.median) || math.IsInf(l.median, 0) || math.IsNaN(l.line) || math.IsInf(l.line, 0) {
		return nil, fmt.Errorf("line of %s is not a finite number", l.signal)
	}
	out, err := appendSignal([]byte{'['}, l.signal)
	if err != nil {
		return nil, err
	}
	out = append(out, ',')
	out = strconv.AppendFloat(out, l.median, 'g', 7, 64)
	out = append(out, ',')
	out = strconv.AppendFloat(out, l.line, 'g', 7, 64)
	out = append(out, `,"`...)
	out = append(out, l.worse[0], '"')
	if len(l.windows) > 0 {
		out = append(out, ",["...)
		for i, w := range l.windows {
			if !finite(w.Seconds) || !finite(w.Median) || !finite(w.Line) {
				return nil, fmt.Errorf("window line of %s is not a finite number", l.signal)
			}
			if i > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendFloat(out, w.Seconds, 'g', 5, 64)
			out = append(out, ',')
			out = strconv.AppendFloat(out, w.Median, 'g', 5, 64)
			out = append(out, ',')
			out = strconv.AppendFloat(out, w.Line, 'g', 5, 64)
		}
		out = append(out, ']')
	}
	return append(out, ']'), nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// appendSignal writes a signal's name as a JSON string, "fathom.rank.<rest>" as
// ".<rest>".
func appendSignal(out []byte, signal string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(signal, rankSignalPrefix); ok {
		signal = "." + rest
	}
	b, err := json.Marshal(signal)
	if err != nil {
		return nil, err
	}
	return append(out, b...), nil
}

// readSignal is the signal's name appendSignal wrote.
func readSignal(name string) string {
	if rest, ok := strings.CutPrefix(name, "."); ok {
		return rankSignalPrefix + rest
	}
	return name
}

// readWorse reads a worse side written as its first letter.
func readWorse(w string) (string, error) {
	switch w {
	case "l":
		return "lower", nil
	case "h":
		return "higher", nil
	}
	return "", fmt.Errorf("a worse side is %q, want l or h", w)
}

// maxWindows bounds the windows read per line.
const maxWindows = 8

func (l *wireLine) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) != 4 && len(raw) != 5 {
		return fmt.Errorf("a line has %d fields, want 4, or 5 with windows", len(raw))
	}
	var worse string
	if err := errors.Join(json.Unmarshal(raw[0], &l.signal), json.Unmarshal(raw[1], &l.median),
		json.Unmarshal(raw[2], &l.line), json.Unmarshal(raw[3], &worse)); err != nil {
		return err
	}
	if len(raw) == 5 {
		var flat []float64
		if err := json.Unmarshal(raw[4], &flat); err != nil {
			return fmt.Errorf("a line's windows: %w", err)
		}
		if len(flat)%3 != 0 || len(flat) > 3*maxWindows {
			return fmt.Errorf("a line's windows hold %d numbers, want up to %d triples (seconds, median, line)", len(flat), maxWindows)
		}
		for i := 0; i < len(flat); i += 3 {
			if !(flat[i] > 0) {
				return fmt.Errorf("a line's window of %v s is not a length", flat[i])
			}
			l.windows = append(l.windows, WindowLine{Seconds: flat[i], Median: flat[i+1], Line: flat[i+2]})
		}
	}
	l.signal = readSignal(l.signal)
	var err error
	l.worse, err = readWorse(worse)
	return err
}

// group puts consecutive thresholds of one cohort and evaluation together, keeping
// their order.
func group(ts []Threshold) []wireCohort {
	var out []wireCohort
	for _, t := range ts {
		if n := len(out); n == 0 || out[n-1].Cluster != t.Cluster || out[n-1].Cohort != t.Cohort || out[n-1].At != t.At {
			out = append(out, wireCohort{Cluster: t.Cluster, Cohort: t.Cohort, At: t.At})
		}
		c := &out[len(out)-1]
		if t.Pair {
			c.Pairs = append(c.Pairs, wirePair{signal: t.Signal, worse: t.Worse, flagged: t.Flagged, at: t.At})
			continue
		}
		if t.Noise > 0 || len(c.Noise) > 0 {
			// Noise for every line of the cohort once one has any, 0 for those without.
			c.Noise = append(c.Noise, make([]wireNoise, len(c.Lines)-len(c.Noise))...)
			c.Noise = append(c.Noise, wireNoise(t.Noise))
		}
		if t.Verdicts && (len(c.Lines) == 0 || c.Flags != nil) {
			if c.Flags == nil {
				c.Flags = &[]wireFlag{}
			}
			for _, f := range t.Flagged {
				f.Since = t.At - f.Since
				*c.Flags = append(*c.Flags, wireFlag{line: len(c.Lines), Flag: f})
			}
		} else {
			// A line without them: the cohort's lines say none, rather than an empty
			// list that would read as nobody flagged.
			c.Flags = nil
		}
		if t.Drawn != 0 && len(c.Drawn) == len(c.Lines) {
			c.Drawn = append(c.Drawn, t.At-t.Drawn)
		} else {
			// A line without it: the cohort's lines say none, rather than a 0 that
			// would read as drawn at the evaluation itself.
			c.Drawn = nil
		}
		c.Lines = append(c.Lines, wireLine{signal: t.Signal, median: t.Median, line: t.Line, worse: t.Worse, windows: t.Windows})
	}
	return out
}

// MaxDecode bounds what a node reads from one response.
const MaxDecode = 16 << 10

// Decode reads the wire form, v3, v2 or v1; an unknown version or a malformed value is
// an error (the node then keeps what it had).
func Decode(s string) ([]Threshold, error) {
	if len(s) > MaxDecode {
		return nil, fmt.Errorf("thresholds value of %d bytes is over the %d-byte limit", len(s), MaxDecode)
	}
	var ts []Threshold
	rest, v3 := strings.CutPrefix(s, version)
	if !v3 {
		rest, v3 = strings.CutPrefix(s, versionV2) // the same form, without windows
	}
	if v3 {
		var cohorts []wireCohort
		if err := decodeValue(rest, &cohorts); err != nil {
			return nil, err
		}
		for _, c := range cohorts {
			if len(c.Noise) != 0 && len(c.Noise) != len(c.Lines) {
				return nil, fmt.Errorf("thresholds value: cohort %q has %d lines and %d noises", c.Cohort, len(c.Lines), len(c.Noise))
			}
			if len(c.Drawn) != 0 && len(c.Drawn) != len(c.Lines) {
				return nil, fmt.Errorf("thresholds value: cohort %q has %d lines and %d sample times", c.Cohort, len(c.Lines), len(c.Drawn))
			}
			if c.Flags != nil && len(*c.Flags) > maxFlags {
				return nil, fmt.Errorf("thresholds value: cohort %q has %d flags, over the %d read", c.Cohort, len(*c.Flags), maxFlags)
			}
			first := len(ts)
			for i, l := range c.Lines {
				t := Threshold{Cluster: c.Cluster, Cohort: c.Cohort, Signal: l.signal, Median: l.median, Line: l.line, Worse: l.worse, At: c.At, Windows: l.windows}
				if len(c.Noise) > 0 {
					if n := float64(c.Noise[i]); finite(n) && n > 0 {
						t.Noise = n
					}
				}
				if len(c.Drawn) > 0 {
					t.Drawn = c.At - c.Drawn[i]
				}
				ts = append(ts, t)
			}
			if c.Flags != nil {
				for i := range c.Lines {
					ts[first+i].Verdicts = true
				}
				for _, f := range *c.Flags {
					if f.line >= len(c.Lines) {
						return nil, fmt.Errorf("thresholds value: cohort %q has a flag on line %d of %d", c.Cohort, f.line, len(c.Lines))
					}
					f.Since = c.At - f.Since
					ts[first+f.line].Flagged = append(ts[first+f.line].Flagged, f.Flag)
				}
			}
			for _, p := range c.Pairs {
				t := Threshold{Cluster: c.Cluster, Cohort: c.Cohort, Signal: p.signal, Worse: p.worse, At: c.At, Pair: true}
				for _, f := range p.flagged {
					f.Since += c.At
					t.Flagged = append(t.Flagged, f)
				}
				ts = append(ts, t)
			}
		}
	} else if rest, ok := strings.CutPrefix(s, versionV1); ok {
		if err := decodeValue(rest, &ts); err != nil {
			return nil, err
		}
	} else {
		return nil, errors.New("thresholds value has no known version prefix (want v3., v2. or v1.)")
	}
	for _, t := range ts {
		if t.Cohort == "" || t.Signal == "" || (t.Worse != "lower" && t.Worse != "higher") {
			return nil, fmt.Errorf("thresholds value: incomplete entry %+v", t)
		}
	}
	return ts, nil
}

func decodeValue(b64 string, into any) error {
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("thresholds value: %w", err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("thresholds value: %w", err)
	}
	return nil
}

// Response collects the thresholds one request should be answered with.
type Response struct {
	mu    sync.Mutex
	items map[Key]Threshold
	order []Key
}

type responseKey struct{}

// NewContext returns a context that collects thresholds for the answer to one request.
func NewContext(ctx context.Context) (context.Context, *Response) {
	r := &Response{items: map[Key]Threshold{}}
	return context.WithValue(ctx, responseKey{}, r), r
}

// FromContext returns the request's collector, or nil when no middleware asked for one.
func FromContext(ctx context.Context) *Response {
	r, _ := ctx.Value(responseKey{}).(*Response)
	return r
}

// Add records a threshold for the answer (a later one for the same key replaces it).
func (r *Response) Add(t Threshold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := t.Key()
	if _, ok := r.items[k]; !ok {
		r.order = append(r.order, k)
	}
	r.items[k] = t
}

// Thresholds returns what was added, in the order first added.
func (r *Response) Thresholds() []Threshold {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Threshold, 0, len(r.order))
	for _, k := range r.order {
		out = append(out, r.items[k])
	}
	return out
}

// Source is what the node side offers: the latest thresholds pushed back, kept until
// their TTL. The straggler processor in node mode finds it among the extensions.
// Reachability is what a Source may also say: when the gateway last answered (zero:
// never). A node judges its samples against a line older than they are only while the
// gateway answers: the held line stands in for an answer lost or late, not for a
// gateway that is away (shutting down, restarting), whose absence the ranks may feel
// unevenly on a shared host.
type Reachability interface {
	LastAnswer() time.Time
}

type Source interface {
	// Threshold returns the cohort's line for the signal, and whether one is held
	// (received and not older than the TTL at now). The processor asks for every
	// cohort and signal of its ranks at each evaluation, held or not: that is how a
	// source that polls the gateway when push-back is absent learns what to ask for.
	Threshold(k Key, now time.Time) (Threshold, bool)
}
