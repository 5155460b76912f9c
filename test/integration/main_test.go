//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// env is the one control plane every test shares; tests isolate themselves
// by namespace, node-name prefix and scheduler name.
type env struct {
	bins      harness.Binaries
	cp        *harness.ControlPlane
	scheduler string // path of gpuslice-scheduler
}

var shared *env // set once by TestMain, read-only afterwards

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bins, err := harness.FindBinaries()
	sched := os.Getenv("GPUSLICE_SCHEDULER")
	if err == nil && sched == "" {
		err = fmt.Errorf("GPUSLICE_SCHEDULER (path of gpuslice-scheduler) not set")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: skipping, cannot start real Kubernetes: %v\n", err)
		if os.Getenv("GPUSLICE_INTEGRATION_REQUIRED") == "1" {
			return 1
		}
		return m.Run() // every test skips: shared is nil
	}
	dir, err := os.MkdirTemp("", "gpuslice-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := harness.StartControlPlane(ctx, bins, dir)
	if err == nil {
		err = cp.InstallCRDs(ctx)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: control plane: %v (logs in %s)\n", err, dir)
		return 1
	}
	abs, _ := filepath.Abs(sched)
	shared = &env{bins: bins, cp: cp, scheduler: abs}
	code := m.Run()
	cp.Stop()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "integration: logs kept in %s\n", dir)
	}
	return code
}

// setup skips without a control plane and creates the test's namespace.
func setup(t *testing.T) (*env, string) {
	t.Helper()
	if shared == nil {
		t.Skip("real Kubernetes binaries not available (make k8s-bins)")
	}
	ns := fmt.Sprintf("t%d", time.Now().UnixNano()%1_000_000_000)
	_, err := shared.cp.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return shared, ns
}

// startReplica starts a scheduler with options o; it is stopped (its log
// tail printed if the test failed) at the end of the test.
func (e *env) startReplica(t *testing.T, name string, o harness.SchedulerOptions) *harness.Process {
	t.Helper()
	p, err := e.cp.StartScheduler(context.Background(), e.scheduler, name, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s log tail:\n%s", name, p.Tail())
		}
	})
	return p
}

// startScheduler starts gpuslice-scheduler with the plugin args and stops it
// at the end of the test.
func (e *env) startScheduler(t *testing.T, name, args string) *harness.Process {
	t.Helper()
	return e.startReplica(t, name, harness.SchedulerOptions{SchedulerName: name, GPUSlice: true, Args: args})
}

// staticRows are the scheduler args of tests whose GPUNode rows are written
// once by the test (no publisher renews their heartbeat): on a loaded machine
// such a test outlives the default one-minute heartbeat timeout.
const staticRows = `{heartbeatTimeout: 1h}`

// groupLabel keeps each test's pods on its own nodes: nodes carry the
// test's namespace, pods select it.
const groupLabel = "test.gpuslice.io/group"

// groupOf returns the namespace part of a node prefix "<ns>-...".
func groupOf(prefix string) string {
	if i := strings.IndexByte(prefix, '-'); i > 0 {
		return prefix[:i]
	}
	return prefix
}

func (e *env) nodes(t *testing.T, prefix string, n, gpus int) []harness.NodeSpec {
	t.Helper()
	var out []harness.NodeSpec
	for i := 0; i < n; i++ {
		s := harness.NodeSpec{Name: fmt.Sprintf("%s-%d", prefix, i), GPUs: gpus, GPUMemory: 16 * harness.GiB,
			Labels: map[string]string{groupLabel: groupOf(prefix)}}
		if err := e.cp.CreateNode(context.Background(), s, time.Now()); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}
