package timeslice

import (
	"fmt"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/elastic"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/proto"
	"github.com/gpuslice/gpuslice/internal/units"
)

// DeviceMemory reports a GPU's memory as the driver sees it (by NVML UUID).
type DeviceMemory func(uuid string) (total, used uint64, err error)

// elasticLedgers are the daemon's elastic memory: one ledger (internal/elastic) per
// GPU, refreshed from the group state files and the driver before every
// decision, and the connections that borrowed (they take spill orders).
type elasticLedgers struct {
	mu        sync.Mutex
	ledgers   map[string]*elastic.Ledger
	borrowers map[string]map[*conn]struct{} // group -> connections
}

func newElasticLedgers() *elasticLedgers {
	return &elasticLedgers{ledgers: map[string]*elastic.Ledger{}, borrowers: map[string]map[*conn]struct{}{}}
}

// maxLedgers bounds the GPUs the daemon keeps ledgers for (a client names the GPU).
const maxLedgers = 64

// ledger returns uuid's book, refreshed. Called with b.mu held.
func (s *Server) ledger(uuid string) (*elastic.Ledger, error) {
	if s.cfg.DeviceMemory == nil {
		return nil, fmt.Errorf("the node daemon has no GPU driver to read device memory from")
	}
	total, used, err := s.cfg.DeviceMemory(uuid)
	if err != nil {
		return nil, fmt.Errorf("device memory of %s: %w", uuid, err)
	}
	b := s.ledgers
	l := b.ledgers[uuid]
	if l == nil {
		if len(b.ledgers) >= maxLedgers {
			return nil, fmt.Errorf("books for %d GPUs already", maxLedgers)
		}
		l = elastic.NewLedger(s.cfg.Elastic, total)
		b.ledgers[uuid] = l
	}
	s.mu.Lock()
	settings := make(map[string]group.Settings, len(s.settings))
	for n, st := range s.settings {
		settings[n] = st
	}
	s.mu.Unlock()
	seen := map[string]bool{}
	for name, st := range settings {
		slots, err := groupstate.ReadMemory(groupstate.Path(s.cfg.RunDir, name))
		if err != nil {
			continue // no state file: the group has not allocated yet
		}
		for _, m := range slots {
			if m.UUID != uuid {
				continue
			}
			l.Set(name, ledgerSettings(st, total))
			l.Observe(name, elastic.Usage{Used: m.Used, Managed: m.Managed, Spilled: m.Spilled})
			seen[name] = true
		}
	}
	before := map[string]uint64{}
	for _, g := range l.Snapshot() {
		if !seen[g.Name] {
			l.Forget(g.Name)
		}
		before[g.Name] = l.Allowance(g.Name)
	}
	l.ObserveDevice(used)
	l.Tick(time.Now())
	for name, a := range before { // lent memory not allocated in time goes back
		if st := settings[name]; st.MemoryMin != 0 && seen[name] && l.Allowance(name) < a {
			s.writeAllowance(name, uuid, st, l.Allowance(name))
		}
	}
	return l, nil
}

// ledgerSettings: an elastic group has its guarantee and ceiling; a group
// with a plain limit is guaranteed that limit (the scheduler books it).
func ledgerSettings(st group.Settings, total uint64) elastic.Settings {
	if st.MemoryMin != 0 {
		ceiling := st.MemoryMax
		if ceiling == 0 {
			ceiling = total
		}
		return elastic.Settings{Min: st.MemoryMin, Max: ceiling, Spill: st.MemorySpill}
	}
	return elastic.Settings{Min: st.MemoryMax, Max: st.MemoryMax}
}

