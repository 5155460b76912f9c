package proto

// GrantEnd is when a grant read at readNs ends for its reader, on
// CLOCK_MONOTONIC (ns), and when it started: by the daemon's clock,
// sentAtNs + validNs, where the grant says when it was sent and that instant
// is plausible on the reader's clock (not after the reading, at most
// SentAtMaxAgeMs before it); otherwise (an older daemon, a clock in another
// time namespace) validNs from the reading. The daemon's end is never later
// than the reading's (a grant cannot be read before it is sent), so a grant
// read late ends when the daemon ends it, not validNs after the reading. The
// end saturates at the clock's maximum. libgpuslice's gs_grant_end
// (libgpuslice/src/gate_wire.h) is the same function.
func GrantEnd(readNs, sentAtNs, validNs uint64) (startNs, endNs uint64) {
	startNs = readNs
	if sentAtNs != 0 && sentAtNs <= readNs && readNs-sentAtNs <= uint64(SentAtMaxAgeMs)*1e6 {
		startNs = sentAtNs
	}
	endNs = startNs + validNs
	if endNs < startNs {
		endNs = ^uint64(0)
	}
	return startNs, endNs
}
