package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/health"
	"github.com/gpuslice/gpuslice/internal/health/xidrecord"
)

// eventWait bounds one NVML event wait, so the loop sees ctx end.
const eventWait = time.Second

// healthMonitor watches the node's GPUs through NVML, as NVIDIA's device
// plugin does: XID critical error events (a critical XID withdraws the GPU
// until it is reset, remembered across agent restarts in the XID record,
// internal/health/xidrecord) and, every period, a measurement query per GPU
// (a failing one withdraws it while it fails). Works on any NVML: the real
// driver or the simulated GPU. Every change goes to onChange.
type healthMonitor struct {
	nvml     gpu.NVML
	watcher  gpu.XIDWatcher // nil: queries only
	gpus     []gpuset.GPU
	period   time.Duration
	clock    clock.PassiveClock
	onChange func([]health.Change)
	// record is the XID record's path, procRoot where the boot ID is read.
	record, procRoot string
	bootID           string // set by restore
	// others are the record's GPUs not watched here (withheld at start,
	// e.g. lost): kept in the record, in case one answers again.
	others map[string]xidrecord.GPU

	mu      sync.Mutex
	tracker *health.Tracker
	// watching is closed once the GPUs are registered for XID events (or
	// that failed, or NVML has no events): events from then on are seen.
	watching     chan struct{}
	watchingOnce sync.Once
}

func newHealthMonitor(cfg Config, drv *gpu.Driver, gpus []gpuset.GPU, onChange func([]health.Change)) *healthMonitor {
	uuids := make([]string, 0, len(gpus))
	for _, g := range gpus {
		uuids = append(uuids, g.UUID)
	}
	return &healthMonitor{nvml: drv.NVML, watcher: drv.Events, gpus: gpus, period: cfg.HealthPeriod, clock: clock.RealClock{},
		onChange: onChange, tracker: health.NewTracker(uuids, cfg.HealthSkipXIDs), watching: make(chan struct{}),
		record: filepath.Join(cfg.RunDir, xidrecord.FileName), procRoot: cfg.ProcRoot}
}

// restore marks the GPUs the XID record holds for this boot unhealthy, as
// before the agent restarted (before anything is published); a corrupt
// record is an error: the agent must not clear a withdrawal it cannot
// check again.
func (m *healthMonitor) restore(ctx context.Context) error {
	boot, err := xidrecord.BootID(m.procRoot)
	if err != nil {
		return fmt.Errorf("XID record: %w", err)
	}
	gpus, stale, err := xidrecord.Load(m.record, boot)
	if err != nil {
		return err
	}
	others := maps.Clone(gpus)
	for _, g := range m.gpus {
		delete(others, g.UUID)
	}
	m.mu.Lock()
	m.bootID, m.others = boot, others
	m.mu.Unlock()
	log := klog.FromContext(ctx)
	if stale {
		log.Info("XID record of an earlier boot ignored (its GPUs were reset since)", "record", m.record)
	}
	for _, g := range m.gpus {
		if x, ok := gpus[g.UUID]; ok {
			log.Info("GPU withdrawn by an XID seen before the agent restarted", "gpu", g.UUID, "xid", x.XID, "record", m.record)
			m.apply(ctx, func(t *health.Tracker) []health.Change { return t.Restore(g.UUID, x.XID, x.Reason) })
		}
	}
	return nil
}

// saveLocked writes the tracker's XIDs to the record (m.mu held): before a
// new XID is published, so that a restart at any moment keeps it.
func (m *healthMonitor) saveLocked() error {
	if m.bootID == "" { // not restored: the record may hold XIDs not in the tracker
		return errors.New("XID record not read at start")
	}
	d := xidrecord.Data{BootID: m.bootID, GPUs: map[string]xidrecord.GPU{}}
	maps.Copy(d.GPUs, m.others)
	for _, s := range m.tracker.XIDs() {
		d.GPUs[s.UUID] = xidrecord.GPU{XID: s.XID, Reason: s.Reason}
	}
	return xidrecord.Save(m.record, d)
}