// borrow answers a Borrow: a grant writes the group's new allowance into its
// state file before the answer; a reclaim orders spills and waits (up to
// Elastic.ReclaimWait) until the device has the room.
func (s *Server) borrow(c *conn, m *proto.Borrow) {
	uuid := m.GPU.String()
	name := c.groupOn(m.GPU)
	st := s.settingsOf(name)
	lend := &proto.Lend{GPU: m.GPU}
	b := s.ledgers
	b.mu.Lock()
	l, err := s.ledger(uuid)
	switch {
	case st.MemoryMin == 0:
		b.mu.Unlock()
		lend.Status = proto.LendUnknown
		proto.SetString(lend.Message[:], fmt.Sprintf("group %s has no memory.min (no elastic memory)", name))
		c.send(lend)
		return
	case err != nil:
		b.mu.Unlock()
		lend.Status = proto.LendRefused
		proto.SetString(lend.Message[:], sanitize(err.Error()))
		c.send(lend)
		return
	}
	if b.borrowers[name] == nil {
		b.borrowers[name] = map[*conn]struct{}{}
	}
	b.borrowers[name][c] = struct{}{}
	now := time.Now()
	if m.Flags&proto.BorrowReclaim == 0 {
		d := l.Borrow(name, m.Size, now)
		lend.Allowance, lend.Available = d.Allowance, l.Available(name, now)
		lend.Status = proto.LendGranted
		if d.Refused != "" {
			lend.Status = proto.LendRefused
			proto.SetString(lend.Message[:], d.Refused)
		} else {
			s.writeAllowance(name, uuid, st, d.Allowance) // also when it fits already: the file may lag
		}
		b.mu.Unlock()
		c.send(lend)
		return
	}
	plan := l.Reclaim(name, m.Size, now)
	orders := map[*conn]uint64{}
	for _, o := range plan.Spill {
		for bc := range b.borrowers[o.Group] {
			orders[bc] = o.Bytes
		}
	}
	b.mu.Unlock()
	s.log.V(1).Info("reclaim", "group", name, "gpu", uuid, "size", m.Size, "spill", plan.Spill, "short", plan.Short)
	for bc, n := range orders {
		bc.send(&proto.Spill{GPU: m.GPU, Bytes: n})
	}
	c.send(s.awaitRoom(name, uuid, m, now))
}

// awaitRoom polls the ledger until the device has size bytes free for name,
// or Elastic.ReclaimWait passes.
func (s *Server) awaitRoom(name, uuid string, m *proto.Borrow, start time.Time) *proto.Lend {
	lend := &proto.Lend{GPU: m.GPU, Status: proto.LendGranted}
	b := s.ledgers
	for {
		b.mu.Lock()
		l, err := s.ledger(uuid)
		if err != nil {
			b.mu.Unlock()
			lend.Status = proto.LendRefused
			proto.SetString(lend.Message[:], sanitize(err.Error()))
			return lend
		}
		now := time.Now()
		free := l.DeviceFree()
		lend.Allowance, lend.Available = l.Allowance(name), l.Available(name, now)
		if free >= m.Size || now.Sub(start) >= s.cfg.Elastic.ReclaimWait {
			s.log.V(1).Info("reclaim done", "group", name, "free", free, "waited", now.Sub(start))
			if free < m.Size {
				l.Settle(name)
				lend.Status = proto.LendRefused
				proto.SetString(lend.Message[:], fmt.Sprintf("no room within the guarantee after %v: %s free",
					s.cfg.Elastic.ReclaimWait, units.FormatSize(free)))
			}
			b.mu.Unlock()
			return lend
		}
		b.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
}

// writeAllowance stores a group's allowance in its state file's slot.
func (s *Server) writeAllowance(name, uuid string, st group.Settings, allowance uint64) {
	flags := uint32(groupstate.ElasticOn)
	if st.MemorySpill {
		flags |= groupstate.ElasticSpill
	}
	if _, err := groupstate.SetSlots(groupstate.Path(s.cfg.RunDir, name), uuid,
		groupstate.SlotLimits{Limit: allowance, Min: st.MemoryMin, Elastic: flags}); err != nil {
		s.log.Error(err, "write allowance", "group", name, "gpu", uuid)
	}
}

// applyElastic makes the guarantee the limit in a group's state file header
// (what a slot claimed later starts with) and marks its slots elastic with
// the guarantee as their allowance (lent memory is asked for again).
// With slots false only the header is written.
func (s *Server) applyElastic(path string, st group.Settings, slots bool) error {
	flags := uint32(groupstate.ElasticOn)
	if st.MemorySpill {
		flags |= groupstate.ElasticSpill
	}
	if err := groupstate.SetHeaderLimit(path, st.MemoryMin, groupstate.BriefLockWait); err != nil || !slots {
		return err
	}
	_, err := groupstate.SetSlots(path, "", groupstate.SlotLimits{Limit: st.MemoryMin, Min: st.MemoryMin, Elastic: flags})
	return err
}

// forgetBorrower drops a closed connection from the spill orders.
func (s *Server) forgetBorrower(c *conn) {
	b := s.ledgers
	b.mu.Lock()
	defer b.mu.Unlock()
	for g, cs := range b.borrowers {
		delete(cs, c)
		if len(cs) == 0 {
			delete(b.borrowers, g)
		}
	}
}

// elasticStatus is each GPU's elastic memory per group, for status.json.
func (s *Server) elasticStatus() map[string][]elastic.GroupState {
	b := s.ledgers
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string][]elastic.GroupState{}
	for uuid := range b.ledgers {
		l, err := s.ledger(uuid)
		if err != nil {
			continue
		}
		l.Tick(time.Now())
		out[uuid] = l.Snapshot()
	}
	return out
}
