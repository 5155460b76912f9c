package timeslice

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/identity"
	"github.com/gpuslice/gpuslice/internal/monoclock"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// ErrRunning is returned by Run when another daemon holds the lock.
var ErrRunning = errors.New("another gpuslice node daemon is running")

// Server is a running daemon.
type Server struct {
	cfg  Config
	tree group.Tree
	log  klog.Logger

	adm   *admission
	known *knownGPUs

	runDir dirID  // the run directory this daemon locked (under mu; reach.go: taken again if it is replaced)
	pidNS  uint64 // the daemon's pid namespace (root callers in others are bounded per namespace)
	// clock maps the daemon's times to CLOCK_MONOTONIC for grants' sent_at
	// (FeatureSentAt); nil where the daemon's clock is not the host's (a time
	// namespace with an offset, or one that cannot be read): no sent_at then.
	clock *monoclock.Anchor

	mu       sync.Mutex
	gpus     map[proto.UUID]*gpuState
	settings map[string]group.Settings // last valid settings of each group
	conns    map[*conn]struct{}
	bindings map[string]string // each group's cgroup binding, as last seen
	bindGen  atomic.Uint64     // moves at every new binding (conn.identify)
	ledgers  *elasticLedgers   // elastic memory

	limitMu   sync.Mutex          // one memory limit written at a time (the latest settings win)
	unapplied map[string]struct{} // groups whose memory limit a held state file lock kept out (under mu)
	// generations: each group's settings generation read with its last valid
	// settings (under mu); the one acknowledged is in its FileApplied.
	generations map[string]uint64
	genDirs     map[string]*os.File // the directory each generation was read from (acknowledge)
	// dirs: each group's directory as last seen (under mu): another one at
	// the same name is a new group. gone: when a group's directory went
	// (kept forgetGoneAfter); records: what restores a lost group (restore.go).
	dirs    map[string]dirID
	gone    map[string]time.Time
	records map[string]groupRecord
	// seed: the node's context seed (seed.go), 1 + KiB, 0: none yet;
	// seedGiven: the seed each group's state file was last given (under mu).
	seed      uint32
	seedGiven map[string]uint32
	// devSeeds: the context probe's seeds per kind of device (seed.go),
	// devSeedGen counts their changes, devSeedGiven the generation each
	// group's state file was given (under mu); devSeedMu: one writer of
	// them at a time; reprobe asks for another probe run.
	devSeeds     []groupstate.DeviceSeed
	devSeedGen   uint64
	devSeedGiven map[string]uint64
	devSeedMu    sync.Mutex
	reprobe      chan struct{}
	probeNew     []proto.UUID // GPUs the driver listed anew, not probed yet (under probeMu)
	// probeMu guards probeNew only: wantProbe runs from known.check, which
	// Server.gpu calls holding mu.
	probeMu sync.Mutex

	// What makes the daemon reachable (reach.go), under mu: the run
	// directory's lock, the listener (lnClosed once the daemon stops), the
	// group tree watcher's stop.
	unlock    func() error
	ln        *socketListener
	lnClosed  bool
	stopWatch context.CancelFunc

	hooks testHooks
}

// testHooks are called at points where tests drive an interleaving (nil in
// the daemon).
type testHooks struct {
	// genDirOpened: groupChanged opened a group's directory, before it reads
	// the generation.
	genDirOpened func(name string)
	// limitRead: applyMemoryLimit read the group's settings (holding limitMu),
	// before it writes their limit.
	limitRead func(name string)
}