// ready fails until the GPUs are registered for XID events (a readiness
// check: an XID before that would go unseen).
func (m *healthMonitor) ready(context.Context) error {
	select {
	case <-m.watching:
		return nil
	default:
		return errors.New("GPUs not registered for NVML XID events yet")
	}
}

// status is one GPU's health now.
func (m *healthMonitor) status(uuid string) health.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tracker.Status(uuid)
}

// apply runs one tracker update and reports what changed.
func (m *healthMonitor) apply(ctx context.Context, update func(*health.Tracker) []health.Change) {
	m.mu.Lock()
	changes := update(m.tracker)
	var err error
	if slices.ContainsFunc(changes, func(c health.Change) bool { return c.Cause == health.CauseXID }) {
		err = m.saveLocked()
	}
	m.mu.Unlock()
	if err != nil {
		klog.FromContext(ctx).Error(err, "the XID will be forgotten if the agent restarts", "record", m.record)
	}
	for _, c := range changes {
		if c.Healthy {
			klog.FromContext(ctx).Info("GPU healthy again", "gpu", c.UUID)
		} else {
			klog.FromContext(ctx).Info("GPU unhealthy", "gpu", c.UUID, "cause", c.Cause, "reason", c.Reason)
		}
	}
	if len(changes) > 0 {
		m.onChange(changes)
	}
}

// run watches until ctx ends.
func (m *healthMonitor) run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.watchEvents(ctx)
	}()
	t := time.NewTicker(m.period)
	defer t.Stop()
	for {
		m.queryAll(ctx)
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
		}
	}
}

func (m *healthMonitor) queryAll(ctx context.Context) {
	for _, g := range m.gpus {
		_, err := m.nvml.Memory(int(g.Index))
		m.apply(ctx, func(t *health.Tracker) []health.Change { return t.Query(g.UUID, err) })
	}
}

// watchEvents registers every GPU for XID events and turns them into health
// until ctx ends. A GPU without XID events is watched by queries only; a
// failed registration marks it unhealthy.
func (m *healthMonitor) watchEvents(ctx context.Context) {
	log := klog.FromContext(ctx)
	defer m.watchingOnce.Do(func() { close(m.watching) })
	if m.watcher == nil {
		log.Info("NVML has no event API; GPU health from queries only")
		return
	}
	idx := make([]int, 0, len(m.gpus))
	for _, g := range m.gpus {
		idx = append(idx, int(g.Index))
	}
	set, failed, err := m.watcher.WatchXIDs(idx)
	if err != nil {
		m.apply(ctx, func(t *health.Tracker) []health.Change { return t.Wait(err) })
		return
	}
	defer func() {
		if err := set.Close(); err != nil {
			log.Error(err, "free the NVML event set")
		}
	}()
	for _, g := range m.gpus {
		err := failed[int(g.Index)]
		if errors.Is(err, gpu.ErrNoEvents) {
			log.Info("GPU reports no XID events; health from queries only", "gpu", g.UUID)
			err = nil
		}
		m.apply(ctx, func(t *health.Tracker) []health.Change { return t.Register(g.UUID, err) })
	}
	m.watchingOnce.Do(func() { close(m.watching) })
	log.Info("watching GPUs for XID events", "gpus", len(m.gpus)-len(failed))
	for ctx.Err() == nil {
		ev, err := set.Wait(eventWait)
		switch {
		case errors.Is(err, gpu.ErrTimeout):
			m.apply(ctx, func(t *health.Tracker) []health.Change { return t.Wait(nil) })
		case err != nil:
			m.apply(ctx, func(t *health.Tracker) []health.Change { return t.Wait(err) })
			select { // a failing wait returns at once: do not spin
			case <-ctx.Done():
			case <-time.After(eventWait):
			}
		default:
			log.Info("XID event", "gpu", ev.UUID, "xid", ev.XID, "uuidErr", ev.UUIDErr)
			at := m.clock.Now()
			m.apply(ctx, func(t *health.Tracker) []health.Change { return append(t.Wait(nil), t.XID(ev.UUID, ev.XID, at)...) })
		}
	}
}
