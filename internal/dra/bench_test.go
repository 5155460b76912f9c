package dra

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkPrepare: Prepare of a 25-unit, 4 GiB claim through the real
// groups manager and time-slice daemon (group written, applied by the daemon,
// CDI spec written, checkpoint saved), then its Unprepare (not timed).
// Reports the p99 of Prepare in ms.
func BenchmarkPrepare(b *testing.B) {
	e := newEnv(b)
	d, err := New(context.Background(), e.cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := claim(fmt.Sprintf("0b9c3f2e-0000-4000-8000-%012d", i), 25, 4*gib, cfgHead+`,"priority":"high"}`)
		start := time.Now()
		if _, err := d.Prepare(ctx, c); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
		b.StopTimer()
		if err := d.Unprepare(ctx, c.UID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[(len(times)*99)/100].Microseconds())/1000, "p99-ms")
}
