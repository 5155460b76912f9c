package taints

import (
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

func TestBusyHysteresis(t *testing.T) {
	b := Busy{Above: 90, Below: 70, Hold: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	for i, s := range []struct {
		at   time.Duration
		util float64
		want bool
	}{
		{0, 95, false},                // above, not yet for Hold
		{5 * time.Second, 99, false},  // still not
		{8 * time.Second, 50, false},  // dropped: the run restarts
		{9 * time.Second, 91, false},  // new run
		{19 * time.Second, 92, true},  // 10 s above: tainted
		{20 * time.Second, 80, true},  // between the thresholds: stays tainted
		{21 * time.Second, 60, true},  // below, not for Hold yet
		{25 * time.Second, 75, true},  // back between: the run restarts
		{26 * time.Second, 60, true},  // new run below
		{36 * time.Second, 65, false}, // 10 s below: untainted
		{37 * time.Second, 85, false}, // between: stays untainted
	} {
		if got := b.Observe(s.util, t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d (%v, %v%%): tainted %v, want %v", i, s.at, s.util, got, s.want)
		}
	}
}

func TestFor(t *testing.T) {
	if got := For(true, false, false, ""); len(got) != 0 {
		t.Fatalf("healthy idle GPU tainted: %v", got)
	}
	got := For(false, false, true, "xid-48")
	if len(got) != 2 || got[0].Key != KeyUnhealthy || got[0].Effect != resourceapi.DeviceTaintEffectNoSchedule ||
		got[0].Value != "xid-48" || got[1].Key != KeyBusy || got[1].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Fatalf("unhealthy busy: %v", got)
	}
	if got := For(false, true, false, "xid-79"); len(got) != 1 || got[0].Effect != resourceapi.DeviceTaintEffectNoExecute {
		t.Fatalf("lost GPU: %v", got)
	}
}
