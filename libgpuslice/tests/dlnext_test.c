/* SPDX-License-Identifier: Apache-2.0
 * Our dlsym must not change what RTLD_NEXT and RTLD_DEFAULT mean for the
 * caller: lookups of names we do not hook are tail calls into libc's dlsym.
 * Linked: libgpuslice, then libgsnext_a, then libgsnext_b. */
#include <dlfcn.h>

#include "check.h"

int gs_next_call(void);
int gs_next_probe(void);

int main(void)
{
	CHECK_EQ(gs_next_probe(), 'A');
	CHECK_EQ(gs_next_call(), 'B'); /* next after A, not next after libgpuslice */
	int (*first)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gs_next_probe");
	CHECK(first != NULL && first() == 'A');
	int (*after_main)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gs_next_probe");
	CHECK(after_main != NULL && after_main() == 'A');
	CHECK(dlsym(RTLD_DEFAULT, "gs_no_such_symbol") == NULL);
	fprintf(stderr, "dlnext_test: ok\n");
	return 0;
}
