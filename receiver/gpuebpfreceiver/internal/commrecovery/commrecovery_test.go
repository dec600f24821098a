package commrecovery

import (
	"math/rand/v2"
	"testing"
)

const (
	allReduce     = 7 // enum nccl_api values do not matter here, only that they differ
	allGather     = 8
	float32Type   = 7
	sum           = 0
	bucketFloats  = 25 << 20 / 4
	lastBucketFlt = 3 << 20 / 4
)

// ddpStep is one DDP step's all-reduces: full buckets, then the smaller last one.
func ddpStep(buckets int) []Shape {
	var out []Shape
	for range buckets {
		out = append(out, Shape{API: allReduce, DataType: float32Type, RedOp: sum, Count: bucketFloats})
	}
	return append(out, Shape{API: allReduce, DataType: float32Type, RedOp: sum, Count: lastBucketFlt})
}

// rankView feeds one rank's collector the job's calls from call number from on (the
// collector started there), each step's calls spread over its first half, and returns
// the set's ID once settled (following the receiver: a shape new after naming
// reopens) and when, in ns since the job began.
func rankView(t *testing.T, step []Shape, stepNS int64, from, steps int, jitter *rand.Rand) (id uint64, at int64, reopened int) {
	t.Helper()
	var c Communicator
	named := false
	for i := from; i < steps*len(step); i++ {
		s, k := i/len(step), i%len(step)
		ts := int64(s)*stepNS + int64(k)*stepNS/(2*int64(len(step))) + jitter.Int64N(stepNS/20+1)
		if c.Observe(step[k], ts, DefaultRule) && named {
			c.Reopen(ts)
			named = false
			reopened++
		}
		if !named && c.Settled(DefaultRule) {
			named, id, at = true, c.ID("job@10.0.0.1:29500"), ts
		}
	}
	if !named {
		t.Fatalf("never settled from call %d", from)
	}
	return id, at, reopened
}

// Ranks whose collectors began at different calls of a job (mid-step, steps apart)
// name its communicator alike, for short and long steps and several bucket counts;
// each settles within the rule's span plus two steps of its first call, or the steps
// its MinCalls take plus one.
func TestRanksThatBeganAtDifferentCallsNameTheCommunicatorAlike(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range []struct {
		buckets int
		stepNS  int64
	}{{1, 2e6}, {7, 20e6}, {7, 200e6}, {40, 1e9}, {3, 1.9e9}} {
		step := ddpStep(shape.buckets)
		steps := int(10e9/shape.stepNS) + 4
		var want uint64
		for r := range 8 {
			from := rng.IntN(3 * len(step))
			id, at, reopened := rankView(t, step, shape.stepNS, from, steps, rng)
			if r == 0 {
				want = id
			}
			if id != want {
				t.Errorf("%d buckets, %d ms steps: rank %d (from call %d) named %016x, rank 0 %016x", shape.buckets, shape.stepNS/1e6, r, from, id, want)
			}
			firstTS := int64(from/len(step)) * shape.stepNS
			callSteps := int64((DefaultRule.MinCalls+len(step)-1)/len(step)) + 1
			if limit := max(DefaultRule.MinSpanNS+2*shape.stepNS, callSteps*shape.stepNS); at-firstTS > limit+shape.stepNS/2 {
				t.Errorf("%d buckets, %d ms steps: rank %d settled %d ms after its first call, want at most %d", shape.buckets, shape.stepNS/1e6, r, (at-firstTS)/1e6, limit/1e6)
			}
			if reopened != 0 {
				t.Errorf("%d buckets, %d ms steps: rank %d reopened %d times", shape.buckets, shape.stepNS/1e6, r, reopened)
			}
		}
	}
}

