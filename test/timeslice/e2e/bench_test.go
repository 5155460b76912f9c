//go:build timeslicee2e

package timeslicee2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// Grant round trips as the gate makes them: a holder at the end of its slice
// sends release(seq, MORE) and waits for its next grant (one send, one
// receive). "grants/s" is always all clients' grants over the wall time; with
// one client that is 1 / round trip, with N concurrent clients on GPUs of their
// own it is the daemon's grant rate.

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0
	}
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// grantLoop takes n grants of gpu on c (release with more work -> next grant)
// and returns the round trips.
func grantLoop(c *client.Client, gpu proto.UUID, n int) ([]time.Duration, error) {
	g, err := c.Acquire(gpu)
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if err := c.Release(gpu, g.Seq, true); err != nil {
			return nil, err
		}
		if g, err = c.WaitGrant(); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
	}
	return lat, c.Release(gpu, g.Seq, false)
}

// BenchmarkGrantRoundTrip: the Go client (internal/timeslice/client) from a process of its
// own, as every real client is (this test binary re-executed): clients=1, the
// round trip; clients=4 connections on GPUs of their own, the daemon's rate.
func BenchmarkGrantRoundTrip(b *testing.B) {
	for _, clients := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			cfg := testCfg(b)
			startDaemon(b, cfg)
			for b.Loop() {
				p := startChild(b, cfg, "grants", "", "GS_N="+strconv.Itoa(200000/clients),
					"GS_CLIENTS="+strconv.Itoa(clients))
				reportGrantC(b, strings.Join(p.all(b, 5*time.Minute), "\n"))
			}
		})
	}
}

// grantsChild is the "grants" child: it prints "rtt P50_NS P99_NS GRANTS_PER_S"
// per connection and "total GRANTS_PER_S".
func grantsChild(ctx context.Context, socket string) error {
	var n, clients int
	if _, err := fmt.Sscan(os.Getenv("GS_N"), &n); err != nil {
		return fmt.Errorf("GS_N: %w", err)
	}
	if _, err := fmt.Sscan(os.Getenv("GS_CLIENTS"), &clients); err != nil {
		return fmt.Errorf("GS_CLIENTS: %w", err)
	}
	var cs []*client.Client
	for range clients {
		c, err := client.Dial(ctx, socket)
		if err != nil {
			return err
		}
		defer c.Close() //nolint:errcheck // exiting
		cs = append(cs, c)
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cs {
		wg.Go(func() {
			t := time.Now()
			lat, err := grantLoop(c, proto.UUID{0x70, byte(i)}, n)
			el := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			p50, p99 := percentiles(lat)
			fmt.Println("rtt", p50.Nanoseconds(), p99.Nanoseconds(), int(float64(n)/el.Seconds()))
		})
	}
	wg.Wait()
	fmt.Println("total", int(float64(n*clients)/time.Since(start).Seconds()))
	return errors.Join(errs...)
}

// BenchmarkGrantC: the same from C client processes (gs-grantbench, the
// gate's own frame code): procs=1 (the round trip), procs=4 on GPUs of their
// own (the daemon's grant rate), and 4 sharing one GPU (every grant a hand-over
// between processes); each beside its floor, the same exchange with a C peer
// that answers at once (on a VM the cost of waking a process on another CPU
// varies several-fold with the host's load: compare within one run). p50 is
// the median of the processes' medians, p99 the worst process's p99.
func BenchmarkGrantC(b *testing.B) {
	bench := os.Getenv("GPUSLICE_NODE_GRANTBENCH")
	if bench == "" {
		b.Skip("set GPUSLICE_NODE_GRANTBENCH to build/node/gs-grantbench (make bench-node does)")
	}
	for _, tc := range []struct {
		procs int
		mode  string
	}{{1, "floor"}, {1, "own"}, {4, "floor"}, {4, "own"}, {4, "shared"}} {
		b.Run(fmt.Sprintf("procs=%d/gpu=%s", tc.procs, tc.mode), func(b *testing.B) {
			cfg := testCfg(b)
			startDaemon(b, cfg)
			for b.Loop() {
				out, err := exec.Command(bench, cfg.Socket, strconv.Itoa(200000/tc.procs), strconv.Itoa(tc.procs), tc.mode).CombinedOutput()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				reportGrantC(b, string(out))
			}
		})
	}
}

func reportGrantC(b *testing.B, out string) {
	var p50s []int64
	var worst99 int64
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var p50, p99 int64
		var rate, total float64
		if n, _ := fmt.Sscanf(l, "rtt %d %d %f", &p50, &p99, &rate); n == 3 {
			p50s = append(p50s, p50)
			worst99 = max(worst99, p99)
		} else if n, _ := fmt.Sscanf(l, "total %f", &total); n == 1 {
			b.ReportMetric(total, "grants/s")
		}
	}
	if len(p50s) == 0 {
		b.Fatalf("no round trips in %q", out)
	}
	slices.Sort(p50s)
	b.ReportMetric(float64(p50s[len(p50s)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(worst99)/1e3, "p99-µs")
}
