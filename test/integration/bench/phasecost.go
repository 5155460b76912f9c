package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// phaseCost is where a phase's machine time goes: the CPU each process of
// the cluster used and the API server's requests by verb and resource. On
// the two-core machine the benchmarks run on, every part shares the cores,
// so a phase's wall time is bounded below by their sum.
type phaseCost struct {
	procs []*harness.Process
	sched *harness.Process // the scheduler under test, among procs
	cpu0  map[string]float64
	self0 float64
	req0  map[string]float64
	// at the phase's end (end)
	cpu1  map[string]float64
	self1 float64
	req1  map[string]float64
	// audit log offsets at the start and end (-audit-writes)
	auditPath      string
	audit0, audit1 int64
}

// startPhaseCost records the counters at the phase's start.
// sched, one of procs, is the scheduler under test.
func startPhaseCost(ctx context.Context, cp *harness.ControlPlane, procs []*harness.Process, sched *harness.Process) *phaseCost {
	pc := &phaseCost{procs: procs, sched: sched, cpu0: map[string]float64{}}
	for _, p := range procs {
		pc.cpu0[p.Name], _ = p.CPUSeconds()
	}
	pc.self0 = selfCPUSeconds()
	pc.req0 = apiRequests(ctx, cp)
	pc.auditPath = cp.AuditLog()
	pc.audit0 = fileSize(pc.auditPath)
	return pc
}

// end records the counters at the phase's end.
func (pc *phaseCost) end(ctx context.Context, cp *harness.ControlPlane) {
	pc.cpu1 = map[string]float64{}
	for _, p := range pc.procs {
		pc.cpu1[p.Name], _ = p.CPUSeconds()
	}
	pc.self1 = selfCPUSeconds()
	pc.req1 = apiRequests(ctx, cp)
	pc.audit1 = fileSize(pc.auditPath)
}

// line returns the CPU per process and the API server's write requests
// over the phase, and per preemptor (n).
func (pc *phaseCost) line(n int) string {
	var parts []string
	total := 0.0
	for _, p := range pc.procs {
		d := pc.cpu1[p.Name] - pc.cpu0[p.Name]
		total += d
		parts = append(parts, fmt.Sprintf("%s %.1f s", p.Name, d))
	}
	self := pc.self1 - pc.self0
	total += self
	parts = append(parts, fmt.Sprintf("bench %.1f s", self))
	s := fmt.Sprintf("preemption CPU by process: %s; total %.1f s (%.0f ms per preemptor)", strings.Join(parts, ", "), total, 1000*total/float64(n))
	if pc.sched != nil {
		others := total - (pc.cpu1[pc.sched.Name] - pc.cpu0[pc.sched.Name])
		s += fmt.Sprintf("; without the scheduler %.1f s: on %d cores the phase cannot end in less than %.1f s", others, runtime.NumCPU(), others/float64(runtime.NumCPU()))
	}
	if pc.req0 == nil || pc.req1 == nil {
		return s
	}
	type kv struct {
		k string
		v float64
	}
	var w []kv
	writes := 0.0
	for k, v := range pc.req1 {
		d := v - pc.req0[k]
		verb, _, _ := strings.Cut(k, " ")
		if d < 1 || verb == "GET" || verb == "LIST" || verb == "WATCH" {
			continue
		}
		writes += d
		w = append(w, kv{k, d})
	}
	sort.Slice(w, func(i, j int) bool { return w[i].v > w[j].v || w[i].v == w[j].v && w[i].k < w[j].k })
	var ws []string
	for _, e := range w {
		ws = append(ws, fmt.Sprintf("%s %.0f", e.k, e.v))
	}
	s += fmt.Sprintf("\npreemption API writes: %.0f (%.1f per preemptor): %s", writes, writes/float64(n), strings.Join(ws, ", "))
	if by := auditWrites(pc.auditPath, pc.audit0, pc.audit1); by != "" {
		s += "\npreemption API writes by client: " + by
	}
	return s
}

// selfCPUSeconds is the bench's own user+system CPU time (its clients and
// watches run on the same cores).
func selfCPUSeconds() float64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// apiRequests reads apiserver_request_total from the API server's /metrics,
// summed by "VERB resource[/subresource]" (nil when it cannot be read).
func apiRequests(ctx context.Context, cp *harness.ControlPlane) map[string]float64 {
	raw, err := cp.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndexByte(l, '}')
		v, err := strconv.ParseFloat(strings.TrimSpace(l[i+1:]), 64)
		if err != nil {
			continue
		}
		labels := l[len("apiserver_request_total{"):i]
		key := label(labels, "verb") + " " + label(labels, "resource")
		if sub := label(labels, "subresource"); sub != "" {
			key += "/" + sub
		}
		out[key] += v
	}
	return out
}

// label returns a Prometheus label's value from a label list.
func label(labels, name string) string {
	_, rest, ok := strings.Cut(","+labels, ","+name+"=\"")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "\"")
	return v
}

// fileSize is a file's size (0 when absent).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// auditWrites sums the audit log's entries between two offsets by client
// (the user agent's program name), verb and resource ("" without a log).
func auditWrites(path string, from, to int64) string {
	if to <= from {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, to-from)
	if _, err := f.ReadAt(b, from); err != nil {
		return ""
	}
	type entry struct {
		Verb      string `json:"verb"`
		UserAgent string `json:"userAgent"`
		ObjectRef struct {
			Resource    string `json:"resource"`
			Subresource string `json:"subresource"`
		} `json:"objectRef"`
	}
	count := map[string]int{}
	for _, l := range bytes.Split(b, []byte("\n")) {
		var e entry
		if json.Unmarshal(l, &e) != nil {
			continue
		}
		agent, _, _ := strings.Cut(e.UserAgent, "/")
		key := agent + " " + e.Verb + " " + e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}
		count[key]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return count[keys[i]] > count[keys[j]] || count[keys[i]] == count[keys[j]] && keys[i] < keys[j]
	})
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %d", k, count[k]))
	}
	return strings.Join(out, ", ")
}
