//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/pkg/api"
)

const escapeMemory = 256 << 20

// testNoEscape: a process of a memory share pod that drops LD_PRELOAD,
// GPUSLICE_GROUP_FILE and GPUSLICE_MEMORY_LIMIT from its environment is
// still held to its group's limit: the loader preloads the library from
// /etc/ld.so.preload, and the library finds the group file at its fixed
// path.
func testNoEscape(t *testing.T, ctx context.Context, n *node) {
	p := sharePod("escape", 0, escapeMemory, "", "/bin/sleep", "3600")
	delete(p.Spec.Containers[0].Resources.Limits, api.ResourceUnits)
	p.Spec.Containers[0].Resources.Limits[api.ResourceGPU] = *resource.NewQuantity(1, resource.DecimalSI)
	p = n.createPod(ctx, p)
	p = n.waitPod(bounded(ctx), p.Name, "running", running)
	defer n.deletePods(bounded(ctx), p.Name)
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	pid, err := n.initPid(id)
	if err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", pid, deviceplugin.ContainerPreload))
	if err != nil || string(list) != deviceplugin.ContainerLibDir+"/libgpuslice.so\n" {
		t.Fatalf("the container's %s: %q, %v", deviceplugin.ContainerPreload, list, err)
	}
	for _, env := range []string{"env -u LD_PRELOAD -u GPUSLICE_GROUP_FILE -u GPUSLICE_MEMORY_LIMIT",
		"env -u LD_PRELOAD GPUSLICE_GROUP_FILE=/tmp/own.state GPUSLICE_MEMORY_LIMIT=8589934592"} {
		out, err := n.execReport(p, "/tmp/escape.json", "sh", "-c", "rm -f /tmp/escape.json; "+env+" /gs/gs-memfill --max 2G >/tmp/escape.json")
		if err != nil {
			t.Fatalf("gs-memfill under %q: %v\n%s", env, err, out)
		}
		var fill struct {
			Allocated int64  `json:"allocated"`
			StoppedBy string `json:"stopped_by"`
		}
		if err := json.Unmarshal([]byte(out), &fill); err != nil || fill.Allocated > escapeMemory || fill.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" {
			t.Fatalf("gs-memfill under %q saw %q (%v): want at most %d MiB, stopped by CUDA_ERROR_OUT_OF_MEMORY", env, out, err, escapeMemory>>20)
		}
		t.Logf("e2e no escape: %s gs-memfill got %d MiB of its group's %d MiB (%s)", env, fill.Allocated>>20, escapeMemory>>20, fill.StoppedBy)
	}
}
