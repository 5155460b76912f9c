package proto

// The messages. Every field is a fixed-size integer or byte array, little-endian
// on the wire, laid out without padding (each field naturally aligned). The C
// header include/gpuslice/proto.h is generated from these definitions: change
// them here, bump Version when the layout changes, and run `go generate`.
// Tags: `doc` is copied into the header; `c:"string"` makes a byte array a
// NUL-padded char array.

// Hello is the client's first message on a new connection.
type Hello struct {
	Features uint32 `doc:"GS_FEATURE_* bits the client understands"`
	Reserved uint32 `doc:"zero"`
}

// Welcome answers Hello: the daemon accepted the client into a group.
type Welcome struct {
	Features uint32   `doc:"GS_FEATURE_* bits both sides understand"`
	Reserved uint32   `doc:"zero"`
	PeriodNs uint64   `doc:"the scheduling period, informational"`
	Group    [64]byte `doc:"the group the daemon placed the caller in" c:"string"`
}

// Acquire asks for the GPU: the client has work to launch.
type Acquire struct {
	GPU      UUID   `doc:"the GPU, as the 16 bytes of cuDeviceGetUuid"`
	Flags    uint32 `doc:"zero"`
	Reserved uint32 `doc:"zero"`
}

// Grant gives the client the GPU for ValidNs from when the daemon sent it.
// SentAtNs says when that was on the daemon's clock; it is on the wire only
// for clients that announce FeatureSentAt (the message is then Size bytes;
// without it, GrantSizeNoSentAt, and SentAtNs is 0). GrantEnd is when the
// grant ends for its reader.
type Grant struct {
	GPU      UUID   `doc:"the GPU"`
	Seq      uint64 `doc:"grant number, echoed by Release; revokes name it too"`
	SliceNs  uint64 `doc:"the group's own slice; time past it is borrowed from its burst buffer"`
	ValidNs  uint64 `doc:"the grant ends this long after it was sent"`
	Flags    uint32 `doc:"GS_GRANT_* bits"`
	Reserved uint32 `doc:"zero"`
	SentAtNs uint64 `doc:"when valid_ns counts from: the daemon's CLOCK_MONOTONIC ns; only in grants of sizeof (GS_FEATURE_SENT_AT), never 0 there; 0 in a grant of GS_GRANT_SIZE_NO_SENT_AT bytes"`
}

// Release hands the GPU back after the client's outstanding work finished.
type Release struct {
	GPU      UUID   `doc:"the GPU"`
	Seq      uint64 `doc:"the grant released"`
	Flags    uint32 `doc:"GS_RELEASE_* bits"`
	Reserved uint32 `doc:"zero"`
}

// Revoke tells the holder to finish its outstanding work and release now.
type Revoke struct {
	GPU      UUID   `doc:"the GPU"`
	Seq      uint64 `doc:"the grant revoked"`
	Reason   uint32 `doc:"GS_REVOKE_* value"`
	Reserved uint32 `doc:"zero"`
}

// Error reports a refused request; the daemon closes the connection after it.
type Error struct {
	Code     uint32   `doc:"GS_ERR_* value"`
	Reserved uint32   `doc:"zero"`
	Message  [96]byte `doc:"one line, NUL-padded" c:"string"`
}

// Borrow asks for an allocation past the group's allowance on a GPU (elastic
// memory), or with BorrowReclaim, for room for an allocation within the
// group's guarantee that the device refused.
type Borrow struct {
	GPU      UUID   `doc:"the GPU"`
	Size     uint64 `doc:"bytes of the allocation"`
	Flags    uint32 `doc:"GS_BORROW_* bits"`
	Reserved uint32 `doc:"zero"`
}

// Lend answers Borrow. The new allowance is already in the group's state file.
type Lend struct {
	GPU       UUID     `doc:"the GPU"`
	Allowance uint64   `doc:"bytes the group may hold without asking"`
	Available uint64   `doc:"bytes the group could hold now (guarantee plus what it could borrow)"`
	Status    uint32   `doc:"GS_LEND_* value"`
	Reserved  uint32   `doc:"zero"`
	Message   [72]byte `doc:"why, when refused; NUL-padded" c:"string"`
}

// Spill asks the client to move Bytes of its borrowed managed memory on a GPU
// to host memory (never below its guarantee).
type Spill struct {
	GPU      UUID   `doc:"the GPU"`
	Bytes    uint64 `doc:"bytes to move"`
	Reserved uint64 `doc:"zero"`
}

// Type returns the message's type code.
func (*Borrow) Type() Type { return TypeBorrow }

// Type returns the message's type code.
func (*Lend) Type() Type { return TypeLend }

// Type returns the message's type code.
func (*Spill) Type() Type { return TypeSpill }

// Type returns the message's type code.
func (*Hello) Type() Type { return TypeHello }

// Type returns the message's type code.
func (*Welcome) Type() Type { return TypeWelcome }

// Type returns the message's type code.
func (*Acquire) Type() Type { return TypeAcquire }

// Type returns the message's type code.
func (*Grant) Type() Type { return TypeGrant }

// Type returns the message's type code.
func (*Release) Type() Type { return TypeRelease }

// Type returns the message's type code.
func (*Revoke) Type() Type { return TypeRevoke }

// Type returns the message's type code.
func (*Error) Type() Type { return TypeError }
