package timeslice

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/proto"
)

// Every connection holds a thread of the daemon (its blocking reads), a
// descriptor and a little memory, so connections are admitted against three
// bounds: in all (Config.MaxConns), per user (Config.MaxConnsPerUID: per uid;
// root beside the daemon is exempt, it is trusted; root in another pid
// namespace, a container running as root, is bounded per pid namespace, or
// one container would take every slot with processes of no group), and per
// group (Config.MaxConnsPerGroup). A connection over a bound
// is refused politely: one error frame (proto.ErrBusy) and the socket closes.
// The library stays gated and connects again later; everyone else is served.

// admission counts the connections being served.
type admission struct {
	mu       sync.Mutex
	total    int
	perUser  map[string]int // by account
	perGroup map[string]int
	refused  uint64
	loggedAt time.Time // last refusal logged at Info (at most one a second)
}

func newAdmission() *admission {
	return &admission{perUser: map[string]int{}, perGroup: map[string]int{}}
}

// account is what the per-user bound counts a caller against: its uid; for
// root, the pid namespace it runs in when that is not the daemon's (ns, 0 if
// unknown); "" (exempt) for root beside the daemon.
func account(procRoot string, ns uint64, cred *unix.Ucred) string {
	if cred.Uid != 0 {
		return "uid " + strconv.FormatUint(uint64(cred.Uid), 10)
	}
	var st unix.Stat_t
	if err := unix.Stat(procRoot+"/"+strconv.Itoa(int(cred.Pid))+"/ns/pid", &st); err != nil {
		return "root in an unknown pid namespace" // gone already
	}
	if st.Ino == ns {
		return ""
	}
	return "root in pid namespace " + strconv.FormatUint(st.Ino, 10)
}

// admitUser takes a connection slot for a caller of account acct (""
// exempt); it returns why not ("" = admitted).
func (a *admission) admitUser(cfg *Config, acct string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.total >= cfg.MaxConns:
		return fmt.Sprintf("too many connections (%d)", cfg.MaxConns)
	case acct != "" && a.perUser[acct] >= cfg.MaxConnsPerUID:
		return fmt.Sprintf("too many connections from %s (%d)", acct, cfg.MaxConnsPerUID)
	}
	a.total++
	if acct != "" {
		a.perUser[acct]++
	}
	return ""
}

// admitGroup takes a slot of the caller's group once it is identified.
func (a *admission) admitGroup(cfg *Config, group string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.perGroup[group] >= cfg.MaxConnsPerGroup {
		return fmt.Sprintf("too many connections in group %s (%d)", group, cfg.MaxConnsPerGroup)
	}
	a.perGroup[group]++
	return ""
}

// leave frees the slots of a connection of account acct (group "" if it had
// none).
func (a *admission) leave(acct, group string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total--
	if a.perUser[acct]--; a.perUser[acct] <= 0 {
		delete(a.perUser, acct)
	}
	if group == "" {
		return
	}
	if a.perGroup[group]--; a.perGroup[group] <= 0 {
		delete(a.perGroup, group)
	}
}

// refusal counts a refusal and reports whether to log it at Info (the first
// in a second; the others at V(2)).
func (a *admission) refusal() (n uint64, info bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused++
	now := time.Now()
	if now.Sub(a.loggedAt) >= time.Second {
		a.loggedAt = now
		return a.refused, true
	}
	return a.refused, false
}

// Refused returns how many connections were refused so far.
func (s *Server) Refused() uint64 {
	s.adm.mu.Lock()
	defer s.adm.mu.Unlock()
	return s.adm.refused
}

// refuse answers a connection over a bound with one error frame (without
// blocking) and closes it.
func (s *Server) refuse(fd int, cred *unix.Ucred, why string) {
	var buf [proto.FrameSize]byte
	e := &proto.Error{Code: proto.ErrBusy}
	proto.SetString(e.Message[:], why+"; connect again later")
	if err := proto.Encode(buf[:], e); err != nil {
		s.log.Error(err, "encode refusal")
	} else if err := unix.Sendto(fd, buf[:], unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil); err != nil {
		s.log.V(4).Info("refusal not sent (the close says it)", "err", err)
	}
	if err := drainClose(fd); err != nil {
		s.log.V(4).Info("close", "err", err)
	}
	n, info := s.adm.refusal()
	log := s.log.V(2)
	if info {
		log = s.log
	}
	log.Info("connection refused", "reason", why, "pid", cred.Pid, "uid", cred.Uid, "refusedSoFar", n)
}

// maxConnsFor bounds the connection count by the descriptors this process
// may open (a few are kept for the daemon's own files).
func maxConnsFor(want int, log klog.Logger) int {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return want
	}
	if lim := int(min(r.Cur, 1<<30)) - 64; lim < want {
		log.Info("connection bound lowered to the descriptor limit", "maxConns", lim, "wanted", want)
		return max(lim, 1)
	}
	return want
}

// drainClose reads what the client already sent (without blocking), then
// closes: closing a unix socket with unread data makes the client's next
// read fail with ECONNRESET before it sees the last frame (our error frame).
func drainClose(fd int) error {
	var buf [proto.FrameSize + 1]byte
	for range 64 {
		if n, _, err := unix.Recvfrom(fd, buf[:], unix.MSG_DONTWAIT); err != nil || n == 0 {
			break
		}
	}
	return unix.Close(fd)
}
