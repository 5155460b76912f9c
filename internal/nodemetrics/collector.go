// Package nodemetrics is gpuslice-node's Prometheus metrics and health
// endpoints: per GPU and group figures read from the time-slice daemon's
// status.json at scrape time, the agent's own counters (Allocate refusals,
// hot-plug latency, GPU health) and /healthz, /readyz.
//
// Cardinality: labels are gpu (a GPU UUID: the GPUs of this node), group (a
// time-slice daemon group) and small fixed enums (reason, kind). Groups on a GPU
// are bounded by the device plugin's slots per GPU plus local `gpuslice run`
// groups; at most Config.MaxGroups groups per GPU get series of their own,
// the rest are summed under group="_other".
package nodemetrics

import (
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
)

// OtherGroup is the group label of the groups past the per-GPU limit.
const OtherGroup = "_other"

const ns = "gpuslice"

// StatusFunc reads the time-slice daemon's status.
type StatusFunc func() (*nodestatus.Status, error)

type desc struct {
	memUsed, memLimit, memRefused           *prometheus.Desc
	granted, achieved, banked               *prometheus.Desc
	share, expected, achievedShare, members *prometheus.Desc
	grants, revokes, waiting                *prometheus.Desc
	conns, up, age                          *prometheus.Desc
}

func newDesc() desc {
	gg := []string{"gpu", "group"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, nil)
	}
	return desc{
		memUsed:       d("group_gpu_memory_used_bytes", "GPU memory the group holds on the GPU.", gg...),
		memLimit:      d("group_gpu_memory_limit_bytes", "The group's GPU memory limit per GPU (0: no limit).", gg...),
		memRefused:    d("group_gpu_memory_refused_allocations_total", "Allocations refused at the group's memory limit on the GPU.", gg...),
		granted:       d("group_gpu_time_granted_seconds_total", "Sum of the time-slice grants handed to the group on the GPU.", gg...),
		achieved:      d("group_gpu_time_achieved_seconds_total", "GPU time the group held on the GPU.", gg...),
		banked:        d("group_gpu_banked_seconds", "Burst-buffer time the group has banked on the GPU.", gg...),
		share:         d("group_gpu_share_ratio", "The group's configured share of the GPU (0: none set).", gg...),
		expected:      d("group_gpu_expected_share_ratio", "The share of GPU time the group gets when every group on the GPU is busy.", gg...),
		achievedShare: d("group_gpu_achieved_share_ratio", "The group's share of GPU time over the last second.", gg...),
		members:       d("group_gpu_members", "Client connections of the group on the GPU.", gg...),
		grants:        d("group_gpu_grants_total", "Time-slice grants handed to the group on the GPU.", gg...),
		revokes:       d("group_gpu_revokes_total", "Grants the daemon ended for the group on the GPU (preempted, at their end, expired).", gg...),
		waiting:       d("gpu_waiting_groups", "Groups waiting for a time slice on the GPU.", "gpu"),
		conns:         d("daemon_connections", "Open client connections to the node daemon."),
		up:            d("daemon_status_up", "1 if the node daemon's status could be read at this scrape."),
		age:           d("daemon_status_age_seconds", "Age of the node daemon's status at this scrape."),
	}
}

// collector turns status.json into metrics at each scrape.
type collector struct {
	d         desc
	status    StatusFunc
	maxGroups int
	now       func() time.Time
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.d.memUsed, c.d.memLimit, c.d.memRefused, c.d.granted, c.d.achieved,
		c.d.banked, c.d.share, c.d.expected, c.d.achievedShare, c.d.members, c.d.grants, c.d.revokes,
		c.d.waiting, c.d.conns, c.d.up, c.d.age} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.status()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.d.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.d.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.d.age, prometheus.GaugeValue, max(c.now().Sub(st.Time).Seconds(), 0))
	ch <- prometheus.MustNewConstMetric(c.d.conns, prometheus.GaugeValue, float64(st.Connections))
	for _, g := range st.GPUs {
		waiting := 0
		for _, e := range g.Groups {
			if e.Waiting {
				waiting++
			}
		}
		ch <- prometheus.MustNewConstMetric(c.d.waiting, prometheus.GaugeValue, float64(waiting), g.UUID)
		for _, e := range Fold(g.Groups, c.maxGroups) {
			c.group(ch, g.UUID, e)
		}
	}
}

func (c *collector) group(ch chan<- prometheus.Metric, gpu string, e nodestatus.GroupGPUStatus) {
	m := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
		ch <- prometheus.MustNewConstMetric(d, t, v, gpu, e.Group)
	}
	m(c.d.memUsed, prometheus.GaugeValue, float64(e.MemoryUsed))
	m(c.d.memLimit, prometheus.GaugeValue, float64(e.MemoryMax))
	m(c.d.memRefused, prometheus.CounterValue, float64(e.MemoryRefused))
	m(c.d.granted, prometheus.CounterValue, time.Duration(e.GrantedNs).Seconds())
	m(c.d.achieved, prometheus.CounterValue, time.Duration(e.AchievedNs).Seconds())
	m(c.d.banked, prometheus.GaugeValue, time.Duration(e.BankedNs).Seconds())
	m(c.d.share, prometheus.GaugeValue, e.Share)
	m(c.d.expected, prometheus.GaugeValue, e.Expected)
	m(c.d.achievedShare, prometheus.GaugeValue, e.AchievedShare)
	m(c.d.members, prometheus.GaugeValue, float64(e.Members))
	m(c.d.grants, prometheus.CounterValue, float64(e.Grants))
	m(c.d.revokes, prometheus.CounterValue, float64(e.Revokes))
}

// Fold keeps the first limit groups by name (a set that stays put while
// groups stay) and sums the rest into one OtherGroup entry. limit < 1 keeps
// every group.
func Fold(groups []nodestatus.GroupGPUStatus, limit int) []nodestatus.GroupGPUStatus {
	if limit < 1 || len(groups) <= limit {
		return groups
	}
	s := slices.Clone(groups)
	slices.SortFunc(s, func(a, b nodestatus.GroupGPUStatus) int { return strings.Compare(a.Group, b.Group) })
	other := nodestatus.GroupGPUStatus{Group: OtherGroup}
	for _, e := range s[limit:] {
		other.MemoryUsed += e.MemoryUsed
		other.MemoryMax += e.MemoryMax
		other.MemoryRefused += e.MemoryRefused
		other.GrantedNs += e.GrantedNs
		other.AchievedNs += e.AchievedNs
		other.BankedNs += e.BankedNs
		other.Share += e.Share
		other.Expected += e.Expected
		other.AchievedShare += e.AchievedShare
		other.Members += e.Members
		other.Grants += e.Grants
		other.Revokes += e.Revokes
	}
	return append(s[:limit:limit], other)
}
