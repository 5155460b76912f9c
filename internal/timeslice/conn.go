package timeslice

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/identity"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// conn is one client connection (one process, any number of GPUs). Its
// goroutine owns the socket's reads: blocking reads of one record (one frame)
// on the raw descriptor, from a thread of its own, so a grant costs the daemon
// one read and one send system call (no poller round trip, no goroutine
// handoff). Sends never block and may come from any connection's goroutine (a
// release hands the GPU to another client).
type conn struct {
	s    *Server
	fd   int // the socket (blocking; sends use MSG_DONTWAIT)
	peer identity.Peer
	// known is peer once decided, for bindingChanged (other goroutines).
	known atomic.Pointer[identity.Peer]
	// features: the GS_FEATURE_* bits both sides understand (set by the handshake).
	features uint32
	log      klog.Logger
	gpus     map[proto.UUID]*gpuState // touched only by the connection's goroutine
	// devGroups: the group of each GPU (by UUID, without its prefix) the caller's container has
	// a group directory for (identity.DeviceGroups: a container naming several
	// DRA claims); other GPUs are in peer.Group. Set by the handshake.
	devGroups map[string]string

	wmu    sync.Mutex
	broken bool
	closed bool // fd is closed (or about to be): no more sends
}

// serve runs one connection until it closes; every grant it held is released.
// It owns fd and the connection's admission slot for account acct.
func (s *Server) serve(ctx context.Context, fd int, cred *unix.Ucred, acct string) {
	// A thread of its own, from the hello on: a blocked read then wakes this
	// goroutine directly. Never unlocked: the thread ends with the goroutine
	// (an unlocked one would join the runtime's idle threads, which are never
	// ended: 1,000 connections at once left 1,000 threads behind).
	runtime.LockOSThread()
	log := klog.FromContext(ctx)
	c := &conn{s: s, fd: fd, gpus: map[proto.UUID]*gpuState{}}
	s.track(c, true)
	var admitted string // the group whose slot this connection holds
	defer func() {
		for _, g := range c.gpus {
			g.disconnect(c)
		}
		s.forgetBorrower(c)
		s.track(c, false)
		s.adm.leave(acct, admitted)
		c.wmu.Lock()
		c.closed = true
		if err := drainClose(c.fd); err != nil {
			log.V(4).Info("close", "err", err)
		}
		c.wmu.Unlock()
	}()
	if err := c.handshake(cred, &admitted); err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, errBusy) { // EOF: a liveness probe (Reachable)
			log.V(1).Info("connection refused", "err", err)
		}
		return
	}
	c.log = log.WithValues("pid", c.peer.PID, "group", c.peer.Group)
	c.log.V(2).Info("client connected", "uid", c.peer.UID, "via", c.peer.Via)
	err := c.loop()
	c.log.V(2).Info("client gone", "err", err)
}

// takeFD moves an accepted connection out of the runtime's poller: a blocking
// descriptor of our own (close-on-exec); nc is closed.
func takeFD(nc *net.UnixConn) (int, error) {
	raw, err := nc.SyscallConn()
	if err != nil {
		return -1, errors.Join(fmt.Errorf("raw connection: %w", err), nc.Close())
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		derr = err
	}
	if err := nc.Close(); err != nil && derr == nil && fd >= 0 {
		derr = err
	}
	if derr == nil {
		derr = unix.SetNonblock(fd, false)
	}
	if derr != nil {
		if fd >= 0 {
			derr = errors.Join(derr, unix.Close(fd))
		}
		return -1, fmt.Errorf("take connection: %w", derr)
	}
	return fd, nil
}

// kill shuts the socket down: a blocked read returns, sends stop.
func (c *conn) kill() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.closed {
		if err := unix.Shutdown(c.fd, unix.SHUT_RDWR); err != nil {
			c.s.log.V(4).Info("shutdown", "err", err)
		}
	}
}

// errBusy: the connection was refused for now (over a bound).
var errBusy = errors.New("connection refused: over a bound")

