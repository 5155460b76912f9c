package timeslice

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/ctxprobe"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// probeServer is a daemon's state as far as probeContexts uses it: its probe
// answers each run from runs (the last one again once they are used up).
func probeServer(runs []func() (ctxprobe.Result, error)) (*Server, *int, *sync.Mutex) {
	var mu sync.Mutex
	n := 0
	s := &Server{log: klog.Background(), devSeedGiven: map[string]uint64{}, reprobe: make(chan struct{}, 1)}
	s.cfg.ContextProbeRetry = 5 * time.Millisecond
	s.cfg.ContextProbe = func(context.Context, ctxprobe.Want) (ctxprobe.Result, error) {
		mu.Lock()
		i := min(n, len(runs)-1)
		n++
		mu.Unlock()
		return runs[i]()
	}
	return s, &n, &mu
}

// A probe run that failed, or measured a figure no context takes (0 B: a
// context reserved at it would let a group's first contexts pass the limit
// together), is run again after a wait (not at once, not never), until a
// run measures; then it waits for a GPU to be added. The node's seed is the
// good run's.
func TestProbeAgainAfterFailure(t *testing.T) {
	good := groupstate.DeviceSeed{TotalMiB: 81559, KiB: 500<<10 + 1}
	s, n, mu := probeServer([]func() (ctxprobe.Result, error){
		func() (ctxprobe.Result, error) { return ctxprobe.Result{}, errors.New("cuInit: 999") },
		func() (ctxprobe.Result, error) { return ctxprobe.Parse([]byte("seed GPU-a 81559 0\n")) },
		func() (ctxprobe.Result, error) { return ctxprobe.Result{Seeds: []groupstate.DeviceSeed{good}}, nil },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); s.probeContexts(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		seeds := append([]groupstate.DeviceSeed(nil), s.devSeeds...)
		s.mu.Unlock()
		if len(seeds) == 1 && seeds[0] == good {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("after 10 s: %d probe runs, seeds %+v; want the third run's %+v", *n, seeds, good)
		}
		time.Sleep(time.Millisecond)
	}
	// The waits before the second and third run: 5 ms, then 10 ms.
	if took := time.Since(start); took < 15*time.Millisecond {
		t.Fatalf("three runs in %v: the failed ones were run again without waiting", took)
	}
	time.Sleep(100 * time.Millisecond) // a good run is not repeated
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if *n != 3 {
		t.Fatalf("%d probe runs, want 3 (a failure, an implausible figure, a measurement)", *n)
	}
}

// A daemon whose context probe never returns (a probe in an uninterruptible
// driver call, which its kill does not end) stops when told to: Run returns
// within a few seconds of the cancel (the probe's run abandoned), where it
// waited for the probe forever.
func TestRunStopsWithProbeStuck(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig(func(string) string { return "" })
	cfg.RunDir, cfg.Socket = filepath.Join(dir, "run"), filepath.Join(dir, "node.sock")
	cfg.ListGPUs = func() ([]proto.UUID, error) { return nil, nil }
	stuck, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	cfg.ContextProbe = func(context.Context, ctxprobe.Want) (ctxprobe.Result, error) {
		close(stuck)
		<-release // ignores its ctx, as a process in D state ignores SIGKILL
		return ctxprobe.Result{}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, cfg) }()
	select {
	case <-stuck:
	case err := <-ran:
		t.Fatalf("Run: %v before the probe ran", err)
	}
	cancel()
	start := time.Now()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return 30 s after its cancel: it waits for the stuck probe")
	}
	t.Logf("Run returned %v after its cancel", time.Since(start).Round(time.Millisecond))
}

// The first run measures every device; a GPU the driver lists anew is
// measured alone, with the kinds measured already named (the probe makes no
// context on a device of those kinds), not every GPU again; a run that found
// an implausible figure is run again for that device alone.
func TestProbeOnlyAdded(t *testing.T) {
	h100 := groupstate.DeviceSeed{TotalMiB: 81559, KiB: 500<<10 + 1}
	wants := make(chan ctxprobe.Want, 8)
	s := &Server{log: klog.Background(), devSeedGiven: map[string]uint64{}, reprobe: make(chan struct{}, 1)}
	s.cfg.ContextProbeRetry = 5 * time.Millisecond
	runs := 0
	s.cfg.ContextProbe = func(_ context.Context, w ctxprobe.Want) (ctxprobe.Result, error) {
		wants <- w
		runs++
		switch runs {
		case 1:
			return ctxprobe.Result{Seeds: []groupstate.DeviceSeed{h100}}, nil
		case 2:
			return ctxprobe.Parse([]byte("seed " + proto.UUID{2}.String() + " 1000 0\n"))
		}
		return ctxprobe.Result{}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.probeContexts(ctx)
	next := func() ctxprobe.Want {
		select {
		case w := <-wants:
			return w
		case <-time.After(10 * time.Second):
			t.Fatalf("no probe run in 10 s")
		}
		return ctxprobe.Want{}
	}
	if w := next(); w.Devices != nil || len(w.Seeded) != 0 {
		t.Fatalf("first run: %+v; want every device", w)
	}
	added := proto.UUID{2} // the GPU of the second run's figure
	s.wantProbe([]proto.UUID{added})
	if w := next(); len(w.Devices) != 1 || w.Devices[0] != added.String() || len(w.Seeded) != 1 || w.Seeded[0] != h100.TotalMiB {
		t.Fatalf("after a GPU was added: %+v; want that GPU alone, kind %d measured", w, h100.TotalMiB)
	}
	if w := next(); len(w.Devices) != 1 || w.Devices[0] != added.String() {
		t.Fatalf("after an implausible figure: %+v; want that GPU again", w)
	}
}

// TestGPUAddedWhileServing: a client naming a GPU the driver lists anew
// (a MIG instance made for a claim) reaches wantProbe from Server.gpu, which
// holds mu: wantProbe must not take mu (the daemon hung there, every status
// write and client with it, in make e2e-mig).
func TestGPUAddedWhileServing(t *testing.T) {
	a, b := proto.UUID{1}, proto.UUID{2}
	list := []proto.UUID{a}
	s := &Server{log: klog.Background(), gpus: map[proto.UUID]*gpuState{}, reprobe: make(chan struct{}, 1),
		cfg: DefaultConfig(func(string) string { return "" })}
	s.known = newKnownGPUs(func() ([]proto.UUID, error) { return list, nil }, klog.Background())
	s.known.onNew = s.wantProbe
	if _, err := s.gpu(a); err != nil {
		t.Fatalf("gpu a: %v", err)
	}
	list = []proto.UUID{a, b}
	s.known.mu.Lock()
	s.known.listed = time.Time{} // listed long ago: the next unknown GPU lists again
	s.known.mu.Unlock()
	done := make(chan error, 1)
	go func() { _, err := s.gpu(b); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gpu b: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Server.gpu of a GPU listed anew still waiting after 5 s: wantProbe waits for the mu its caller holds")
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if len(s.probeNew) != 1 || s.probeNew[0] != b {
		t.Fatalf("probeNew %v, want [b]", s.probeNew)
	}
}
