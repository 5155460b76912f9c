// Package proto is the socket protocol between libgpuslice (the client in every
// GPU process) and the time-slice daemon, defined once: these Go definitions, and the
// C header include/gpuslice/proto.h generated from them (`go generate`).
//
// The socket is a unix SOCK_SEQPACKET socket (Network): every record is one
// frame of FrameSize bytes: a Header, then one message, zero-padded.
// Integers are little-endian. A frame with a wrong magic, version, type, length,
// non-zero reserved or padding bytes, or unknown flag bits is rejected.
package proto

//go:generate go run ./gen -o ../../include/gpuslice/proto.h

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Wire constants.
const (
	Magic      uint32 = 0x52505347 // "GSPR" in little-endian byte order
	Version    uint16 = 2          // 2: SOCK_SEQPACKET, one frame per record (1: a byte stream)
	FrameSize         = 128
	HeaderSize        = 16
	// MaxPayload is the most a message may occupy after the header.
	MaxPayload = FrameSize - HeaderSize
)

// Network is the socket type for Go's net package: SOCK_SEQPACKET. A record
// is exactly one frame; a record of another size is a protocol error. (Records
// keep frames whole, so several client threads may read one socket, and a
// reader blocked on it is woken by incoming frames only.)
const Network = "unixpacket"

// Type is a message type code.
type Type uint16

// The message types.
const (
	TypeHello   Type = 1
	TypeWelcome Type = 2
	TypeAcquire Type = 3
	TypeGrant   Type = 4
	TypeRelease Type = 5
	TypeRevoke  Type = 6
	TypeError   Type = 7
	TypeBorrow  Type = 8
	TypeLend    Type = 9
	TypeSpill   Type = 10
)

// Flag bits and codes (copied into the C header by Constants).
const (
	FeatureRevoke uint32 = 1 << 0 // the client honours Revoke at its next kernel boundary
	// FeatureRenew: the client takes a Grant of the Seq it holds as a renewal
	// (a later end) and ignores one of a Seq it handed back. Added within
	// version 2: the daemon renews only clients that announce it.
	FeatureRenew uint32 = 1 << 1
	// FeatureSentAt: the client reads Grant.SentAtNs (GrantEnd). Added within
	// version 2: the daemon sends the longer grant only to clients that
	// announce it, and only when its clock is the host's (monoclock.Shared);
	// a reader accepts both sizes of grant.
	FeatureSentAt uint32 = 1 << 2
	// GrantSizeNoSentAt is the size of a grant without SentAtNs (every grant
	// before FeatureSentAt).
	GrantSizeNoSentAt uint32 = 48
	// SentAtMaxAgeMs bounds how long before its reading a grant may have been
	// sent for GrantEnd to count from the daemon's instant: an older one (or
	// one from the future) is taken for another clock's. Generous: a reader
	// starved of CPU for seconds still ends its grant by the daemon's clock
	// (the time namespace check, monoclock.Shared, keeps other clocks out).
	SentAtMaxAgeMs uint32 = 10000
	GrantPreempt   uint32 = 1 << 0 // an online group's turn pulled ahead of offline work
	// GrantAlone: no other group waits for the GPU (an idle holder need not
	// hand back); a grant of the same seq without it says one now does. Sent
	// only to clients that announce FeatureRenew.
	GrantAlone uint32 = 1 << 1
	// GrantRenewal: this grant renews (or, without GrantAlone, updates) the
	// running grant of its seq; a client ignores it if it already handed that
	// seq back. A grant without it answers the client's Acquire (a member may
	// share its group's running grant again after handing it back). Sent only
	// to clients that announce FeatureRenew.
	GrantRenewal   uint32 = 1 << 2
	ReleaseMore    uint32 = 1 << 0 // the client still has work: queue it for the next grant
	RevokeSliceEnd uint32 = 1      // the grant reached its end
	RevokePreempt  uint32 = 2      // an online group takes over at the next kernel boundary
	RevokeExpired  uint32 = 3      // the holder did not hand over in time: the grant is void
	ErrVersion     uint32 = 1      // unsupported protocol version
	ErrProtocol    uint32 = 2      // malformed or unexpected frame
	ErrIdentity    uint32 = 3      // the daemon could not identify the caller
	ErrLimit       uint32 = 4      // a request past a fixed bound (e.g. a GPU the daemon does not know)
	// ErrBusy refuses a connection for now (too many connections from the
	// caller's uid or group, or in all): the daemon is alive and the caller
	// stays gated; it may connect again later. Added within version 2.
	ErrBusy       uint32 = 5
	BorrowReclaim uint32 = 1 << 0 // the allocation is within the guarantee: make room for it
	LendGranted   uint32 = 1      // the allowance covers the allocation
	LendRefused   uint32 = 2      // no memory to lend; the message says why
	LendUnknown   uint32 = 3      // the group has no elastic memory on this GPU
)

