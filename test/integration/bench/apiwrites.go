package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// apiWrites are the API server's write requests so far (its
// apiserver_request_total counter), by resource, subresource and verb
// ("pods/binding POST"): a run's writes per pod are the difference of two
// reads (issue 32: what a claim pod costs the API server on each path).
type apiWrites map[string]float64

// readAPIWrites reads the counter from the API server's /metrics.
func readAPIWrites(ctx context.Context, cp *harness.ControlPlane) (apiWrites, error) {
	raw, err := cp.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("api server metrics: %w", err)
	}
	out := apiWrites{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		l := metricLabels(labels)
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		k := l["resource"]
		if s := l["subresource"]; s != "" {
			k += "/" + s
		}
		out[k+" "+l["verb"]] += v
	}
	return out, sc.Err()
}

// metricLabels parses `a="x",b="y"` (values without escaped quotes, as
// apiserver_request_total's are).
func metricLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		k, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		v, rest, _ := strings.Cut(rest, `"`)
		out[k] = v
		s = strings.TrimPrefix(rest, ",")
	}
	return out
}

// perPod formats the writes made since before, divided by pods, largest
// first: "total 4.02: resourceclaims/status PUT 1.00, ...".
func (w apiWrites) perPod(before apiWrites, pods int) string {
	type kv struct {
		k string
		v float64
	}
	var d []kv
	total := 0.0
	for k, v := range w {
		if x := v - before[k]; x > 0 {
			d = append(d, kv{k, x / float64(max(pods, 1))})
			total += x / float64(max(pods, 1))
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i].v > d[j].v || d[i].v == d[j].v && d[i].k < d[j].k })
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = fmt.Sprintf("%s %.2f", e.k, e.v)
	}
	return fmt.Sprintf("API writes per pod %.2f: %s", total, strings.Join(parts, ", "))
}
