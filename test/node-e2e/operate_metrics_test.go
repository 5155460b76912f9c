//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuslice/gpuslice/internal/cli"
	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// scrape is the agent's /metrics: family -> series (label values joined by
// "/" in label-name order) -> value.
type scrape map[string]map[string]float64

func (n *node) opScrape() scrape {
	resp, err := http.Get("http://" + n.metrics + "/metrics")
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		n.t.Fatalf("parse /metrics: %v", err)
	}
	out := scrape{}
	for name, mf := range mfs {
		out[name] = map[string]float64{}
		for _, m := range mf.GetMetric() {
			out[name][seriesKey(m)] = value(m)
		}
	}
	return out
}

func seriesKey(m *dto.Metric) string {
	var vals []string
	for _, l := range m.GetLabel() { // sorted by name
		vals = append(vals, l.GetValue())
	}
	return strings.Join(vals, "/")
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// checkMetrics: once the tenant holds its memory and its connection, each
// per group series agrees with `gpuslice status` read just before and just
// after the scrape (gauges equal to both; counters between the two, as they
// only grow), the per GPU series and the GPUNode row agree, and the daemon's
// connections are at least its groups' members. Returns the number of series compared.
func (n *node) checkMetrics(ctx context.Context, p *corev1.Pod) int {
	t := n.t
	mine := opGPU(p)
	group := deviceplugin.GroupName(deviceplugin.Candidate{Name: p.Name, Container: "main", UID: p.UID})
	var doc cli.StatusDoc
	if err := waitFor(ctx, func() bool {
		doc = n.opStatus()
		e, ok := opGroup(doc, mine.UUID, group)
		return ok && e.MemoryUsed == 1<<30 && e.Processes > 0 && e.Grants > 0
	}); err != nil {
		t.Fatalf("the tenant's group %s never held 1 GiB and a connection in gpuslice status: %+v", group, doc)
	}
	before := n.opStatus()
	m := &seriesCheck{t: t, m: n.opScrape()}
	after := n.opStatus()
	members := m.groups(before, after)
	// The connections gauge agrees with the status around it; it counts
	// the groups' members and, besides them, whatever else is connected
	// when the daemon wrote its status (the agent's supervision connection,
	// a readiness or status probe), which timing decides.
	lo := min(before.Daemon.Connections, after.Daemon.Connections)
	hi := max(before.Daemon.Connections, after.Daemon.Connections)
	if lo < members {
		t.Errorf("gpuslice status counts %d connections for %d members", lo, members)
	}
	m.check("gpuslice_daemon_connections", "", float64(lo), float64(hi))
	m.check("gpuslice_daemon_status_up", "", 1, 1)
	// The row: per GPU health, and the tenant's hold: its limit and share
	// are what the row no longer counts free on its GPU.
	row := n.waitRow(ctx, "holding the tenant's share", time.Time{}, func(g *v1alpha2.GPUNode) bool {
		for _, x := range g.Status.GPUs {
			if x.UUID == mine.UUID {
				return x.UnitsFree < x.UnitsTotal
			}
		}
		return false
	})
	m.row(row, mine.UUID, group)
	if t.Failed() {
		t.Fatalf("metrics disagree; status before %+v, after %+v", before, after)
	}
	t.Logf("e2e metrics: %d series agree with gpuslice status and the GPUNode row", m.checked)
	return m.checked
}

// seriesCheck compares scraped series with what they must be.
type seriesCheck struct {
	t       *testing.T
	m       scrape
	checked int
}

// check: the series of family with labels key is between lo and hi.
func (c *seriesCheck) check(family, key string, lo, hi float64) {
	c.t.Helper()
	got, ok := c.m[family][key]
	if !ok || (got < lo && !opNear(got, lo)) || (got > hi && !opNear(got, hi)) {
		c.t.Errorf("%s{%s} = %v (present %v), want %v..%v", family, key, got, ok, lo, hi)
	}
	c.checked++
}

// groups checks the per group and per GPU series against gpuslice status
// read before and after the scrape; it returns the groups' members.
func (c *seriesCheck) groups(before, after cli.StatusDoc) int {
	members := 0
	for _, g := range after.GPUs {
		for _, a := range g.Groups {
			b, ok := opGroup(before, g.UUID, a.Name)
			if !ok {
				c.t.Errorf("group %s on %s appeared during the scrape", a.Name, g.UUID)
				continue
			}
			c.group(g.UUID+"/"+a.Name, b, a) // labels gpu, group
			if b.MemoryUsed != a.MemoryUsed || b.MemoryMax != a.MemoryMax || b.Share != a.Share || b.Processes != a.Processes {
				c.t.Errorf("group %s on %s changed during the scrape: %+v -> %+v", a.Name, g.UUID, b, a)
			}
			members += a.Processes
		}
		// A group waits only while it launches: bounds, not equality.
		c.check("gpuslice_gpu_waiting_groups", g.UUID, 0, float64(len(g.Groups)))
	}
	return members
}

// group checks one group's series (labels k) against its status before (b)
// and after (a) the scrape: gauges equal to both, counters between the two.
func (c *seriesCheck) group(k string, b, a cli.StatusGroup) {
	c.check("gpuslice_group_gpu_memory_used_bytes", k, float64(b.MemoryUsed), float64(a.MemoryUsed))
	c.check("gpuslice_group_gpu_memory_limit_bytes", k, float64(b.MemoryMax), float64(a.MemoryMax))
	c.check("gpuslice_group_gpu_share_ratio", k, b.Share, a.Share)
	c.check("gpuslice_group_gpu_expected_share_ratio", k, b.ExpectedShare, a.ExpectedShare)
	c.check("gpuslice_group_gpu_members", k, float64(b.Processes), float64(a.Processes))
	c.check("gpuslice_group_gpu_memory_refused_allocations_total", k, float64(b.MemoryRefused), float64(a.MemoryRefused))
	c.check("gpuslice_group_gpu_time_granted_seconds_total", k, time.Duration(b.GrantedNs).Seconds(), time.Duration(a.GrantedNs).Seconds())
	c.check("gpuslice_group_gpu_time_achieved_seconds_total", k, time.Duration(b.GPUTimeNs).Seconds(), time.Duration(a.GPUTimeNs).Seconds())
	c.check("gpuslice_group_gpu_grants_total", k, float64(b.Grants), float64(a.Grants))
	c.check("gpuslice_group_gpu_revokes_total", k, float64(b.Revokes), float64(a.Revokes))
}

// row checks the per GPU health series against the GPUNode row, and the
// tenant's group's limit and share on GPU mine against what the row no
// longer counts free.
func (c *seriesCheck) row(row *v1alpha2.GPUNode, mine, group string) {
	for _, x := range row.Status.GPUs {
		h := map[bool]float64{true: 1, false: 0}[x.Health == v1alpha2.GPUHealthy]
		c.check("gpuslice_gpu_healthy", x.UUID, h, h)
		if x.UUID != mine {
			continue
		}
		k := x.UUID + "/" + group
		held := float64(x.Memory.Value() - x.MemoryFree.Value())
		c.check("gpuslice_group_gpu_memory_limit_bytes", k, held, held)
		share := float64(x.UnitsTotal-x.UnitsFree) / float64(x.UnitsTotal)
		c.check("gpuslice_group_gpu_share_ratio", k, share, share)
	}
}

func opGroup(doc cli.StatusDoc, gpu, group string) (cli.StatusGroup, bool) {
	for _, g := range doc.GPUs {
		if g.UUID != gpu {
			continue
		}
		for _, e := range g.Groups {
			if e.Name == group {
				return e, true
			}
		}
	}
	return cli.StatusGroup{}, false
}

// checkCDI: the agent's CDI spec names one device per GPU (by UUID) whose
// node is that GPU's, and what it injects for the tenant's GPU is what the
// container got: that device node in its OCI config, NVIDIA_VISIBLE_DEVICES
// = its UUID, and only that GPU usable inside. Returns the spec's devices.
func (n *node) checkCDI(ctx context.Context, p *corev1.Pod) int {
	t := n.t
	dir := filepath.Join(n.dir, "cdi")
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("CDI specs in %s: %v", dir, err)
	}
	if errs := c.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI spec errors: %v", errs)
	}
	devs := c.ListDevices()
	if len(devs) != len(n.gpus) {
		t.Fatalf("CDI devices %v, want one per GPU (%d)", devs, len(n.gpus))
	}
	for _, g := range n.gpus {
		name := gpucdi.Kind + "=" + g.UUID
		d := c.GetDevice(name)
		if d == nil {
			t.Fatalf("no CDI device %s among %v", name, devs)
		}
		nodes := d.ContainerEdits.DeviceNodes
		want := "/dev/nvidia" + strconv.Itoa(g.Minor)
		if len(nodes) != 1 || nodes[0].Path != want || nodes[0].HostPath != filepath.Join(n.dir, "dev", "nvidia"+strconv.Itoa(g.Minor)) ||
			nodes[0].Major != 195 || nodes[0].Minor != int64(g.Minor) {
			t.Fatalf("CDI device %s: nodes %+v, want %s (c 195:%d)", name, nodes, want, g.Minor)
		}
	}
	// The container's view.
	mine := opGPU(p)
	inject := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	if _, err := c.InjectDevices(inject, gpucdi.Kind+"="+mine.UUID); err != nil {
		t.Fatal(err)
	}
	id := p.Status.ContainerStatuses[0].ContainerID
	_, id, _ = strings.Cut(id, "://")
	b, err := os.ReadFile(filepath.Join(n.stateDir, "io.containerd.runtime.v2.task", "k8s.io", id, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var oci specs.Spec
	if err := json.Unmarshal(b, &oci); err != nil {
		t.Fatal(err)
	}
	var gpuNodes []specs.LinuxDevice
	for _, d := range oci.Linux.Devices {
		if strings.HasPrefix(d.Path, "/dev/nvidia") && d.Major == 195 && d.Minor < 255 {
			gpuNodes = append(gpuNodes, d)
		}
	}
	want := inject.Linux.Devices
	if len(want) != 1 || len(gpuNodes) != 1 || gpuNodes[0].Path != want[0].Path || gpuNodes[0].Minor != want[0].Minor || gpuNodes[0].Type != want[0].Type {
		t.Fatalf("the container's GPU nodes %+v, the CDI device of its GPU %s gives %+v", gpuNodes, mine.UUID, want)
	}
	if !slices.Contains(oci.Process.Env, deviceplugin.EnvVisibleDevices+"="+mine.UUID) {
		t.Fatalf("the container's environment lacks %s=%s: %v", deviceplugin.EnvVisibleDevices, mine.UUID, oci.Process.Env)
	}
	n.waitUsable(ctx, p, []int{int(want[0].Minor)}, time.Time{})
	t.Logf("e2e cdi: %d devices; the tenant's container has %s (c 195:%d) and %s=%s, as the spec's %s=%s gives",
		len(devs), want[0].Path, want[0].Minor, deviceplugin.EnvVisibleDevices, mine.UUID, gpucdi.Kind, mine.UUID)
	return len(devs)
}
