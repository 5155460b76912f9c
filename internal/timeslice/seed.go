package timeslice

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"time"

	"github.com/gpuslice/gpuslice/internal/ctxprobe"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// Context seeds: what a context takes on this node, as the groups measured
// it (their state files' ContextKiB), goes into every group's state file
// (groupstate.ContextSeed, SetContextSeed), so a new group's first contexts
// are reserved at a measured size, not the guess: only the node's first
// context is reserved blind. The seed is kept in memory and found again in
// the groups' state files (which outlive the daemon) at its first refresh.

// seeGroupContexts takes a group's measured contexts (its GPU slots, read
// at a status refresh) into the node's seed and gives the group the seed if
// its state file does not hold it yet.
func (s *Server) seeGroupContexts(name string, gpus []groupstate.GPUMemory) {
	kib := make([]uint32, 0, len(gpus))
	for _, g := range gpus {
		kib = append(kib, g.ContextKiB)
	}
	s.mu.Lock()
	s.seed = groupstate.ContextSeed(s.seed, kib)
	s.mu.Unlock()
	s.giveSeed(name, false)
}

// giveSeed writes the node's context seed into a group's state file unless
// the daemon gave it that seed already (always, with again: a state file
// made anew, before its limit is written). Groups without settings are not
// the daemon's: nothing is written into theirs.
func (s *Server) giveSeed(name string, again bool) {
	s.mu.Lock()
	seed, given := s.seed, s.seedGiven[name]
	_, known := s.settings[name]
	s.mu.Unlock()
	if known {
		s.giveDeviceSeeds(name, again)
	}
	if seed == 0 || !known || (!again && given == seed && !s.seedsOverwritten(name, seed, nil)) {
		return
	}
	_, err := groupstate.SetContextSeed(groupstate.Path(s.cfg.RunDir, name), seed)
	switch {
	case err == nil:
		s.mu.Lock()
		if _, known := s.settings[name]; known {
			s.seedGiven[name] = seed
		}
		s.mu.Unlock()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, groupstate.ErrIncomplete):
		s.log.V(1).Info("context seed not written", "group", name, "seedKiB", seed-1, "err", err)
	}
}

// seedsOverwritten says whether a group's state file no longer holds the
// context seed (nonzero) or the device seeds the daemon gave it: its members
// map it writable, and one that zeroes a seed would have its group's first
// contexts reserved at nothing. Checked at each refresh, as the limit is
// (checkLimits): the daemon writes them again.
func (s *Server) seedsOverwritten(name string, seed uint32, dev []groupstate.DeviceSeed) bool {
	have, haveDev, err := groupstate.ReadSeeds(groupstate.Path(s.cfg.RunDir, name))
	if err != nil {
		return false // gone or not made whole yet: written when it is
	}
	if (seed != 0 && have != min(seed, groupstate.SeedMaxKiB)) || !groupstate.SeedsHeld(haveDev, dev) {
		s.log.Info("a group's state file lost the seeds the daemon gave it: written again", "group", name,
			"contextSeedKiB", have, "deviceSeeds", haveDev)
		return true
	}
	return false
}

// primeSeed finds the node's context seed in the state files of the groups
// names at the daemon's start, before their settings are applied: what an
// earlier daemon knew is known again from the groups that measured it.
func (s *Server) primeSeed(names []string) {
	var kib []uint32
	for _, n := range names {
		gpus, err := groupstate.ReadMemory(groupstate.Path(s.cfg.RunDir, n))
		if err != nil {
			continue
		}
		for _, g := range gpus {
			kib = append(kib, g.ContextKiB)
		}
	}
	s.mu.Lock()
	s.seed = groupstate.ContextSeed(s.seed, kib)
	s.mu.Unlock()
}

// Device seeds: what a context takes on each kind of device, measured by the
// node's own probe (Config.ContextProbe), never by a tenant. Every group's
// state file gets them (groupstate.SetDeviceSeeds) before its limit and at
// each refresh until written, so a group's first contexts are reserved at the
// driver's own figure: none waits on another process's measurement, and a
// group too small for a context is refused before the driver is asked. The
// seed gathered from the groups' measurements (above) stays for devices the
// probe did not measure.

// probeContexts runs the probe now (every device) and again each time the
// daemon's GPU list grows (the GPUs added alone: the probe measures only
// whole GPUs whose kind has no seed yet, never a MIG instance, so a tenant's
// new MIG instance puts no context of the node's own on the other GPUs),
// until ctx ends, and gives its seeds to every group. A run that failed, or
// skipped a device for an implausible figure, is run again (for those
// devices) after cfg.ContextProbeRetry, doubling up to maxProbeRetry while
// it keeps failing (each run puts a context on the devices it measures:
// never a tight loop).
func (s *Server) probeContexts(ctx context.Context) {
	wait := s.cfg.ContextProbeRetry
	want := ctxprobe.Want{} // every device
	for {
		want.Seeded = s.seededKinds()
		start := time.Now()
		r, err, ok := s.probeOnce(ctx, want)
		again := ctxprobe.Want{Devices: []string{}}
		switch {
		case !ok || ctx.Err() != nil:
			return
		case err != nil:
			again = want
			s.log.Error(err, "context probe failed: groups reserve first contexts as without it (the seed their measurements give, else the guess); probing again", "in", wait)
		default:
			for _, sk := range r.Skipped {
				s.log.Info("context probe skipped a device", "device", sk.Device, "reason", sk.Reason, "probedAgain", sk.Retry)
				if sk.Retry {
					again.Devices = append(again.Devices, sk.Device)
				}
			}
			s.log.Info("context probe", "devices", r.Devices, "asked", want.Devices, "took", time.Since(start).Round(time.Millisecond))
			s.setDeviceSeeds(r.Seeds)
		}
		for want = (ctxprobe.Want{Devices: []string{}}); want.Devices != nil && len(want.Devices) == 0; {
			retry := again.Devices == nil || len(again.Devices) > 0
			if !s.probeWait(ctx, retry, &wait) {
				return
			}
			want = s.nextProbe(again)
		}
	}
}

