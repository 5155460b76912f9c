package nodemetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
)

// Config configures the metrics.
type Config struct {
	// Status reads the time-slice daemon's status at each scrape.
	Status StatusFunc
	// MaxGroups is the most groups per GPU with series of their own.
	MaxGroups int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Metrics is gpuslice-node's registry and the agent's own instruments.
type Metrics struct {
	Registry        *prometheus.Registry
	allocRefusals   *prometheus.CounterVec
	allocations     prometheus.Counter
	hotplug         prometheus.Histogram
	healthy         *prometheus.GaugeVec
	unhealthyEvents *prometheus.CounterVec
	mig             migInstruments
}

// New makes the registry: the status collector, the agent's instruments, and
// the Go runtime and process collectors.
func New(cfg Config) *Metrics {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		allocRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "allocate_refusals_total",
			Help: "Device plugin Allocate calls refused, by reason."}, []string{"reason"}),
		allocations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "allocations_total",
			Help: "Containers the device plugin allocated GPUs to."}),
		hotplug: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "hotplug_latency_seconds",
			Help:    "From a pod's assignment change seen by the agent to its container's devices applied.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "gpu_healthy",
			Help: "1 if the GPU is healthy (advertised to the kubelet), 0 if withdrawn."}, []string{"gpu"}),
		unhealthyEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "gpu_unhealthy_events_total",
			Help: "Times a GPU was found unhealthy, by cause (xid: a critical XID event; query: a failing NVML query)."},
			[]string{"gpu", "cause"}),
		mig: newMIGInstruments(),
	}
	m.Registry.MustRegister(&collector{d: newDesc(), status: cfg.Status, maxGroups: cfg.MaxGroups, now: cfg.Now},
		m.allocRefusals, m.allocations, m.hotplug, m.healthy, m.unhealthyEvents,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Registry.MustRegister(m.mig.collectors()...)
	for _, r := range deviceplugin.RefusalReasons() {
		m.allocRefusals.WithLabelValues(r) // every reason shows, at 0 until it happens
	}
	return m
}

// AllocateRefused counts a refused Allocate.
func (m *Metrics) AllocateRefused(reason string) { m.allocRefusals.WithLabelValues(reason).Inc() }

// Allocated counts a container allocated.
func (m *Metrics) Allocated() { m.allocations.Inc() }

// HotplugApplied records one container's hot-plug latency.
func (m *Metrics) HotplugApplied(d time.Duration) { m.hotplug.Observe(d.Seconds()) }

// SetHealth records a GPU's health; cause says why it is unhealthy.
func (m *Metrics) SetHealth(gpu string, healthy bool, cause string) {
	v := 0.0
	if healthy {
		v = 1
	} else {
		m.unhealthyEvents.WithLabelValues(gpu, cause).Inc()
	}
	m.healthy.WithLabelValues(gpu).Set(v)
}
