package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// cpuProfile takes a CPU profile of gpuslice-scheduler over the preemption
// phase (-preempt-profile): the scheduler serves pprof on a free port
// (kube-scheduler's --profiling, on by default, with the pprof paths open
// to anonymous requests on this loopback-only test cluster).
type cpuProfile struct {
	path    string
	seconds int
	port    int
}

// secondsOr is the profile's length, or def when none is asked.
func (p *cpuProfile) secondsOr(def int) int {
	if p == nil || p.seconds <= 0 {
		return def
	}
	return p.seconds
}

// args are the scheduler flags that serve pprof; none when no profile is asked.
func (p *cpuProfile) args() ([]string, error) {
	if p == nil || p.path == "" {
		return nil, nil
	}
	port, err := harness.FreePort()
	if err != nil {
		return nil, err
	}
	p.port = port
	// (the phase's counters are read from /metrics on the same port: schedmetrics.go)
	return []string{"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--authorization-always-allow-paths=/healthz,/metrics,/debug/pprof,/debug/pprof/*"}, nil
}

// start fetches the scheduler's allocation profile so far (to path.allocs0)
// and a CPU profile of p.seconds in the background (to path); the returned
// channel gives the outcome. finish takes the allocation profile again
// (path.allocs1: go tool pprof -diff_base path.allocs0 path.allocs1 shows
// what the phase allocated).
func (p *cpuProfile) start(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	if p == nil || p.path == "" {
		done <- nil
		return done
	}
	if err := p.fetch(ctx, "allocs", p.path+".allocs0"); err != nil {
		done <- err
		return done
	}
	go func() { done <- p.fetch(ctx, fmt.Sprintf("profile?seconds=%d", p.seconds), p.path) }()
	return done
}

// finish waits for the CPU profile and takes the allocation profile again.
func (p *cpuProfile) finish(ctx context.Context, started <-chan error) error {
	if err := <-started; err != nil || p == nil || p.path == "" {
		return err
	}
	return p.fetch(ctx, "allocs", p.path+".allocs1")
}

// fetch writes the scheduler's /debug/pprof/<what> to path.
func (p *cpuProfile) fetch(ctx context.Context, what, path string) error {
	url := fmt.Sprintf("https://127.0.0.1:%d/debug/pprof/%s", p.port, what)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	// The scheduler's serving certificate is self-signed, made at start.
	c := &http.Client{Timeout: time.Duration(p.seconds+60) * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback test cluster
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("pprof %s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("pprof %s: %s: %s", what, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("pprof %s: %w", what, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("pprof %s: %w", what, err)
	}
	return f.Close()
}

// apiserverProfile takes a CPU profile of kube-apiserver over the
// preemption phase (-apiserver-profile): its /debug/pprof, open to the
// bench's system:masters token.
func apiserverProfile(ctx context.Context, cp *harness.ControlPlane, path string, seconds int) <-chan error {
	done := make(chan error, 1)
	if path == "" {
		done <- nil
		return done
	}
	go func() {
		b, err := cp.Client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+60) * time.Second).DoRaw(ctx)
		if err != nil {
			done <- fmt.Errorf("kube-apiserver profile: %w", err)
			return
		}
		done <- os.WriteFile(path, b, 0o644)
	}()
	return done
}

// during wraps a workload's setup and books so that a CPU profile of
// p.seconds (to p.path) starts once the scheduler runs and the setup is
// done, as the pods start to arrive, and the books (read once every pod is
// bound, the scheduler still running) wait for it to be written
// (-dra-profile; the allocation profiles before the pods and once all are
// bound to path.allocs0 and path.allocs1, as start and finish take them);
// the channel gives the profile's outcome after the run
// (nil when none is asked).
func (p *cpuProfile) during(setup func(context.Context, string) error, books func(context.Context, string) (string, error)) (
	s func(context.Context, string) error, b func(context.Context, string) (string, error), outcome <-chan error) {
	done := make(chan error, 1)
	if p == nil || p.path == "" {
		done <- nil
		return setup, books, done
	}
	fetched := make(chan error, 1)
	s = func(ctx context.Context, ns string) error {
		if setup != nil {
			if err := setup(ctx, ns); err != nil {
				fetched <- nil
				return err
			}
		}
		if err := p.fetch(ctx, "allocs", p.path+".allocs0"); err != nil {
			fetched <- err
			return nil
		}
		go func() { fetched <- p.fetch(ctx, fmt.Sprintf("profile?seconds=%d", p.seconds), p.path) }()
		return nil
	}
	b = func(ctx context.Context, ns string) (string, error) {
		err := <-fetched
		if err == nil {
			err = p.fetch(ctx, "allocs", p.path+".allocs1")
		}
		// (the run's attempts and their wall time, all pods bound)
		fmt.Println(schedulerMetrics(ctx, []string{"--secure-port=" + strconv.Itoa(p.port)}))
		done <- err
		if books == nil {
			return "", nil
		}
		return books(ctx, ns)
	}
	return s, b, done
}