// handshake identifies the caller through the kernel, admits it into its
// group's connection slots (*admitted names the group once it holds one) and
// answers its hello.
func (c *conn) handshake(cred *unix.Ucred, admitted *string) error {
	var err error
	if err = c.identify(cred); err != nil {
		c.sendError(proto.ErrIdentity, err.Error())
		return err
	}
	if c.peer.Refused != "" {
		c.s.log.V(1).Info("group file not accepted: the caller gets a group of its own", "pid", c.peer.PID,
			"uid", c.peer.UID, "group", c.peer.Group, "reason", c.peer.Refused)
	}
	if why := c.s.adm.admitGroup(&c.s.cfg, c.peer.Group); why != "" {
		c.sendError(proto.ErrBusy, why+"; connect again later")
		if n, info := c.s.adm.refusal(); info {
			c.s.log.Info("connection refused", "reason", why, "pid", cred.Pid, "uid", cred.Uid, "refusedSoFar", n)
		}
		return errBusy
	}
	*admitted = c.peer.Group
	if err := c.setReadTimeout(c.s.cfg.HelloTimeout); err != nil {
		return err
	}
	m, err := c.read()
	if err != nil {
		return err
	}
	hello, ok := m.(*proto.Hello)
	if !ok {
		c.sendError(proto.ErrProtocol, fmt.Sprintf("expected hello, got %T", m))
		return fmt.Errorf("expected hello, got %T", m)
	}
	known := proto.FeatureRevoke | proto.FeatureRenew
	if c.s.clock != nil {
		known |= proto.FeatureSentAt
	}
	c.features = hello.Features & known
	if err := c.setReadTimeout(0); err != nil {
		return err
	}
	c.deviceGroups()
	// Before the welcome: a library that says hello at its first
	// allocation (in each of its groups) waits for it, so its host pid is
	// known from then on.
	for _, p := range c.groupPeers() {
		c.s.groupSeen(p)
		if filled, err := identity.MapHostPID(c.s.cfg.ProcRoot, c.s.tree, p); err != nil {
			c.s.log.V(2).Info("host pid not recorded", "pid", p.PID, "group", p.Group, "err", err)
		} else if filled {
			c.s.log.V(4).Info("host pid recorded", "pid", p.PID, "group", p.Group)
		}
	}
	w := &proto.Welcome{Features: proto.FeatureRevoke | c.features, PeriodNs: uint64(c.s.cfg.Policy.Period)}
	proto.SetString(w.Group[:], c.peer.Group)
	c.send(w)
	return nil
}

// setReadTimeout bounds blocking reads (0: no bound).
func (c *conn) setReadTimeout(d time.Duration) error {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("receive timeout: %w", err)
	}
	return nil
}

// recv reads one record into buf (blocking).
func (c *conn) recv(buf []byte) (int, error) {
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, fmt.Errorf("read: %w", os.ErrDeadlineExceeded)
		case err != nil:
			return 0, fmt.Errorf("read: %w", err)
		case n == 0: // end of stream (or an empty record: closed all the same)
			return 0, io.EOF
		}
		return n, nil
	}
}

// read returns the next frame's message.
func (c *conn) read() (proto.Message, error) {
	var buf [proto.FrameSize + 1]byte // a longer record shows as FrameSize+1
	n, err := c.recv(buf[:])
	if err != nil {
		return nil, err
	}
	if n != proto.FrameSize {
		err := fmt.Errorf("%w: a record of %d bytes, want one frame of %d", proto.ErrFrame, min(n, proto.FrameSize), proto.FrameSize)
		if n > proto.FrameSize {
			err = fmt.Errorf("%w: a record longer than one frame of %d bytes", proto.ErrFrame, proto.FrameSize)
		}
		c.sendError(proto.ErrProtocol, err.Error())
		return nil, err
	}
	m, err := proto.Decode(buf[:proto.FrameSize])
	if err != nil {
		code := proto.ErrProtocol
		if binary.LittleEndian.Uint16(buf[4:]) != proto.Version {
			code = proto.ErrVersion
		}
		c.sendError(code, err.Error())
		return nil, err
	}
	return m, nil
}

func (c *conn) loop() error {
	for {
		m, err := c.read()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) {
				return nil
			}
			return err
		}
		switch m := m.(type) {
		case *proto.Acquire:
			g, err := c.gpu(m.GPU)
			if err != nil {
				c.sendError(proto.ErrLimit, err.Error())
				return err
			}
			if err := g.acquire(c, c.s.params(c.groupOn(m.GPU))); err != nil {
				c.sendError(proto.ErrProtocol, err.Error())
				return err
			}
		case *proto.Release:
			if g := c.gpus[m.GPU]; g != nil {
				g.release(c, m.Seq, m.Flags&proto.ReleaseMore != 0)
			}
		case *proto.Borrow:
			c.s.borrow(c, m)
		default:
			c.sendError(proto.ErrProtocol, fmt.Sprintf("unexpected %T", m))
			return fmt.Errorf("unexpected %T", m)
		}
	}
}