// Run serves until ctx ends. It returns ErrRunning at once if another daemon
// holds the lock on cfg.RunDir (one daemon per run directory, whatever socket
// each was given).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("node config: %w", err)
	}
	log := klog.FromContext(ctx)
	if err := paths.CheckRunDir(cfg.RunDir); err != nil {
		return err
	}
	for _, d := range []string{cfg.RunDir, filepath.Dir(cfg.Socket)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	unlock, id, err := lockDir(cfg.RunDir)
	if err != nil {
		return err
	}
	cfg.MaxConns = maxConnsFor(cfg.MaxConns, log)
	ns, err := identity.PIDNS(cfg.ProcRoot)
	if err != nil {
		log.Info("own pid namespace unknown: root callers are bounded like users", "err", err)
	}
	s := &Server{cfg: cfg, runDir: id, pidNS: ns, tree: group.NewTree(cfg.RunDir), log: log, gpus: map[proto.UUID]*gpuState{},
		settings: map[string]group.Settings{}, conns: map[*conn]struct{}{}, bindings: map[string]string{}, ledgers: newElasticLedgers(),
		unapplied: map[string]struct{}{}, generations: map[string]uint64{}, genDirs: map[string]*os.File{}, dirs: map[string]dirID{}, gone: map[string]time.Time{}, records: map[string]groupRecord{}, seedGiven: map[string]uint32{}, devSeedGiven: map[string]uint64{}, reprobe: make(chan struct{}, 1), unlock: unlock, adm: newAdmission(), known: newKnownGPUs(cfg.ListGPUs, log)}
	if cfg.ContextProbe != nil {
		s.known.onNew = s.wantProbe // a GPU the driver lists anew (hot-added) is probed
	}
	if shared, err := monoclock.Shared(cfg.ProcRoot); shared {
		a := monoclock.NewAnchor()
		s.clock = &a
	} else {
		log.Info("own CLOCK_MONOTONIC is not the host's (time namespace): grants do not say when they were sent, clients time them from their reading", "err", err)
	}
	defer func() {
		if err := s.releaseRunDir(); err != nil {
			log.Error(err, "release lock")
		}
	}()
	// Every existing group's settings are in force before the socket exists:
	// a client that can connect is served under them, and a setting file
	// changed from then on has last valid settings to fall back to (the
	// watcher's own first pass then finds nothing changed).
	if err := s.loadGroups(ctx); err != nil {
		return err
	}
	if s.ln, err = listen(cfg.Socket); err != nil {
		return err
	}
	log.Info("gpuslice node daemon serving", "socket", cfg.Socket, "runDir", cfg.RunDir, "pid", os.Getpid())
	return s.serveAll(ctx)
}

func (s *Server) serveAll(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	s.startWatch(ctx, &wg)
	wg.Go(func() { s.publish(ctx) })
	if s.cfg.ContextProbe != nil {
		// Not in wg: a probe stuck in the driver must not hold the
		// daemon's stop (probeContexts abandons it when ctx ends).
		go s.probeContexts(ctx)
	}
	wg.Go(func() { s.watchdog(ctx, cancel, &wg) })
	wg.Go(func() {
		<-ctx.Done()
		s.closeListener()
		for _, c := range s.connList() {
			c.kill()
		}
	})
	err := s.serveListeners(ctx, &wg)
	cancel()
	wg.Wait()
	return err
}

// acceptLoop admits connections (limits.go) until the listener closes. A
// connection over a bound is refused here, before it costs a goroutine.
func (s *Server) acceptLoop(ctx context.Context, ln *net.UnixListener, wg *sync.WaitGroup) error {
	for {
		nc, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOMEM) ||
				errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ECONNABORTED) {
				s.log.Error(err, "accept (retrying)") // out of descriptors or memory: others keep being served
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		fd, err := takeFD(nc)
		if err != nil {
			s.log.Error(err, "client connection")
			continue
		}
		cred, err := identity.PeerCred(fd)
		if err != nil {
			s.log.Error(err, "client connection")
			if cerr := unix.Close(fd); cerr != nil {
				s.log.V(4).Info("close", "err", cerr)
			}
			continue
		}
		acct := account(s.cfg.ProcRoot, s.pidNS, cred)
		if why := s.adm.admitUser(&s.cfg, acct); why != "" {
			s.refuse(fd, cred, why)
			continue
		}
		wg.Go(func() { s.serve(ctx, fd, cred, acct) })
	}
}

