/*
 * check.h: CHECK, the assertion of the C test programs: prints "FAIL line
 * N: " and the message, and exits 1.
 */
#ifndef SROCE_CHECK_H
#define SROCE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			printf("FAIL line %d: ", __LINE__);               \
			printf(__VA_ARGS__);                              \
			printf("\n");                                     \
			exit(1);                                          \
		}                                                         \
	} while (0)

#endif
