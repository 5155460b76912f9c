package nodemetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// MIGInstance is one MIG instance of the node as the metrics show it.
type MIGInstance struct {
	GPU       string // the parent GPU's UUID
	UUID      string // MIG-<uuid>
	Profile   string // "3g.40gb"
	Placement uint32
	// MadeBy: "claim" (made on demand, destroyed with its last claim) or
	// "admin" (static).
	MadeBy string
	// Claims is the number of prepared claims holding it.
	Claims int
}

// migInstruments are the MIG series (per instance; the time-slice daemon's
// series of an instance are keyed by its MIG-<uuid> like a GPU's).
type migInstruments struct {
	instances *prometheus.GaugeVec
	made      prometheus.Counter
	destroyed prometheus.Counter
}

func newMIGInstruments() migInstruments {
	return migInstruments{
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "mig_instance_claims",
			Help: "Prepared DRA claims holding the MIG instance (one series per instance on the node)."},
			[]string{"gpu", "uuid", "profile", "placement", "made_by"}),
		made: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "mig_instances_made_total",
			Help: "MIG instances the DRA driver made for claims."}),
		destroyed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "mig_instances_destroyed_total",
			Help: "MIG instances the DRA driver destroyed once no claim held them."}),
	}
}

func (m migInstruments) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.instances, m.made, m.destroyed}
}

// SetMIGInstances replaces the node's MIG instance series.
func (m *Metrics) SetMIGInstances(ins []MIGInstance) {
	m.mig.instances.Reset()
	for _, in := range ins {
		m.mig.instances.WithLabelValues(in.GPU, in.UUID, in.Profile, strconv.FormatUint(uint64(in.Placement), 10), in.MadeBy).
			Set(float64(in.Claims))
	}
}

// MIGMade counts an instance made for a claim.
func (m *Metrics) MIGMade() { m.mig.made.Inc() }

// MIGDestroyed counts an instance destroyed with its last claim.
func (m *Metrics) MIGDestroyed() { m.mig.destroyed.Inc() }
