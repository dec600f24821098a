package pushback

import (
	"testing"
	"time"
)

// A node 50 ms ahead of its gateway, 1 ms each way on the wire and 2 ms in the gateway:
// the exchange says +50 ms within half the round trip; a slower exchange later does not
// move the estimate, a faster one does; exchanges older than the window are forgotten.
func TestClockEstimatorTakesTheShortestRoundTrip(t *testing.T) {
	var c ClockEstimator
	if _, _, ok := c.Offset(time.Unix(0, 0)); ok {
		t.Fatal("an offset before any exchange")
	}
	const ahead = 50 * time.Millisecond
	base := time.Unix(1_800_000_000, 0)
	exchange := func(at time.Time, out, in time.Duration) bool {
		t1 := at.Add(ahead).UnixNano()
		t2 := at.Add(out).UnixNano()
		t3 := at.Add(out + 2*time.Millisecond).UnixNano()
		t4 := at.Add(out + 2*time.Millisecond + in + ahead).UnixNano()
		return c.Add(t1, t2, t3, t4, at)
	}
	if !exchange(base, time.Millisecond, time.Millisecond) {
		t.Fatal("refused")
	}
	if off, unc, ok := c.Offset(base); !ok || off != ahead || unc != time.Millisecond {
		t.Fatalf("offset %v ± %v (%v), want 50ms ± 1ms", off, unc, ok)
	}
	// 9 ms out and 1 ms back: alone it would say 46 ms, but its round trip is longer.
	exchange(base.Add(time.Second), 9*time.Millisecond, time.Millisecond)
	if off, _, _ := c.Offset(base.Add(time.Second)); off != ahead {
		t.Errorf("a slower exchange moved the offset to %v", off)
	}
	// Later, the first exchanges have left the window: the slow one is all there is.
	later := base.Add(clockWindow + 500*time.Millisecond)
	if off, unc, ok := c.Offset(later); !ok || off != 46*time.Millisecond || unc != 5*time.Millisecond {
		t.Errorf("after the window: %v ± %v (%v), want the slow exchange's 46ms ± 5ms", off, unc, ok)
	}
	if c.Add(10, 5, 4, 20, base) || c.Add(10, 5, 6, 9, base) {
		t.Error("an exchange whose times do not fit was taken")
	}
}

func TestClockStampsRoundTrip(t *testing.T) {
	t1 := time.Unix(1_800_000_000, 123)
	got, ok := ParseClockRequest(FormatClockRequest(t1))
	if !ok || got != t1.UnixNano() {
		t.Fatalf("request: %d %v", got, ok)
	}
	a := FormatClockAnswer(got, t1.Add(time.Millisecond), t1.Add(2*time.Millisecond))
	x, y, z, ok := ParseClockAnswer(a)
	if !ok || x != t1.UnixNano() || y != t1.Add(time.Millisecond).UnixNano() || z != t1.Add(2*time.Millisecond).UnixNano() {
		t.Fatalf("answer %q: %d %d %d %v", a, x, y, z, ok)
	}
	for _, bad := range []string{"", "c1.", "c1.x", "c2.5", "c1.-5", "c1.99999999999999999999999"} {
		if _, ok := ParseClockRequest(bad); ok {
			t.Errorf("request %q read", bad)
		}
	}
	for _, bad := range []string{"c1.1,2", "c1.1,2,3,4", "c1.1,3,2", "c1.a,b,c", "v2.1,2,3"} {
		if _, _, _, ok := ParseClockAnswer(bad); ok {
			t.Errorf("answer %q read", bad)
		}
	}
}
