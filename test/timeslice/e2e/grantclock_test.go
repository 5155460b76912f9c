//go:build timeslicee2e

package timeslicee2e

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/monoclock"
	"github.com/gpuslice/gpuslice/internal/proto"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// needHostClock skips a test that times grants by the daemon's clock where
// this process's CLOCK_MONOTONIC is not the host's (a time namespace): the
// daemon's instants cannot be compared with its own there.
func needHostClock(t *testing.T) {
	t.Helper()
	if shared, err := monoclock.Shared("/proc"); !shared {
		t.Skipf("this process's CLOCK_MONOTONIC is not the host's (time namespace; %v): grants cannot be timed by the daemon's clock", err)
	}
}

// waitQueued waits, at most 5 s, until a message waits unread on c's socket.
func waitQueued(t *testing.T, c *client.Client) {
	t.Helper()
	rc, err := c.Conn().SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n, perr := 0, error(nil)
	err = rc.Control(func(fd uintptr) {
		for deadline := time.Now().Add(5 * time.Second); ; {
			left := max(time.Until(deadline), 0)
			n, perr = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds()))
			if !errors.Is(perr, unix.EINTR) {
				return
			}
		}
	})
	if err != nil || perr != nil || n != 1 {
		t.Fatalf("no message queued in 5 s: %d ready, %v, %v", n, err, perr)
	}
}

// A grant read late ends when the daemon ends it (sent_at + valid), not
// valid after its reading: the reader does not hold the GPU into the next
// group's turn.
func TestGrantReadLateEndsByDaemonClock(t *testing.T) {
	needHostClock(t)
	cfg := testCfg(t)
	startDaemon(t, cfg)
	c, err := client.Dial(context.Background(), cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck // test
	if err := c.Send(&proto.Acquire{GPU: testGPU}); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, c) // the grant waits unread in the socket: it is read after it was sent
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	h, err := c.WaitHeld()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !h.DaemonClock():
		t.Fatalf("grant not timed by the daemon's clock: %+v %+v", h, *h.Grant)
	case h.SentAtNs >= h.Read:
		t.Fatalf("sent at %d, read at %d", h.SentAtNs, h.Read)
	case h.End != h.SentAtNs+h.ValidNs:
		t.Fatalf("ends at %d, want sent_at %d + valid %d", h.End, h.SentAtNs, h.ValidNs)
	case h.End >= h.Read+h.ValidNs:
		t.Fatalf("ends at %d, not before valid %d from its reading at %d", h.End, h.ValidNs, h.Read)
	}
	t.Logf("read %v after it was sent; valid %v", time.Duration(h.Read-h.SentAtNs), time.Duration(h.ValidNs))
}

// The daemon sends grants with sent_at only to clients that announce
// FeatureSentAt; others (older libraries) get the grant they know, of
// GrantSizeNoSentAt bytes, and a welcome without the bit.
func TestGrantSentAtOnlyWhenAnnounced(t *testing.T) {
	needHostClock(t)
	cfg := testCfg(t)
	startDaemon(t, cfg)
	for _, tc := range []struct {
		features uint32
		size     uint32
	}{
		{proto.FeatureRevoke | proto.FeatureRenew, proto.GrantSizeNoSentAt},
		{0, proto.GrantSizeNoSentAt},
		{proto.FeatureRevoke | proto.FeatureSentAt, 56},
	} {
		c := rawDial(t, cfg.Socket)
		if err := c.Send(&proto.Hello{Features: tc.features}); err != nil {
			t.Fatal(err)
		}
		m, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := m.(*proto.Welcome); !ok || (w.Features&proto.FeatureSentAt != 0) != (tc.features&proto.FeatureSentAt != 0) {
			t.Fatalf("features %#x: welcome %+v", tc.features, m)
		}
		before := monoclock.Now()
		if err := c.Send(&proto.Acquire{GPU: testGPU}); err != nil {
			t.Fatal(err)
		}
		var frame [proto.FrameSize + 1]byte
		n, err := c.Conn().Read(frame[:])
		if err != nil || n != proto.FrameSize {
			t.Fatalf("features %#x: read %d bytes: %v", tc.features, n, err)
		}
		after := monoclock.Now()
		if size := binary.LittleEndian.Uint32(frame[8:]); size != tc.size {
			t.Errorf("features %#x: grant of %d bytes, want %d", tc.features, size, tc.size)
		}
		m, err = proto.Decode(frame[:proto.FrameSize])
		if err != nil {
			t.Fatal(err)
		}
		g, ok := m.(*proto.Grant)
		if !ok {
			t.Fatalf("features %#x: %T, want a grant", tc.features, m)
		}
		if sent := tc.features&proto.FeatureSentAt != 0; sent != (g.SentAtNs != 0) ||
			sent && (g.SentAtNs < before || g.SentAtNs > after) {
			t.Errorf("features %#x: sent_at %d, acquire sent at %d, grant read at %d", tc.features, g.SentAtNs, before, after)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
