/*
 * mpi_pingpong_ofi.c: two MPI ranks bounce a buffer of each size from 1 byte
 * to 1 MiB, rank 1 adding one to every byte, rank 0 checking every byte
 * of every round trip. Each rank prints the daemon it uses
 * ($SROCE_SOCKET); rank 0 prints the round-trip time per size and
 * "pingpong ok". Compiled with mpicc by apps_ofi_test.go.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	const int max = 1 << 20, iters = 50;
	int rank, size;
	unsigned char *buf;
	const char *sock = getenv("SROCE_SOCKET");

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		fprintf(stderr, "run with two ranks, not %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	printf("rank %d daemon %s\n", rank, sock ? sock : "(none)");
	fflush(stdout);
	buf = malloc(max);
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (int len = 1; len <= max; len *= 16) {
		double t0 = MPI_Wtime();

		for (int i = 0; i < iters; i++) {
			if (rank == 0) {
				for (int k = 0; k < len; k++)
					buf[k] = (unsigned char)(k + i);
				MPI_Send(buf, len, MPI_BYTE, 1, i, MPI_COMM_WORLD);
				MPI_Recv(buf, len, MPI_BYTE, 1, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int k = 0; k < len; k++) {
					if (buf[k] != (unsigned char)(k + i + 1)) {
						fprintf(stderr, "round trip %d of %d bytes: byte %d is %u, want %u\n",
							i, len, k, buf[k], (unsigned char)(k + i + 1));
						MPI_Abort(MPI_COMM_WORLD, 3);
					}
				}
			} else {
				MPI_Recv(buf, len, MPI_BYTE, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (int k = 0; k < len; k++)
					buf[k]++;
				MPI_Send(buf, len, MPI_BYTE, 0, i, MPI_COMM_WORLD);
			}
		}
		if (rank == 0)
			printf("pingpong %d bytes: %.1f us per round trip\n", len,
			       (MPI_Wtime() - t0) / iters * 1e6);
	}
	if (rank == 0)
		printf("pingpong ok\n");
	free(buf);
	MPI_Finalize();
	return 0;
}