// Header starts every frame.
type Header struct {
	Magic    uint32 `doc:"GS_PROTO_MAGIC"`
	Version  uint16 `doc:"GS_PROTO_VERSION"`
	Type     uint16 `doc:"GS_MSG_* value"`
	Len      uint32 `doc:"size of the message after the header"`
	Reserved uint32 `doc:"zero"`
}

// Message is one of the message structs.
type Message interface {
	Type() Type
}

// Spec describes one message type (the generator's input).
type Spec struct {
	Type Type
	Name string // lower-case C name: gs_msg_<name>, GS_MSG_<NAME>
	Doc  string
	New  func() Message
}

// Messages lists every message type.
func Messages() []Spec {
	return []Spec{
		{TypeHello, "hello", "client -> daemon, first frame on a connection", func() Message { return new(Hello) }},
		{TypeWelcome, "welcome", "daemon -> client, answers hello", func() Message { return new(Welcome) }},
		{TypeAcquire, "acquire", "client -> daemon: has work for a GPU", func() Message { return new(Acquire) }},
		{TypeGrant, "grant", "daemon -> client: holds the GPU until valid_ns after sending", func() Message { return new(Grant) }},
		{TypeRelease, "release", "client -> daemon: outstanding work done, GPU handed back", func() Message { return new(Release) }},
		{TypeRevoke, "revoke", "daemon -> client: finish outstanding work and release now", func() Message { return new(Revoke) }},
		{TypeError, "error", "daemon -> client: request refused; the connection closes", func() Message { return new(Error) }},
		{TypeBorrow, "borrow", "client -> daemon: an allocation past the group's allowance (or a reclaim)", func() Message { return new(Borrow) }},
		{TypeLend, "lend", "daemon -> client: answers borrow", func() Message { return new(Lend) }},
		{TypeSpill, "spill", "daemon -> client: move borrowed managed memory to the host", func() Message { return new(Spill) }},
	}
}

// Const is a named constant of the protocol.
type Const struct {
	Name  string
	Value uint32
	Doc   string
}

// Constants lists the flag bits and codes for the C header.
func Constants() []Const {
	return []Const{
		{"GS_FEATURE_REVOKE", FeatureRevoke, "client honours revoke at its next kernel boundary"},
		{"GS_FEATURE_RENEW", FeatureRenew, "client takes a grant of the seq it holds as a renewal, ignores one it handed back"},
		{"GS_FEATURE_SENT_AT", FeatureSentAt, "client reads a grant's sent_at_ns: the daemon may send grants of sizeof(struct gs_msg_grant)"},
		{"GS_GRANT_SIZE_NO_SENT_AT", GrantSizeNoSentAt, "size of a grant without sent_at_ns (clients without GS_FEATURE_SENT_AT, older daemons)"},
		{"GS_GRANT_SENT_AT_MAX_AGE_MS", SentAtMaxAgeMs, "a grant read later than this after sent_at_ns (or before it) counts from its reading"},
		{"GS_GRANT_PREEMPT", GrantPreempt, "an online group's turn pulled ahead of offline work"},
		{"GS_GRANT_ALONE", GrantAlone, "no other group waits: an idle holder need not hand back"},
		{"GS_GRANT_RENEWAL", GrantRenewal, "renews the running grant of its seq: stale if that seq was handed back"},
		{"GS_RELEASE_MORE", ReleaseMore, "the client still has work: queue it for the next grant"},
		{"GS_REVOKE_SLICE_END", RevokeSliceEnd, "the grant reached its end"},
		{"GS_REVOKE_PREEMPT", RevokePreempt, "an online group takes over at the next kernel boundary"},
		{"GS_REVOKE_EXPIRED", RevokeExpired, "the holder did not hand over in time: the grant is void"},
		{"GS_ERR_VERSION", ErrVersion, "unsupported protocol version"},
		{"GS_ERR_PROTOCOL", ErrProtocol, "malformed or unexpected frame"},
		{"GS_ERR_IDENTITY", ErrIdentity, "the daemon could not identify the caller"},
		{"GS_ERR_LIMIT", ErrLimit, "a request past a fixed bound (e.g. a GPU the daemon does not know)"},
		{"GS_ERR_BUSY", ErrBusy, "too many connections for now: stay gated, connect again later"},
		{"GS_BORROW_RECLAIM", BorrowReclaim, "the allocation is within the guarantee: make room for it"},
		{"GS_LEND_GRANTED", LendGranted, "the allowance covers the allocation"},
		{"GS_LEND_REFUSED", LendRefused, "no memory to lend; the message says why"},
		{"GS_LEND_UNKNOWN", LendUnknown, "the group has no elastic memory on this GPU"},
	}
}

