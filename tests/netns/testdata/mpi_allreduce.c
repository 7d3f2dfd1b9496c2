/*
 * mpi_allreduce.c: every rank contributes a vector that depends on its rank;
 * MPI_Allreduce sums them (MPI_SUM) and takes the maximum (MPI_MAX), and
 * every rank checks every element against the closed form. Rank 0 prints
 * "allreduce ok RANKS COUNT". Built by tests/netns/apps_ucx_test.go with
 * mpicc.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	static const int counts[] = {1, 1000, 100000};
	int rank, n;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		int c = counts[k];
		long *in = malloc(c * sizeof(long)), *sum = malloc(c * sizeof(long)),
		     *max = malloc(c * sizeof(long));
		for (int i = 0; i < c; i++)
			in[i] = (long)i * (rank + 1) + rank;
		MPI_Allreduce(in, sum, c, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
		MPI_Allreduce(in, max, c, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
		/* sum over r of i*(r+1)+r = i*n(n+1)/2 + n(n-1)/2; max at r = n-1 */
		for (int i = 0; i < c; i++) {
			long want = (long)i * n * (n + 1) / 2 + (long)n * (n - 1) / 2;
			long wmax = (long)i * n + n - 1;
			if (sum[i] != want || max[i] != wmax) {
				fprintf(stderr, "allreduce: rank %d count %d element %d: sum %ld (want %ld), max %ld (want %ld)\n",
					rank, c, i, sum[i], want, max[i], wmax);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
		}
		free(in);
		free(sum);
		free(max);
		if (rank == 0)
			printf("allreduce ok %d %d\n", n, c);
	}
	MPI_Finalize();
	return 0;
}