// deviceGroups reads the groups of the caller's GPUs (devGroups); where
// they cannot be read, every GPU is in peer.Group.
func (c *conn) deviceGroups() {
	dg, err := identity.DeviceGroups(c.s.cfg.ProcRoot, c.s.tree, c.peer)
	if err != nil {
		c.s.log.V(2).Info("device groups not read", "pid", c.peer.PID, "group", c.peer.Group, "err", err)
		return
	}
	c.devGroups = dg
}

// groupPeers is the caller once per group it holds: its own, then its
// GPUs' (Via "device").
func (c *conn) groupPeers() []identity.Peer {
	out := []identity.Peer{c.peer}
	for _, name := range slices.Sorted(maps.Values(c.devGroups)) {
		if !slices.ContainsFunc(out, func(p identity.Peer) bool { return p.Group == name }) {
			p := c.peer
			p.Group, p.Via = name, "device"
			out = append(out, p)
		}
	}
	return out
}

// groupOn is the caller's group on GPU u: its GPU's group (devGroups),
// else its own.
func (c *conn) groupOn(u proto.UUID) string {
	if name, ok := c.devGroups[u.String()[len("GPU-"):]]; ok { // a GPU's or a MIG instance's 16 bytes
		return name
	}
	return c.peer.Group
}

func (c *conn) gpu(u proto.UUID) (*gpuState, error) {
	if g := c.gpus[u]; g != nil {
		return g, nil
	}
	g, err := c.s.gpu(u)
	if err != nil {
		return nil, err
	}
	c.gpus[u] = g
	return g, nil
}

func (c *conn) sendGrant(u proto.UUID, g policy.Grant, now time.Time) {
	c.sendGrantFlags(u, g, now, 0)
}

// sendRenewal sends a renewal (or update) of the running grant g to a client
// that announced FeatureRenew: it ignores it if it handed g's seq back.
func (c *conn) sendRenewal(u proto.UUID, g policy.Grant, now time.Time) {
	c.sendGrantFlags(u, g, now, proto.GrantRenewal)
}

func (c *conn) sendGrantFlags(u proto.UUID, g policy.Grant, now time.Time, flags uint32) {
	if g.Preempt {
		flags |= proto.GrantPreempt
	}
	if g.Alone && c.features&proto.FeatureRenew != 0 {
		flags |= proto.GrantAlone
	}
	m := &proto.Grant{GPU: u, Seq: g.Seq, SliceNs: uint64(g.SliceEnd.Sub(g.Start)),
		ValidNs: uint64(max(g.End.Sub(now), 0)), Flags: flags}
	if c.features&proto.FeatureSentAt != 0 { // the grant ends at g.End on the daemon's clock, however late it is read
		m.SentAtNs = c.s.clock.Ns(now)
	}
	c.send(m)
}

func (c *conn) sendRevoke(u proto.UUID, seq uint64, reason uint32) {
	c.send(&proto.Revoke{GPU: u, Seq: seq, Reason: reason})
}

func (c *conn) sendError(code uint32, msg string) {
	e := &proto.Error{Code: code}
	proto.SetString(e.Message[:], sanitize(msg))
	c.send(e)
}

// send writes one frame without blocking: a client that does not read its
// socket (its buffer is full) is disconnected rather than stalling others.
func (c *conn) send(m proto.Message) {
	var buf [proto.FrameSize]byte
	if err := proto.Encode(buf[:], m); err != nil {
		c.s.log.Error(err, "encode", "type", fmt.Sprintf("%T", m))
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.broken || c.closed {
		return
	}
	if err := unix.Sendto(c.fd, buf[:], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil); err != nil {
		c.broken = true
		c.s.log.V(2).Info("client not reading its socket: disconnecting", "pid", c.peer.PID, "err", err)
		if err := unix.Shutdown(c.fd, unix.SHUT_RDWR); err != nil {
			c.s.log.V(4).Info("shutdown", "err", err)
		}
	}
}

// sanitize keeps a message printable for the wire.
func sanitize(s string) string {
	b := []byte(strings.ToValidUTF8(s, "?"))
	for i, ch := range b {
		if ch < 0x20 || ch == 0x7f {
			b[i] = ' '
		}
	}
	return string(b)
}
