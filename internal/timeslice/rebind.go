package timeslice

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/identity"
)

// maxIdentifyTries bounds how often a connection is identified again because
// a group's cgroup binding changed meanwhile; past it the connection is
// closed and the caller connects again.
const maxIdentifyTries = 3

var errBindingsChanging = errors.New("group bindings kept changing while the caller was identified; connect again")

// bindingChanged is told that group name's files changed (name gone:
// exists false). When its cgroup binding changed to a new one, callers
// identified before it (a container's processes connect as soon as it
// starts; the node agent binds its group a moment later) whose cgroup it now
// binds to another group than theirs are disconnected: they connect again
// and are identified by the binding, whatever their environment. Identities
// being decided meanwhile are decided again (bindGen).
func (s *Server) bindingChanged(ctx context.Context, name string, exists bool) {
	b := ""
	if exists {
		b = strings.TrimSuffix(s.tree.Cgroup(name), "/")
	}
	s.mu.Lock()
	old := s.bindings[name]
	if b == "" {
		delete(s.bindings, name)
	} else {
		s.bindings[name] = b
	}
	s.mu.Unlock()
	if b == old || b == "" {
		return
	}
	// Before the connections are listed: see conn.identify. Only a binding of
	// root's counts for every caller; one in a user's group directory binds
	// only that user's processes (boundGroup), and makes nobody else's
	// identity be decided again.
	if st, err := os.Stat(s.tree.Path(name)); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid == 0 {
			s.bindGen.Add(1)
		}
	}
	for _, c := range s.connList() {
		p := c.known.Load()
		if p == nil || !inCgroup(p.Cgroups, b) {
			continue
		}
		if g := identity.BoundGroup(s.tree, p.Cgroups, p.UID); g != "" && g != p.Group {
			klog.FromContext(ctx).V(1).Info("caller's cgroup is now bound to another group: it connects again",
				"pid", p.PID, "group", p.Group, "bound", g, "via", p.Via)
			c.kill()
		}
	}
}

// inCgroup reports whether one of cgroups is binding b or below it.
func inCgroup(cgroups []string, b string) bool {
	for _, c := range cgroups {
		if c == b || strings.HasPrefix(c, b+"/") {
			return true
		}
	}
	return false
}

// identify decides the caller's group (identify) and publishes it for
// bindingChanged. A binding that changed while it was decided (bindGen
// moved) may have been missed, and bindingChanged may have listed this
// connection before its identity was published: it is decided again. Only
// root's bindings move bindGen: no user can keep others' identities from
// being decided.
func (c *conn) identify(cred *unix.Ucred) error {
	for range maxIdentifyTries {
		gen := c.s.bindGen.Load()
		p, err := identity.Identify(c.s.cfg.ProcRoot, c.s.tree, cred)
		if err != nil {
			return err
		}
		c.peer = p
		c.known.Store(&p)
		if c.s.bindGen.Load() == gen {
			return nil
		}
	}
	return errBindingsChanging
}
