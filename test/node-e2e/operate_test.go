//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuslice/gpuslice/internal/cli"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/ociimage"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestOperate runs the node as TestHotplug does and checks what an operator
// relies on: /metrics against `gpuslice status` and the GPUNode row, the CDI
// spec against the node's GPUs and a container's view, and GPU health (an
// injected XID withdraws the GPU from ListAndWatch and the row says why).
// Ends with "metrics N series checked, cdi N devices, unhealthy GPU withdrawn
// in X ms" (also in $GPUSLICE_E2E_OPERATE_SUMMARY).
func TestOperate(t *testing.T) {
	ctx, n, ok := privateNode(t, "TestOperate")
	if !ok {
		return
	}
	defer n.stop()
	n.opWaitReady(ctx)
	n.opImage()
	// A share of one GPU: 2 GiB limit, 50 units, 1 GiB held, 20 kernels run
	// on time-slice grants, then idle with its connection held.
	p := gpuPod("tenant", 1, 2<<30, "", "/bin/sh", "-c",
		"/gs/gs-memfill --max 1G --hold-ms 600000 >/dev/null & /gs/gs-hold 20 1000 >/dev/null & exec /probe")
	p.Spec.Containers[0].Image = opImageName
	p = n.createPod(ctx, p)
	p = n.waitPod(ctx, p.Name, "running", running)
	n.waitUsable(ctx, p, n.minors(assignment(p), "main"), time.Time{})
	series := n.checkMetrics(ctx, p)
	devices := n.checkCDI(ctx, p)
	withdrawn := n.checkHealth(ctx, p)
	line := fmt.Sprintf("metrics %d series checked, cdi %d devices, unhealthy GPU withdrawn in %.1f ms",
		series, devices, float64(withdrawn.Microseconds())/1000)
	fmt.Println(line)
	if path := os.Getenv("GPUSLICE_E2E_OPERATE_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

const opImageName = "gpuslice.local/e2e-operate:1"

// opImage builds the e2e image plus gs-hold (images/hold.c: kernels on
// time-slice grants, then its daemon connection held) and imports it.
func (n *node) opImage() {
	t := n.t
	hold := filepath.Join(n.dir, "gs-hold")
	run(t, "gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-I", filepath.Join("..", "..", "include"),
		"-I", filepath.Join("..", "..", "apps"), "-o", hold, filepath.Join("images", "hold.c"), filepath.Join("..", "..", "apps", "cuapi.c"), "-ldl")
	files := ociimage.Files{"/probe": filepath.Join(n.dir, "probe"), "/bin/busybox": "/bin/busybox"}
	if err := files.AddWithLibs("/gs/gs-hold", hold); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"gs-memfill", "libgpuslice.so", "sim/libcuda.so.1", "sim/libnvidia-ml.so.1"} {
		if err := files.AddWithLibs("/gs/"+f, filepath.Join(n.bin, f)); err != nil {
			t.Fatal(err)
		}
	}
	tar := filepath.Join(n.dir, "e2e-operate.tar")
	if err := buildImage(tar, opImageName, files, []string{"/probe"}); err != nil {
		t.Fatal(err)
	}
	run(t, "ctr", "--address", n.ctrSock, "-n", "k8s.io", "images", "import", tar)
}

// waitReady waits for the agent's /readyz (daemon, device plugins, informer,
// GPUs registered for XID events).
func (n *node) opWaitReady(ctx context.Context) {
	var last string
	err := waitFor(ctx, func() bool {
		resp, err := http.Get("http://" + n.metrics + "/readyz?verbose")
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		b := make([]byte, 4096)
		k, _ := resp.Body.Read(b)
		last = string(b[:k])
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		n.t.Fatalf("agent never ready: %v\n%s\n%s", err, last, n.agentTail())
	}
}

// status is `gpuslice status -o json` of the agent's time-slice daemon.
func (n *node) opStatus() cli.StatusDoc {
	cmd := exec.Command(filepath.Join(n.bin, "gpuslice"), "status", "--run-dir", filepath.Join(n.dir, "run"), "-o", "json")
	cmd.Env = append(os.Environ(), nodestatus.EnvSocket+"="+filepath.Join(n.dir, "run", "node.sock"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		n.t.Fatalf("gpuslice status: %v\n%s%s", err, out, stderr.String())
	}
	var doc cli.StatusDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		n.t.Fatalf("gpuslice status -o json: %v\n%s", err, out)
	}
	return doc
}

// near compares a metric with a value from elsewhere (seconds from integer
// nanoseconds, ratios): equal up to float rounding.
func opNear(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// slots reads a device plugin's ListAndWatch stream (see health.go).
func opGPU(p *corev1.Pod) api.GPUAssignment {
	return assignment(p).Containers[0].GPUs[0]
}

func (n *node) opOtherGPUs(except ...string) []string {
	var out []string
	for _, g := range n.gpus {
		if !slices.Contains(except, g.UUID) {
			out = append(out, g.UUID)
		}
	}
	return out
}

func opContains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