func spec(t Type) (Spec, bool) {
	for _, s := range Messages() {
		if s.Type == t {
			return s, true
		}
	}
	return Spec{}, false
}

// ErrFrame is wrapped by every decoding error.
var ErrFrame = errors.New("bad frame")

// Encode writes m as one frame into buf, which must hold FrameSize bytes.
func Encode(buf []byte, m Message) error {
	if len(buf) < FrameSize {
		return fmt.Errorf("encode: buffer of %d bytes, need %d", len(buf), FrameSize)
	}
	if err := validate(m); err != nil {
		return fmt.Errorf("encode %T: %w", m, err)
	}
	clear(buf[:FrameSize])
	if encodeFast(buf, m) {
		return nil
	}
	size := binary.Size(m)
	h := Header{Magic: Magic, Version: Version, Type: uint16(m.Type()), Len: uint32(size)}
	if _, err := binary.Encode(buf, binary.LittleEndian, &h); err != nil {
		return fmt.Errorf("encode header: %w", err)
	}
	if _, err := binary.Encode(buf[HeaderSize:], binary.LittleEndian, m); err != nil {
		return fmt.Errorf("encode %T: %w", m, err)
	}
	return nil
}

// Decode parses one frame.
func Decode(frame []byte) (Message, error) {
	if len(frame) != FrameSize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrFrame, len(frame), FrameSize)
	}
	le := binary.LittleEndian
	h := Header{Magic: le.Uint32(frame), Version: le.Uint16(frame[4:]), Type: le.Uint16(frame[6:]),
		Len: le.Uint32(frame[8:]), Reserved: le.Uint32(frame[12:])}
	switch {
	case h.Magic != Magic:
		return nil, fmt.Errorf("%w: magic %#x, want %#x", ErrFrame, h.Magic, Magic)
	case h.Version != Version:
		return nil, fmt.Errorf("%w: protocol version %d, this side speaks %d", ErrFrame, h.Version, Version)
	case h.Reserved != 0:
		return nil, fmt.Errorf("%w: reserved header field %#x", ErrFrame, h.Reserved)
	}
	m, size, err := decodePayload(Type(h.Type), h.Len, frame[HeaderSize:])
	if err != nil {
		return nil, err
	}
	for _, b := range frame[HeaderSize+size:] {
		if b != 0 {
			return nil, fmt.Errorf("%w: %s: non-zero padding", ErrFrame, nameOf(m))
		}
	}
	if err := validate(m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFrame, nameOf(m), err)
	}
	return m, nil
}

func nameOf(m Message) string {
	s, _ := spec(m.Type())
	return s.Name
}

