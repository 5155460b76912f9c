/* SPDX-License-Identifier: Apache-2.0
 * Minimal assertions for the C tests: a failed check prints where and why,
 * then exits 1 (sanitizers catch the rest). */
#ifndef GS_TEST_CHECK_H
#define GS_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

#define CHECK_EQ(a, b)                                                                                                \
	do {                                                                                                          \
		unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);                        \
		if (a_ != b_) {                                                                                       \
			fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %llu, %s = %llu\n", __FILE__, __LINE__, #a, a_, \
				#b, b_);                                                                              \
			exit(1);                                                                                      \
		}                                                                                                     \
	} while (0)

#define RUN(test)                                   \
	do {                                        \
		fprintf(stderr, "--- %s\n", #test); \
		test();                             \
	} while (0)

#endif /* GS_TEST_CHECK_H */