// nextProbe is what the next run measures: the GPUs added since the last
// one and the devices of a failed one (nil Devices: every one).
func (s *Server) nextProbe(failed ctxprobe.Want) ctxprobe.Want {
	s.probeMu.Lock()
	added := s.probeNew
	s.probeNew = nil
	s.probeMu.Unlock()
	if failed.Devices == nil {
		return ctxprobe.Want{}
	}
	w := ctxprobe.Want{Devices: slices.Clone(failed.Devices)}
	for _, u := range added {
		w.Devices = append(w.Devices, u.String())
	}
	return w
}

// seededKinds are the memory sizes of the kinds of device the probe measured.
func (s *Server) seededKinds() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint32, 0, len(s.devSeeds))
	for _, d := range s.devSeeds {
		out = append(out, d.TotalMiB)
	}
	return out
}

// probeOnce runs the probe; ok false if ctx ended first. A run that does not
// return (a probe in an uninterruptible driver call outlives its kill) is
// abandoned: at the daemon's stop (said in the log), or as a failed run
// (probed again later) when it has not returned past its own timeout.
func (s *Server) probeOnce(ctx context.Context, w ctxprobe.Want) (ctxprobe.Result, error, bool) {
	type answer struct {
		r   ctxprobe.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := s.cfg.ContextProbe(ctx, w)
		done <- answer{r, err}
	}()
	stuck := time.NewTimer(ctxprobe.Timeout + probeAbandonAfter) // killed at Timeout, yet not returned
	defer stuck.Stop()
	select {
	case a := <-done:
		return a.r, a.err, true
	case <-stuck.C:
		return ctxprobe.Result{}, errors.New("context probe: no answer after it was killed: abandoned (a process stuck in the driver)"), true
	case <-ctx.Done():
	}
	select {
	case a := <-done:
		return a.r, a.err, true
	case <-time.After(probeAbandonAfter):
		s.log.Info("context probe still running at the daemon's stop: abandoned (a process stuck in the driver)")
		return ctxprobe.Result{}, nil, false
	}
}

// probeAbandonAfter is how long a stopping daemon waits for a probe run
// (killed by then) before it abandons it: ctxprobe.WaitDelay and a little.
const probeAbandonAfter = ctxprobe.WaitDelay + time.Second

// probeWait waits for the next probe run: a GPU added, or with retry the
// wait (then doubled); false once ctx ends.
func (s *Server) probeWait(ctx context.Context, retry bool, wait *time.Duration) bool {
	var again <-chan time.Time
	if retry {
		t := time.NewTimer(*wait)
		defer t.Stop()
		again = t.C
	} else {
		*wait = s.cfg.ContextProbeRetry
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.reprobe:
	case <-again:
		*wait = min(2**wait, maxProbeRetry)
	}
	return true
}

// maxProbeRetry bounds the wait before a failed probe runs again;
// maxProbeNew the GPUs added kept for the next run (a node has far fewer).
const (
	maxProbeRetry = 30 * time.Minute
	maxProbeNew   = 256
)

// wantProbe asks probeContexts for another run: the driver lists new GPUs.
func (s *Server) wantProbe(added []proto.UUID) {
	s.probeMu.Lock()
	if len(s.probeNew) < maxProbeNew {
		s.probeNew = append(s.probeNew, added[:min(len(added), maxProbeNew-len(s.probeNew))]...)
	}
	s.probeMu.Unlock()
	select {
	case s.reprobe <- struct{}{}:
	default:
	}
}

// setDeviceSeeds takes a probe's seeds (a kind measured again takes the new
// figure; kinds not measured this time keep theirs) and gives them to every
// group the daemon knows.
func (s *Server) setDeviceSeeds(seeds []groupstate.DeviceSeed) {
	s.mu.Lock()
	for _, n := range seeds {
		i := slices.IndexFunc(s.devSeeds, func(d groupstate.DeviceSeed) bool { return d.TotalMiB == n.TotalMiB })
		if i < 0 {
			s.devSeeds = append(s.devSeeds, n)
		} else {
			s.devSeeds[i] = n
		}
	}
	s.devSeedGen++
	names := make([]string, 0, len(s.settings))
	for n := range s.settings {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		s.giveDeviceSeeds(n, false)
	}
}

// giveDeviceSeeds writes the device seeds into a group's state file unless
// it was given these already (always, with again: a state file made anew).
// One writer at a time: two would take the same free entry.
func (s *Server) giveDeviceSeeds(name string, again bool) {
	s.devSeedMu.Lock()
	defer s.devSeedMu.Unlock()
	s.mu.Lock()
	seeds, gen, given := slices.Clone(s.devSeeds), s.devSeedGen, s.devSeedGiven[name]
	s.mu.Unlock()
	if len(seeds) == 0 || (!again && given == gen && !s.seedsOverwritten(name, 0, seeds)) {
		return
	}
	_, full, err := groupstate.SetDeviceSeeds(groupstate.Path(s.cfg.RunDir, name), seeds)
	switch {
	case err == nil:
		if full > 0 {
			s.log.Info("more kinds of device than a state file holds seeds for: their first contexts are reserved as without the probe", "group", name, "notWritten", full)
		}
		s.mu.Lock()
		if _, known := s.settings[name]; known {
			s.devSeedGiven[name] = gen
		}
		s.mu.Unlock()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, groupstate.ErrIncomplete):
		s.log.V(1).Info("device seeds not written", "group", name, "err", err)
	}
}
