package taints

import (
	"strings"
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

// TestNode: health and utilization become each GPU's taints; Update says
// when they changed, so the caller republishes only then.
func TestNode(t *testing.T) {
	t0 := time.Unix(1000, 0)
	n := NewNode(2, 90, 70, 10*time.Second)
	ok := []Health{{Healthy: true}, {Healthy: true}}
	steps := []struct {
		at      time.Duration
		health  []Health
		util    []float64
		changed bool
		keys    [2]string // "key/effect" of each GPU's taints, joined
	}{
		{0, ok, []float64{95, 10}, false, [2]string{"", ""}},
		{10 * time.Second, ok, []float64{95, 10}, true, [2]string{"gpuslice.io/busy/NoSchedule", ""}},
		{11 * time.Second, ok, []float64{-1, 10}, false, [2]string{"gpuslice.io/busy/NoSchedule", ""}}, // not measured: kept
		{12 * time.Second, []Health{{Healthy: true}, {Lost: true, Reason: "xid-79"}}, []float64{95, 10}, true,
			[2]string{"gpuslice.io/busy/NoSchedule", "gpuslice.io/unhealthy/NoExecute"}},
		{13 * time.Second, []Health{{Healthy: true}, {Lost: true, Reason: "xid-79"}}, []float64{95, 10}, false,
			[2]string{"gpuslice.io/busy/NoSchedule", "gpuslice.io/unhealthy/NoExecute"}},
	}
	for i, s := range steps {
		got, changed := n.Update(s.health, s.util, t0.Add(s.at))
		if changed != s.changed {
			t.Fatalf("step %d: changed %v, want %v", i, changed, s.changed)
		}
		for g := range 2 {
			var keys []string
			for _, tn := range got[g] {
				keys = append(keys, tn.Key+"/"+string(tn.Effect))
			}
			if k := strings.Join(keys, ","); k != s.keys[g] {
				t.Fatalf("step %d GPU %d: taints %q, want %q", i, g, k, s.keys[g])
			}
		}
	}
	if got, _ := n.Update([]Health{{Reason: strings.Repeat("x", 100)}, {Healthy: true}}, nil, t0); len(got[0][0].Value) != 63 {
		t.Fatalf("taint value of %d characters, want it cut to 63", len(got[0][0].Value))
	}
	off := NewNode(1, 0, 0, 0)
	if got, _ := off.Update([]Health{{Healthy: true}}, []float64{100}, t0); off.BusyOn() || len(got[0]) != 0 {
		t.Fatalf("busy taint off, yet %v", got[0])
	}
}
