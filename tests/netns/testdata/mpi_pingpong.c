/*
 * mpi_pingpong.c: two ranks; rank 0 sends a patterned message of each size
 * to rank 1, which checks every byte and sends back its own pattern, which
 * rank 0 checks. Prints one "pingpong SIZE ITERS USEC" line per size (the
 * mean round trip halved), then "pingpong ok". Built by
 * tests/netns/apps_ucx_test.go with mpicc.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(unsigned char *b, int n, int seed)
{
	for (int i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 31 + seed);
}

static int check(const unsigned char *b, int n, int seed)
{
	for (int i = 0; i < n; i++)
		if (b[i] != (unsigned char)(i * 31 + seed))
			return i;
	return -1;
}

int main(int argc, char **argv)
{
	static const int sizes[] = {8, 4096, 65536, 1 << 20};
	int rank, nranks;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2) {
		if (rank == 0)
			fprintf(stderr, "pingpong: needs 2 ranks, got %d\n", nranks);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int peer = 1 - rank;
	unsigned char *out = malloc(1 << 20), *in = malloc(1 << 20);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		int n = sizes[k], iters = n >= 65536 ? 20 : 200;
		double t0 = 0;
		for (int it = 0; it < iters; it++) {
			if (it == 1)
				t0 = MPI_Wtime(); /* the first round trip sets up the path */
			int seed = it * 2 + rank;
			fill(out, n, seed);
			memset(in, 0, n);
			MPI_Status st;
			int got, bad;
			if (rank == 0) {
				MPI_Send(out, n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
				MPI_Recv(in, n, MPI_BYTE, peer, it, MPI_COMM_WORLD, &st);
			} else {
				MPI_Recv(in, n, MPI_BYTE, peer, it, MPI_COMM_WORLD, &st);
				MPI_Send(out, n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
			}
			MPI_Get_count(&st, MPI_BYTE, &got);
			if (got != n || (bad = check(in, n, it * 2 + peer)) >= 0) {
				fprintf(stderr, "pingpong: rank %d size %d iteration %d: got %d bytes, byte %d wrong\n",
					rank, n, it, got, got != n ? -1 : bad);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
		}
		if (rank == 0)
			printf("pingpong %d %d %.2f\n", n, iters - 1,
			       (MPI_Wtime() - t0) * 1e6 / (iters - 1) / 2);
	}
	if (rank == 0)
		printf("pingpong ok\n");
	free(out);
	free(in);
	MPI_Finalize();
	return 0;
}