// watchdog keeps the daemon reachable (reach.go: its socket and run
// directory made again, or the daemon steps aside), forgets the groups their
// owners removed, and stops the daemon when no client has been connected for
// cfg.IdleExit (if set).
func (s *Server) watchdog(ctx context.Context, stop context.CancelFunc, wg *sync.WaitGroup) {
	tick := time.NewTicker(reachCheckEvery)
	defer tick.Stop()
	idleSince := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if err := s.keepReachable(ctx, wg); err != nil {
				s.log.Info("stepping aside: stopping and releasing the run directory", "runDir", s.cfg.RunDir,
					"socket", s.cfg.Socket, "reason", err.Error())
				stop()
				return
			}
			s.forgetGone(now)
			s.mu.Lock()
			busy := len(s.conns) > 0
			s.mu.Unlock()
			if busy {
				idleSince = now
			} else if s.cfg.IdleExit > 0 && now.Sub(idleSince) >= s.cfg.IdleExit {
				s.log.Info("no clients; stopping", "idle", s.cfg.IdleExit)
				stop()
				return
			}
		}
	}
}

// dirID names a directory by device and inode.
type dirID struct{ dev, ino uint64 }

// lockDir takes the single-instance lock: a flock on the run directory itself
// (released when the process dies), so two daemons given different sockets
// but one run directory cannot both run. It returns what the directory is.
func lockDir(dir string) (func() error, dirID, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, dirID{}, fmt.Errorf("open run directory %s: %w", dir, err)
	}
	unlock := func() error { return unix.Close(fd) }
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, dirID{}, errors.Join(fmt.Errorf("%w (run directory %s is locked)", ErrRunning, dir), unlock())
		}
		return nil, dirID{}, errors.Join(fmt.Errorf("lock %s: %w", dir, err), unlock())
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, dirID{}, errors.Join(fmt.Errorf("stat %s: %w", dir, err), unlock())
	}
	return unlock, dirID{dev: st.Dev, ino: st.Ino}, nil
}

// runDirGone says why the daemon's run directory is no longer the one it
// locked ("" while it is): removed, or replaced by another directory (a
// daemon serving it would be a second state for every live group).
func (s *Server) runDirGone() string {
	var st unix.Stat_t
	err := unix.Stat(s.cfg.RunDir, &st)
	s.mu.Lock()
	locked := s.runDir
	s.mu.Unlock()
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return "removed"
	case err != nil:
		return "" // unreadable for now (e.g. ENOMEM): look again at the next tick
	case (dirID{dev: st.Dev, ino: st.Ino}) != locked:
		return "replaced"
	}
	return ""
}

// gpu returns the policy instance of a GPU, creating it on first use.
func (s *Server) gpu(u proto.UUID) (*gpuState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gpus[u]; g != nil {
		return g, nil
	}
	if err := s.known.check(u); err != nil {
		return nil, err
	}
	if len(s.gpus) >= s.cfg.MaxGPUs {
		return nil, fmt.Errorf("too many GPUs (%d)", len(s.gpus))
	}
	g, err := newGPU(u, s.cfg.Policy, s.cfg.Observe, s.log)
	if err != nil {
		return nil, err
	}
	s.gpus[u] = g
	return g, nil
}

// params returns a group's policy params (defaults for unknown groups).
func (s *Server) params(name string) policy.Params {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings[name].Params()
}

// groupSeen loads the settings of a caller's group when it first shows up.
func (s *Server) groupSeen(p identity.Peer) {
	if p.Via == "default" {
		return
	}
	s.mu.Lock()
	_, ok := s.settings[p.Group]
	s.mu.Unlock()
	if ok {
		return
	}
	if st, err := s.tree.Read(p.Group); err == nil {
		s.mu.Lock()
		s.settings[p.Group] = st
		s.mu.Unlock()
	}
}

// track adds or removes a connection (shut down when the daemon stops).
func (s *Server) track(c *conn, add bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
}

// connList returns the open connections, taken under s.mu.
func (s *Server) connList() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}
