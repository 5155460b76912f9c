package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/proto"
)

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0
	}
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}

// BenchmarkGrantRoundTrip: one client over the real socket asks for the GPU
// (acquire -> grant) and hands it back (release), repeatedly. Reports the
// acquire-to-grant round trip p50/p99 and grants per second.
func BenchmarkGrantRoundTrip(b *testing.B) {
	cfg := testCfg(b)
	startDaemon(b, cfg)
	c, err := Dial(context.Background(), cfg.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close() //nolint:errcheck // benchmark
	lat := make([]time.Duration, 0, 1<<16)
	start := time.Now()
	n := 0
	for b.Loop() {
		t := time.Now()
		g, err := c.Acquire(testGPU)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		if err := c.Release(testGPU, g.Seq, false); err != nil {
			b.Fatal(err)
		}
		n++
	}
	el := time.Since(start)
	p50, p99 := percentiles(lat)
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(n)/el.Seconds(), "grants/s")
}

// BenchmarkGrantsParallel: several clients, each on its own GPU (its own policy
// instance), acquire and release as fast as they can: the daemon's grant rate.
func BenchmarkGrantsParallel(b *testing.B) {
	for _, clients := range []int{2, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			cfg := testCfg(b)
			startDaemon(b, cfg)
			var cs []*Client
			for i := range clients {
				c, err := Dial(context.Background(), cfg.Socket)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close() //nolint:errcheck // benchmark
				_ = i
				cs = append(cs, c)
			}
			var wg sync.WaitGroup
			per := b.N/clients + 1
			start := time.Now()
			b.ResetTimer()
			for i, c := range cs {
				gpu := proto.UUID{0x70, byte(i)}
				wg.Go(func() {
					for range per {
						g, err := c.Acquire(gpu)
						if err != nil {
							b.Error(err)
							return
						}
						if err := c.Release(gpu, g.Seq, false); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(per*clients)/time.Since(start).Seconds(), "grants/s")
		})
	}
}
