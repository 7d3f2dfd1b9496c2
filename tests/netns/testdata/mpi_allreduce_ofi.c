/*
 * mpi_allreduce_ofi.c: every rank contributes element i times (rank + 1) to a
 * 2 MiB MPI_Allreduce(MPI_SUM) and checks every element of the result;
 * each rank then prints "allreduce ok rank R of N daemon $SROCE_SOCKET".
 * Compiled with mpicc by apps_ofi_test.go.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	const int n = 1 << 18;
	int rank, size;
	long *in, *out, f;
	const char *sock = getenv("SROCE_SOCKET");

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	in = malloc(n * sizeof(*in));
	out = malloc(n * sizeof(*out));
	if (!in || !out)
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (int i = 0; i < n; i++)
		in[i] = (long)i * (rank + 1);
	MPI_Allreduce(in, out, n, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	f = (long)size * (size + 1) / 2;
	for (int i = 0; i < n; i++) {
		if (out[i] != (long)i * f) {
			fprintf(stderr, "rank %d: element %d is %ld, want %ld\n", rank, i, out[i], (long)i * f);
			MPI_Abort(MPI_COMM_WORLD, 3);
		}
	}
	printf("allreduce ok rank %d of %d daemon %s\n", rank, size, sock ? sock : "(none)");
	free(in);
	free(out);
	MPI_Finalize();
	return 0;
}
