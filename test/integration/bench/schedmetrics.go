package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// schedulerMetrics fetches the scheduler's /metrics when its extra flags
// serve them (--secure-port=N with --authorization-always-allow-paths
// naming /metrics) and returns the queue and attempt counters the
// preemption phase is judged by ("" when not served).
func schedulerMetrics(ctx context.Context, extraArgs []string) string {
	port := ""
	for _, a := range extraArgs {
		if v, ok := strings.CutPrefix(a, "--secure-port="); ok && v != "0" {
			port = v
		}
	}
	if port == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+port+"/metrics", nil)
	if err != nil {
		return err.Error()
	}
	// The scheduler's serving certificate is self-signed; the bench only reads counters.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // local, read-only
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Sprintf("scheduler metrics: %v", err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		for _, m := range []string{"scheduler_schedule_attempts_total", "scheduler_preemption_attempts_total",
			"scheduler_queue_incoming_pods_total", "scheduler_pod_scheduling_attempts_sum", "scheduler_pod_scheduling_attempts_count",
			"scheduler_preemption_victims_sum", "scheduler_plugin_execution_duration_seconds_sum{extension_point=\"PostFilter\"",
			"scheduler_scheduling_attempt_duration_seconds_sum", "scheduler_scheduling_attempt_duration_seconds_count",
			"gpuslice_scheduler_plugin_decisions_total{extension_point=\"P", "gpuslice_scheduler_dra_state_reads_total",
			"scheduler_framework_extension_point_duration_seconds_sum", "scheduler_framework_extension_point_duration_seconds_count"} {
			if strings.HasPrefix(l, m) {
				out = append(out, l)
			}
		}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("scheduler metrics: %s", resp.Status)
	}
	return "scheduler metrics:\n  " + strings.Join(out, "\n  ")
}
