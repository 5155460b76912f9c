package main

import (
	"slices"
	"testing"
	"time"
)

func TestParseRates(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []float64
		bad  bool
	}{
		{"", nil, false},
		{"5 10 20 40", []float64{5, 10, 20, 40}, false},
		{" 40  5\t2.5 ", []float64{2.5, 5, 40}, false},
		{"10 10", []float64{10, 10}, false},
		{"0", nil, true},
		{"-5", nil, true},
		{"5 x", nil, true},
		{"Inf", nil, true},
		{"NaN", nil, true},
		{"5,10", nil, true},
	} {
		got, err := parseRates(c.in)
		if (err != nil) != c.bad {
			t.Errorf("parseRates(%q) error %v, want error %v", c.in, err, c.bad)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("parseRates(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func runs(pairs ...any) []rateRun {
	var out []rateRun
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, rateRun{rate: pairs[i].(float64), res: preemptResult{p99: pairs[i+1].(time.Duration)}})
	}
	return out
}

func TestSustained(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		runs []rateRun
		want float64
		ok   bool
	}{
		{"none run", nil, 0, false},
		{"all met", runs(5.0, 300*ms, 10.0, 900*ms, 20.0, 1999*ms), 20, true},
		{"missed from 20", runs(5.0, 300*ms, 10.0, 900*ms, 20.0, 2*time.Second, 40.0, 9*time.Second), 10, true},
		{"order of the runs does not matter", runs(40.0, 9*time.Second, 10.0, 900*ms, 20.0, 5*time.Second, 5.0, 300*ms), 10, true},
		{"lowest missed", runs(5.0, 2500*ms, 10.0, 900*ms), 0, false},
		{"a met rate above a miss does not count", runs(5.0, 300*ms, 10.0, 3*time.Second, 20.0, 1500*ms), 5, true},
		{"a rate run twice counts only if both met", runs(5.0, 300*ms, 10.0, 900*ms, 10.0, 2100*ms, 20.0, 1*time.Second), 5, true},
		{"not reached by the cap", runs(5.0, 300*ms, 10.0, unbound), 5, true},
	} {
		got, ok := sustained(c.runs, 2*time.Second)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: sustained = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestSustainedLine(t *testing.T) {
	ms := time.Millisecond
	rates := []float64{2.5, 5, 10}
	ours := runs(2.5, 100*ms, 5.0, 200*ms, 10.0, 1500*ms)
	stock := runs(2.5, 3*time.Second, 5.0, 200*ms, 10.0, unbound)
	for _, c := range []struct {
		stockRun bool
		stock    []rateRun
		want     string
	}{
		{true, stock, "preemption sustained: p99 < 2 s up to 10/s (gpuslice), below 2.5/s (stock) of the rates tried (2.5 5 10/s, 200 preemptors each, wait capped at 20s after the last arrival)"},
		{true, runs(2.5, 100*ms, 5.0, 2*time.Second), "preemption sustained: p99 < 2 s up to 10/s (gpuslice), 2.5/s (stock) of the rates tried (2.5 5 10/s, 200 preemptors each, wait capped at 20s after the last arrival)"},
		{false, nil, "preemption sustained: p99 < 2 s up to 10/s (gpuslice), not run (stock) of the rates tried (2.5 5 10/s, 200 preemptors each, wait capped at 20s after the last arrival)"},
	} {
		if got := sustainedLine(rates, ours, c.stock, c.stockRun, 200, 20*time.Second); got != c.want {
			t.Errorf("sustainedLine =\n%s\nwant\n%s", got, c.want)
		}
	}
}

func TestRateLine(t *testing.T) {
	r := rateRun{rate: 20, res: preemptResult{preemptors: 200, bound: 150, victims: 176, p50: unbound, p99: unbound, cpu: 2.4, load: 3.25}}
	want := "preemption at 20/s, stock kube-scheduler: p99 > 20000 ms, p50 > 20000 ms, 150 of 200 bound, 0.88 victims per preemption, scheduler CPU 12 ms per preemption, load 3.2"
	if got := rateLine("stock kube-scheduler", r, 20*time.Second); got != want {
		t.Errorf("rateLine =\n%s\nwant\n%s", got, want)
	}
	r.res.p50, r.res.p99, r.res.bound = 41*time.Millisecond, 1234567*time.Microsecond, 200
	want = "preemption at 20/s, gpuslice-scheduler: p99 1234 ms, p50 41 ms, 200 of 200 bound, 0.88 victims per preemption, scheduler CPU 12 ms per preemption, load 3.2"
	if got := rateLine("gpuslice-scheduler", r, 20*time.Second); got != want {
		t.Errorf("rateLine =\n%s\nwant\n%s", got, want)
	}
}

func TestCreationToBoundUnbound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	created := make([]time.Time, 200)
	bound := map[int]time.Time{}
	for i := range created {
		created[i] = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		bound[i] = created[i].Add(time.Duration(i+1) * time.Millisecond) // latency i+1 ms
	}
	p50, p99 := creationToBound(created, bound)
	if p50 != 101*time.Millisecond || p99 != 199*time.Millisecond {
		t.Fatalf("all bound: p50 %v p99 %v, want 101ms 199ms", p50, p99)
	}
	delete(bound, 199) // one left: p99 (the 199th of 200) still measured
	if _, p99 = creationToBound(created, bound); p99 != 199*time.Millisecond {
		t.Errorf("one unbound: p99 %v, want 199ms", p99)
	}
	delete(bound, 198) // two left: p99 not reached
	if p50, p99 = creationToBound(created, bound); p99 != unbound || p50 != 101*time.Millisecond {
		t.Errorf("two unbound: p50 %v p99 %v, want 101ms and unbound", p50, p99)
	}
}

func TestArrivalSpan(t *testing.T) {
	for _, c := range []struct {
		rate float64
		n    int
		want time.Duration
	}{
		{0, 200, 0}, {5, 200, 39800 * time.Millisecond}, {40, 200, 4975 * time.Millisecond}, {10, 1, 0}, {10, 0, 0},
	} {
		if got := arrivalSpan(options{preemptRate: c.rate, preemptors: c.n}); got != c.want {
			t.Errorf("arrivalSpan(%g/s, %d) = %v, want %v", c.rate, c.n, got, c.want)
		}
	}
}

func TestMsText(t *testing.T) {
	if got := msText(unbound, 15*time.Second); got != "> 15000" {
		t.Errorf("unbound: %q", got)
	}
	if got := msText(1999*time.Millisecond+900*time.Microsecond, 15*time.Second); got != "1999" {
		t.Errorf("1999.9 ms: %q", got)
	}
}