// A step longer than the rule's span whose odd bucket comes late: a collector sees
// only full buckets for over 2 s and names the set too early. The late shape reopens
// it, and every rank ends on the one name of the whole set, wherever it began.
func TestALateShapeReopensAndEndsOnTheWholeSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	step := ddpStep(30)
	const stepNS = 5e9
	var want uint64
	reopens := 0
	for i, from := range []int{0, 1, 15, 29, 30, 31, 45} {
		id, _, reopened := rankView(t, step, stepNS, from, 5, rng)
		if i == 0 {
			want = id
		}
		if id != want || reopened > 1 {
			t.Errorf("from call %d: named %016x after %d reopenings, want %016x after at most one", from, id, reopened, want)
		}
		reopens += reopened
	}
	if reopens == 0 {
		t.Errorf("no rank reopened: the test does not exercise a late shape")
	}
}

// The name says which job: the same shapes in another run of the job are another
// communicator; other shapes are too.
func TestTheNameTellsJobsAndShapesApart(t *testing.T) {
	var a, b Communicator
	for i := range 20 {
		a.Observe(ddpStep(2)[i%3], int64(i)*1e8, DefaultRule)
		b.Observe(Shape{API: allGather, DataType: float32Type, Count: bucketFloats}, int64(i)*1e8, DefaultRule)
	}
	ids := map[uint64]string{}
	for name, id := range map[string]uint64{
		"job run 1":                    a.ID("job@10.0.0.1:29500"),
		"job run 2":                    a.ID("job@10.0.0.1:29501"),
		"another job":                  a.ID("other@10.0.0.1:29500"),
		"job run 1, all-gather shapes": b.ID("job@10.0.0.1:29500"),
	} {
		if other, ok := ids[id]; ok {
			t.Errorf("%s and %s have one name %016x", name, other, id)
		}
		ids[id] = name
	}
}

// Shapes without end never settle: past MaxShapes the communicator is hopeless at once.
// A communicator that never settles is hopeless GiveUpNS after its calls began to wait.
func TestShapesWithoutEndAndSetsThatNeverSettleGiveUp(t *testing.T) {
	var c Communicator
	for i := range DefaultRule.MaxShapes + 1 {
		c.Observe(Shape{API: allGather, DataType: float32Type, Count: uint64(i + 1)}, int64(i)*1e6, DefaultRule)
	}
	if !c.Hopeless(DefaultRule, 0, 1e9) || c.Settled(DefaultRule) || c.SettledAtEnd(DefaultRule) {
		t.Errorf("a communicator of %d shapes: hopeless %v, settled %v", DefaultRule.MaxShapes+1, c.Hopeless(DefaultRule, 0, 1e9), c.Settled(DefaultRule))
	}
	var d Communicator
	d.Observe(Shape{API: allReduce, Count: 1}, 0, DefaultRule)
	if d.Hopeless(DefaultRule, 0, DefaultRule.GiveUpNS-1) || !d.Hopeless(DefaultRule, 0, DefaultRule.GiveUpNS) {
		t.Errorf("hopeless just before GiveUpNS %v, at it %v", d.Hopeless(DefaultRule, 0, DefaultRule.GiveUpNS-1), d.Hopeless(DefaultRule, 0, DefaultRule.GiveUpNS))
	}
}

// A short job that exits within the span settles at its end once its set held still
// over the later half of its calls; one that showed a new shape late does not.
func TestAShortJobSettlesAtItsEnd(t *testing.T) {
	step := ddpStep(3)
	var c Communicator
	for i := range 40 {
		c.Observe(step[i%len(step)], int64(i)*1e6, DefaultRule)
	}
	if c.Settled(DefaultRule) || !c.SettledAtEnd(DefaultRule) {
		t.Errorf("40 calls in 40 ms: settled %v, at the end %v; want false, true", c.Settled(DefaultRule), c.SettledAtEnd(DefaultRule))
	}
	c.Observe(Shape{API: allGather, Count: 9}, 40e6, DefaultRule)
	if c.SettledAtEnd(DefaultRule) {
		t.Errorf("a set that grew at its last call settled at the end")
	}
	var few Communicator
	for i := range DefaultRule.MinCalls - 1 {
		few.Observe(step[0], int64(i)*1e6, DefaultRule)
	}
	if few.SettledAtEnd(DefaultRule) {
		t.Errorf("%d calls settled at the end, want at least %d", DefaultRule.MinCalls-1, DefaultRule.MinCalls)
	}
}
