package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/monoclock"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// Client is a minimal Go client of the daemon (tests, benchmarks, tools); the
// production client is libgpuslice's gate (C).
type Client struct {
	nc    *net.UnixConn
	Group string                    // the group the daemon placed this process in
	rbuf  [proto.FrameSize + 1]byte // a record longer than a frame shows as FrameSize+1
	wbuf  [proto.FrameSize]byte
}

// Dial connects and says hello. The exchange ends with ctx: a daemon that
// accepts but never answers (stopped, stuck) does not hold the caller.
func Dial(ctx context.Context, socket string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, proto.Network, socket)
	if err != nil {
		return nil, fmt.Errorf("connect to node daemon: %w", err)
	}
	c := &Client{nc: nc.(*net.UnixConn)}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Now()) }) //nolint:errcheck // wakes the exchange
	err = c.hello()
	if !stop() { // ctx ended meanwhile: the deadline set cut the exchange short
		if err == nil {
			err = c.closeWith(errors.New("hello to node daemon"))
		}
		err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// hello says hello and reads the welcome; on error the connection is closed.
func (c *Client) hello() error {
	features := proto.FeatureRevoke
	if shared, _ := monoclock.Shared("/proc"); shared { // else grants are timed from their reading
		features |= proto.FeatureSentAt
	}
	if err := c.Send(&proto.Hello{Features: features}); err != nil {
		// A refusal may close the socket before the hello is sent; it is queued.
		if rerr := c.nc.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); rerr != nil {
			return c.closeWith(errors.Join(err, rerr))
		}
		if _, nerr := c.Next(); errors.As(nerr, new(*RefusedError)) {
			err = nerr
		}
		return c.closeWith(err)
	}
	m, err := c.Next()
	if err != nil {
		return c.closeWith(err)
	}
	w, ok := m.(*proto.Welcome)
	if !ok {
		return c.closeWith(fmt.Errorf("node daemon answered hello with %T", m))
	}
	c.Group = proto.String(w.Group[:])
	return nil
}

func (c *Client) closeWith(err error) error {
	if cerr := c.nc.Close(); cerr != nil {
		return fmt.Errorf("%w (close: %w)", err, cerr)
	}
	return err
}

// New wraps a connected socket that has not said hello (tests of the
// protocol: what the daemon does with a misbehaving peer).
func New(nc *net.UnixConn) *Client { return &Client{nc: nc} }

// Conn is the client's socket (tests write raw records on it).
func (c *Client) Conn() *net.UnixConn { return c.nc }

// Close closes the connection; the daemon releases whatever it held.
func (c *Client) Close() error { return c.nc.Close() }

// Send writes one message.
func (c *Client) Send(m proto.Message) error {
	if err := proto.Encode(c.wbuf[:], m); err != nil {
		return err
	}
	if _, err := c.nc.Write(c.wbuf[:]); err != nil {
		return fmt.Errorf("send %T: %w", m, err)
	}
	return nil
}

// Next reads one message (one record); an Error message becomes an error.
func (c *Client) Next() (proto.Message, error) {
	n, err := c.nc.Read(c.rbuf[:])
	if errors.Is(err, syscall.ECONNRESET) {
		// The daemon closed with frames of ours unread: the kernel reports
		// the reset first, then still delivers what the daemon sent last
		// (a refusal).
		if n2, err2 := c.nc.Read(c.rbuf[:]); err2 == nil && n2 > 0 {
			n, err = n2, nil
		}
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("read from node daemon: %w", err)
	case n == 0:
		return nil, fmt.Errorf("read from node daemon: %w", io.EOF)
	case n != proto.FrameSize:
		return nil, fmt.Errorf("read from node daemon: %w: a record of %d bytes", proto.ErrFrame, n)
	}
	m, err := proto.Decode(c.rbuf[:proto.FrameSize])
	if err != nil {
		return nil, err
	}
	if e, ok := m.(*proto.Error); ok {
		return nil, &RefusedError{Code: e.Code, Message: proto.String(e.Message[:])}
	}
	return m, nil
}

// RefusedError is the daemon's error frame: it refused a request (Code
// proto.ErrBusy: the connection, for now) and closed the connection.
type RefusedError struct {
	Code    uint32
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("node daemon refused: code %d: %s", e.Code, e.Message)
}

// IsBusy reports whether err is a refusal for now (too many connections).
func IsBusy(err error) bool {
	var r *RefusedError
	return errors.As(err, &r) && r.Code == proto.ErrBusy
}

// SetDeadline bounds the next reads and writes.
func (c *Client) SetDeadline(t time.Time) error { return c.nc.SetDeadline(t) }

// Acquire asks for gpu and waits for its grant (revokes of older grants are skipped).
func (c *Client) Acquire(gpu proto.UUID) (*proto.Grant, error) {
	if err := c.Send(&proto.Acquire{GPU: gpu}); err != nil {
		return nil, err
	}
	return c.WaitGrant()
}

// WaitGrant reads until the next grant.
func (c *Client) WaitGrant() (*proto.Grant, error) {
	h, err := c.WaitHeld()
	return h.Grant, err
}

// Held is a grant as this client holds it, on CLOCK_MONOTONIC (ns,
// monoclock.Now).
type Held struct {
	*proto.Grant
	Read  uint64 // when this client read it
	Start uint64 // when the daemon sent it, or Read (proto.GrantEnd)
	End   uint64 // when it ends: by the daemon's clock where the grant says when it was sent
}

// DaemonClock reports whether the grant is timed by the daemon's clock (it
// says when it was sent, and that instant is plausible here).
func (h Held) DaemonClock() bool { return h.SentAtNs != 0 && h.Start == h.SentAtNs }

// WaitHeld reads until the next grant and says when it ends.
func (c *Client) WaitHeld() (Held, error) {
	for {
		m, err := c.Next()
		if err != nil {
			return Held{}, err
		}
		if g, ok := m.(*proto.Grant); ok {
			h := Held{Grant: g, Read: monoclock.Now()}
			h.Start, h.End = proto.GrantEnd(h.Read, g.SentAtNs, g.ValidNs)
			return h, nil
		}
	}
}

// Release hands grant seq back; more asks for the next grant at once.
func (c *Client) Release(gpu proto.UUID, seq uint64, more bool) error {
	var flags uint32
	if more {
		flags = proto.ReleaseMore
	}
	return c.Send(&proto.Release{GPU: gpu, Seq: seq, Flags: flags})
}

// Borrow asks for size bytes past the group's allowance on gpu (flags:
// proto.BorrowReclaim for room within the guarantee) and waits for the answer;
// spill orders that arrive meanwhile are passed to onSpill (may be nil).
func (c *Client) Borrow(gpu proto.UUID, size uint64, flags uint32, onSpill func(*proto.Spill)) (*proto.Lend, error) {
	if err := c.Send(&proto.Borrow{GPU: gpu, Size: size, Flags: flags}); err != nil {
		return nil, err
	}
	for {
		m, err := c.Next()
		if err != nil {
			return nil, err
		}
		switch m := m.(type) {
		case *proto.Lend:
			return m, nil
		case *proto.Spill:
			if onSpill != nil {
				onSpill(m)
			}
		case *proto.Error:
			return nil, fmt.Errorf("node daemon: %s", proto.String(m.Message[:]))
		}
	}
}
