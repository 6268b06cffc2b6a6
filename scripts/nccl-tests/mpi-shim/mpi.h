/* The part of MPI that nccl-tests calls, for scripts/nccl-tests/mpi-shim/mpi_shim.c: enough to
 * run its MPI build as one process per GPU on one machine without an MPI installation. Not a
 * general MPI: one communicator (splits must keep every rank together), blocking calls only. */
#ifndef OXCCL_MPI_SHIM_H
#define OXCCL_MPI_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;

#define MPI_SUCCESS 0
#define MPI_COMM_WORLD ((MPI_Comm)1)
#define MPI_IN_PLACE ((void*)1)

/* 0 is what nccl-tests' `MPI_Datatype()` and `MPI_Op()` give: no type, no operator. */
#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_BYTE ((MPI_Datatype)1)
#define MPI_INT ((MPI_Datatype)2)
#define MPI_LONG ((MPI_Datatype)3)
#define MPI_LONG_LONG ((MPI_Datatype)4)
#define MPI_INT64_T ((MPI_Datatype)5)
#define MPI_DOUBLE ((MPI_Datatype)6)

#define MPI_SUM ((MPI_Op)1)
#define MPI_MIN ((MPI_Op)2)
#define MPI_MAX ((MPI_Op)3)

int MPI_Init(int* argc, char*** argv);
int MPI_Finalize(void);
int MPI_Comm_size(MPI_Comm comm, int* size);
int MPI_Comm_rank(MPI_Comm comm, int* rank);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out);
int MPI_Comm_free(MPI_Comm* comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm);
int MPI_Gather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount,
               MPI_Datatype rtype, int root, MPI_Comm comm);
int MPI_Allgather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount,
                  MPI_Datatype rtype, MPI_Comm comm);

#ifdef __cplusplus
}
#endif

#endif
