package timeslice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// What makes the daemon reachable: its socket file and its run directory
// (docs/timeslice.md, "The daemon"). The watchdog looks at both every
// reachCheckEvery. A socket file removed or replaced is made again (the
// connections already open go on); a run directory removed is made again, or
// one put in its place is taken, with the lock, its groups restored and the
// socket made again; where that cannot be (another daemon holds the new
// directory, the parent is gone, the directory is unsafe), or a daemon
// started on demand (Config.IdleExit) serves nobody, the daemon steps aside:
// it stops and releases its lock, and the next `gpuslice run` or the node
// agent's supervisor starts the one that serves the path.

// reachCheckEvery is how often the daemon looks at its socket and run
// directory: the next client is served well within 1 s of either's loss.
const reachCheckEvery = 100 * time.Millisecond

// socketListener is the daemon's listening socket and the file it made.
type socketListener struct {
	ln       *net.UnixListener
	id       dirID       // the socket file (device and inode)
	replaced atomic.Bool // a new listener took over: its accept loop ends quietly
}

// listen makes the daemon's socket, open to every local process (containers
// included): callers are identified by the kernel, not by what they send.
// Holding the run directory's lock, any socket file left behind is stale.
func listen(socket string) (*socketListener, error) {
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	ln, err := net.ListenUnix(proto.Network, &net.UnixAddr{Name: socket, Net: proto.Network})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(socket, 0o666); err != nil {
		return nil, errors.Join(fmt.Errorf("chmod socket: %w", err), ln.Close())
	}
	var st unix.Stat_t
	if err := unix.Lstat(socket, &st); err != nil {
		return nil, errors.Join(fmt.Errorf("stat socket: %w", err), ln.Close())
	}
	return &socketListener{ln: ln, id: dirID{dev: st.Dev, ino: st.Ino}}, nil
}

// serveListeners accepts connections on the daemon's listener, and on each
// one that replaces it, until ctx ends.
func (s *Server) serveListeners(ctx context.Context, wg *sync.WaitGroup) error {
	for {
		s.mu.Lock()
		l := s.ln
		s.mu.Unlock()
		err := s.acceptLoop(ctx, l.ln, wg)
		if ctx.Err() != nil || !l.replaced.Load() {
			return err
		}
	}
}

// closeListener closes the daemon's listener for good (the daemon stops). Its
// socket file is removed only while it is still the one it made.
func (s *Server) closeListener() {
	s.mu.Lock()
	l := s.ln
	s.lnClosed = true
	s.mu.Unlock()
	l.ln.SetUnlinkOnClose(s.ownSocket(l) == nil)
	if err := l.ln.Close(); err != nil {
		s.log.V(2).Info("close listener", "err", err)
	}
}

// ownSocket says why the socket file is no longer l's (nil while it is).
func (s *Server) ownSocket(l *socketListener) error {
	var st unix.Stat_t
	err := unix.Lstat(s.cfg.Socket, &st)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return errors.New("socket removed")
	case err != nil:
		return nil // unreadable for now: look again at the next check
	case (dirID{dev: st.Dev, ino: st.Ino}) != l.id:
		return errors.New("socket replaced")
	}
	return nil
}

// keepReachable makes again what a client needs to reach the daemon: the run
// directory (restoring its groups) and the socket. An error says why the
// daemon steps aside.
func (s *Server) keepReachable(ctx context.Context, wg *sync.WaitGroup) error {
	if why := s.runDirGone(); why != "" {
		if s.cfg.IdleExit > 0 && len(s.connList()) == 0 {
			// Started on demand (gpuslice run) and serving nobody: the next
			// run starts a daemon for the new directory (a test's or a
			// session's run directory being removed for good, too).
			return fmt.Errorf("run directory %s while no client is connected", why)
		}
		if err := s.retakeRunDir(ctx, wg, why); err != nil {
			return fmt.Errorf("run directory %s: %w", why, err)
		}
	}
	s.mu.Lock()
	l := s.ln
	s.mu.Unlock()
	if why := s.ownSocket(l); why != nil {
		if err := s.relisten(l); err != nil {
			return fmt.Errorf("%w: %w", why, err)
		}
		s.log.Info(why.Error()+": made again", "socket", s.cfg.Socket)
	}
	return nil
}

// relisten makes the socket again in place of old, whose connections go on.
func (s *Server) relisten(old *socketListener) error {
	nl, err := listen(s.cfg.Socket)
	if err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.lnClosed
	if !closed {
		s.ln = nl
	}
	s.mu.Unlock()
	if closed { // the daemon is stopping
		return nl.ln.Close()
	}
	old.replaced.Store(true)
	old.ln.SetUnlinkOnClose(false) // the path is nl's now
	if err := old.ln.Close(); err != nil {
		s.log.V(2).Info("close replaced listener", "err", err)
	}
	return nil
}

// retakeRunDir makes the run directory again where it was removed (not its
// parents: a parent gone is a node being torn down), or takes the one put in
// its place: its lock (another daemon's: ErrRunning), the groups it lost
// (restoreGroups) and the group tree's watcher.
func (s *Server) retakeRunDir(ctx context.Context, wg *sync.WaitGroup, why string) error {
	if err := os.Mkdir(s.cfg.RunDir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("make it again: %w", err)
	}
	if err := paths.CheckRunDir(s.cfg.RunDir); err != nil {
		return err
	}
	unlock, id, err := lockDir(s.cfg.RunDir)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.unlock
	s.unlock, s.runDir = unlock, id
	s.mu.Unlock()
	if err := old(); err != nil {
		s.log.V(2).Info("release the lost run directory's lock", "err", err)
	}
	n := s.restoreGroups()
	s.startWatch(ctx, wg)
	s.log.Info("run directory "+why+": serving it again", "runDir", s.cfg.RunDir, "groupsRestored", n)
	return nil
}

// startWatch (re)starts the group tree's watcher: a run directory made again
// is a new tree, which the old watcher no longer sees.
func (s *Server) startWatch(ctx context.Context, wg *sync.WaitGroup) {
	wctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	prev := s.stopWatch
	s.stopWatch = cancel
	s.mu.Unlock()
	if prev != nil {
		prev()
	}
	tree := s.tree
	wg.Go(func() {
		err := tree.WatchRemoved(wctx, func(name string) { s.groupChanged(ctx, name) }, s.groupRemoved)
		if err != nil && wctx.Err() == nil {
			s.log.Error(err, "group tree watcher stopped")
		}
	})
}

// releaseRunDir releases the run directory's lock (the daemon stops).
func (s *Server) releaseRunDir() error {
	s.mu.Lock()
	unlock := s.unlock
	s.mu.Unlock()
	return unlock()
}
