/* SPDX-License-Identifier: Apache-2.0
 * Two tiny libraries (built with -DWHICH='A' and 'B') defining the same
 * symbol: A's gs_next_call() asks dlsym(RTLD_NEXT) for the next definition,
 * which must be B's even though our dlsym sits in between. */
#include <dlfcn.h>
#include <stddef.h>

__attribute__((visibility("default"))) int gs_next_probe(void)
{
	return WHICH;
}

__attribute__((visibility("default"))) int gs_next_call(void)
{
	int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gs_next_probe");
	return next != NULL ? next() : 0;
}
