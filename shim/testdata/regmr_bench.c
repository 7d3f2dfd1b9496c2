/*
 * regmr_bench.c: what ibv_reg_mr and ibv_dereg_mr cost on the drop-in
 * library, for buffers of several sizes (posix_memalign, touched first).
 * Usage: regmr_bench DEVICE. Prints one line per size:
 *   SIZE REG_US DEREG_US REG_GBPS
 * each the average of its repetitions, the buffer registered afresh each
 * time (the library remaps its pages onto its memfd on the first
 * registration of a range only).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: regmr_bench DEVICE\n");
		return 2;
	}
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0)
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "cannot open %s\n", argv[1]);
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	size_t sizes[] = {4096, 1 << 20, 64 << 20};
	int reps[] = {200, 50, 5};
	for (int s = 0; s < 3; s++) {
		double reg = 0, dereg = 0;
		for (int r = 0; r < reps[s]; r++) {
			void *buf;
			if (posix_memalign(&buf, 4096, sizes[s]))
				return 1;
			memset(buf, r, sizes[s]);
			double t0 = now_us();
			struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizes[s], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
			double t1 = now_us();
			if (!mr) {
				perror("ibv_reg_mr");
				return 1;
			}
			if (((unsigned char *)buf)[sizes[s] - 1] != (unsigned char)r) {
				fprintf(stderr, "contents lost by the registration\n");
				return 1;
			}
			ibv_dereg_mr(mr);
			double t2 = now_us();
			reg += t1 - t0;
			dereg += t2 - t1;
			free(buf);
		}
		reg /= reps[s];
		dereg /= reps[s];
		printf("%zu %.1f %.1f %.2f\n", sizes[s], reg, dereg, sizes[s] / reg / 1e3);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
