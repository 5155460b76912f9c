/* SPDX-License-Identifier: Apache-2.0
 * Unit tests of how the gate times a grant: gs_grant_end (the same table as
 * Go's proto.TestGrantEnd) and both sizes of grant frame through gs_wire_recv
 * on a real SOCK_SEQPACKET pair. The time namespace check's parser is tested
 * with the other parsers (unit_parse_test.c). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../src/gate_wire.h"
#include "check.h"

#define MS 1000000ull

static void test_grant_end(void)
{
	const uint64_t read = 1000000 * MS, age = GS_GRANT_SENT_AT_MAX_AGE_MS * MS;
	static const uint64_t never = UINT64_MAX;
	const struct {
		const char *name;
		uint64_t sent_at, valid, want;
	} cases[] = {
		{"older daemon: no sent_at", 0, 8 * MS, read + 8 * MS},
		{"read at once", read, 8 * MS, read + 8 * MS},
		{"read 5 ms late: ends by the daemon's clock", read - 5 * MS, 8 * MS, read + 3 * MS},
		{"read after the daemon's end: already over", read - 20 * MS, 8 * MS, read - 12 * MS},
		{"read 5 s late, the daemon's end long past", read - 5000 * MS, 8 * MS, read - 4992 * MS},
		{"read at the age bound", read - age, 8 * MS, read - age + 8 * MS},
		{"older than the bound: another clock", read - age - 1, 8 * MS, read + 8 * MS},
		{"from the future: another clock", read + 1, 8 * MS, read + 8 * MS},
		{"zero valid", read - MS, 0, read - MS},
		{"saturates", read - MS, never, never},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t end = gs_grant_end(read, cases[i].sent_at, cases[i].valid);
		if (end != cases[i].want)
			fprintf(stderr, "case %s\n", cases[i].name);
		CHECK_EQ(end, cases[i].want);
		CHECK(end <= gs_grant_end(read, 0, cases[i].valid));
	}
}

static int send_raw(int fd, const struct gs_frame *f)
{
	return send(fd, f, sizeof(*f), 0) == (ssize_t)sizeof(*f) ? 0 : -1;
}

/* A grant of GS_GRANT_SIZE_NO_SENT_AT bytes (an older daemon) reads with
 * sent_at_ns 0 whatever its padding holds; one of sizeof has it; any other
 * size is refused. */
static void test_wire_grant_sizes(void)
{
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
	struct gs_msg_grant g = {.seq = 7, .valid_ns = 8 * MS, .sent_at_ns = 123456789};
	struct gs_frame f, got;

	gs_wire_frame(&f, GS_MSG_GRANT, &g, GS_GRANT_SIZE_NO_SENT_AT);
	f.msg.grant.sent_at_ns = 99; /* padding an old reader never looks at */
	CHECK(send_raw(sv[0], &f) == 0);
	CHECK(gs_wire_recv(sv[1], &got, 0) == 0);
	CHECK_EQ(got.msg.grant.seq, 7);
	CHECK_EQ(got.msg.grant.valid_ns, 8 * MS);
	CHECK_EQ(got.msg.grant.sent_at_ns, 0);

	gs_wire_frame(&f, GS_MSG_GRANT, &g, sizeof(g));
	CHECK(send_raw(sv[0], &f) == 0);
	CHECK(gs_wire_recv(sv[1], &got, 0) == 0);
	CHECK_EQ(got.msg.grant.sent_at_ns, 123456789);

	gs_wire_frame(&f, GS_MSG_GRANT, &g, GS_GRANT_SIZE_NO_SENT_AT + 4);
	CHECK(send_raw(sv[0], &f) == 0);
	errno = 0;
	CHECK(gs_wire_recv(sv[1], &got, 0) == -1 && errno == EPROTO);
	CHECK(!gs_wire_len_ok(GS_MSG_REVOKE, GS_GRANT_SIZE_NO_SENT_AT));
	CHECK(!gs_wire_len_ok(GS_MSG_ACQUIRE, sizeof(struct gs_msg_acquire))); /* not one the daemon sends */
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	RUN(test_grant_end);
	RUN(test_wire_grant_sizes);
	fprintf(stderr, "unit_grant_test: ok\n");
	return 0;
}