// decodePayload decodes a message of type t whose header says it is n bytes.
func decodePayload(t Type, n uint32, p []byte) (m Message, size int, err error) {
	if m = decodeFast(t, p, n); m != nil {
		size = encodedSize(m)
	} else {
		s, ok := spec(t)
		if !ok {
			return nil, 0, fmt.Errorf("%w: unknown message type %d", ErrFrame, t)
		}
		m = s.New()
		size = binary.Size(m)
		if n == uint32(size) {
			if _, err := binary.Decode(p, binary.LittleEndian, m); err != nil {
				return nil, 0, fmt.Errorf("%w: %s: %w", ErrFrame, s.Name, err)
			}
		}
	}
	if n != uint32(size) {
		if g, ok := m.(*Grant); ok {
			if n == uint32(binary.Size(g)) {
				return nil, 0, fmt.Errorf("%w: grant of %d bytes with sent_at_ns 0", ErrFrame, n)
			}
			return nil, 0, fmt.Errorf("%w: grant of %d bytes, want %d or %d", ErrFrame, n, GrantSizeNoSentAt, binary.Size(g))
		}
		return nil, 0, fmt.Errorf("%w: %s of %d bytes, want %d", ErrFrame, nameOf(m), n, size)
	}
	return m, size, nil
}

// encodedSize is the size of m on the wire: a grant without SentAtNs is
// GrantSizeNoSentAt bytes.
func encodedSize(m Message) int {
	if g, ok := m.(*Grant); ok && g.SentAtNs == 0 {
		return int(GrantSizeNoSentAt)
	}
	return binary.Size(m)
}

func validate(m Message) error {
	check := func(reserved, flags, known uint32) error {
		if reserved != 0 {
			return fmt.Errorf("reserved field %#x", reserved)
		}
		if flags&^known != 0 {
			return fmt.Errorf("unknown flags %#x", flags&^known)
		}
		return nil
	}
	switch m := m.(type) {
	case *Hello:
		return check(m.Reserved, 0, 0)
	case *Welcome:
		if err := checkString(m.Group[:]); err != nil {
			return fmt.Errorf("group: %w", err)
		}
		return check(m.Reserved, m.Features, FeatureRevoke|FeatureRenew|FeatureSentAt)
	case *Acquire:
		return check(m.Reserved, m.Flags, 0)
	case *Grant:
		return check(m.Reserved, m.Flags, GrantPreempt|GrantAlone|GrantRenewal)
	case *Release:
		return check(m.Reserved, m.Flags, ReleaseMore)
	case *Revoke:
		if m.Reason < RevokeSliceEnd || m.Reason > RevokeExpired {
			return fmt.Errorf("unknown revoke reason %d", m.Reason)
		}
		return check(m.Reserved, 0, 0)
	case *Error:
		if err := checkString(m.Message[:]); err != nil {
			return fmt.Errorf("message: %w", err)
		}
		return check(m.Reserved, 0, 0)
	case *Borrow:
		return check(m.Reserved, m.Flags, BorrowReclaim)
	case *Lend:
		if err := checkString(m.Message[:]); err != nil {
			return fmt.Errorf("message: %w", err)
		}
		if m.Status < LendGranted || m.Status > LendUnknown {
			return fmt.Errorf("unknown lend status %d", m.Status)
		}
		return check(m.Reserved, 0, 0)
	case *Spill:
		if m.Reserved != 0 {
			return fmt.Errorf("reserved field %#x", m.Reserved)
		}
		return nil
	}
	return fmt.Errorf("unknown message %T", m)
}

// checkString accepts printable UTF-8 followed by NUL padding.
func checkString(b []byte) error {
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return errors.New("not NUL-terminated")
	}
	if bytes.ContainsFunc(b[n:], func(r rune) bool { return r != 0 }) {
		return errors.New("bytes after the terminating NUL")
	}
	if !utf8.Valid(b[:n]) || bytes.ContainsFunc(b[:n], func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errors.New("not printable UTF-8")
	}
	return nil
}

// SetString copies s into a NUL-padded field, cutting it at a UTF-8 boundary to
// leave room for the terminating NUL.
func SetString(dst []byte, s string) {
	clear(dst)
	if len(s) >= len(dst) {
		s = s[:len(dst)-1]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	copy(dst, s)
}

// String returns the text of a NUL-padded field.
func String(b []byte) string {
	if n := bytes.IndexByte(b, 0); n >= 0 {
		b = b[:n]
	}
	return string(b)
}
