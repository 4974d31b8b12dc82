/* distrib.h — one run spread over the processes of an MPI job (`mpirun -n K lmpress compare`).
 *
 * lmpress starts MPI only when a launcher started it (mpirun, mpiexec or Slurm's srun set their
 * PMI/PMIx variables) and it was built with MPI (CMake found Open MPI; LMP_HAVE_MPI).  Otherwise
 * there is no lmp_dist: every function below takes NULL as "one process" and the run is the
 * plain one.  Without MPI the core is built with distrib_none.c and needs no MPI at all.
 *
 * The model: rank 0 reads and checks everything, computes what all jobs share once and
 * broadcasts it; then the jobs (compare's variants, analyze's units) go out one at a time to
 * whichever rank asks next, rank 0 included, and every result comes back to rank 0, which
 * writes the reports.  docs/distributed.md says what travels and how much. */
#ifndef LMP_CORE_DISTRIB_H
#define LMP_CORE_DISTRIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct lmp_dist lmp_dist;

/* The number of processes an MPI launcher started this one among, from its environment: Open
 * MPI's mpirun (OMPI_COMM_WORLD_SIZE), MPICH-style PMI (PMI_SIZE), Slurm with PMIx (SLURM_NTASKS
 * beside PMIX_RANK); 0 when no launcher started it. */
static inline int lmp_dist_launched(void)
{
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (!n && getenv("PMIX_RANK")) n = getenv("SLURM_NTASKS");
    if (!n) return getenv("PMIX_RANK") ? 1 : 0;
    int k = atoi(n);
    return k > 0 ? k : 1;
}

/* Starts MPI when this process was launched by an MPI launcher and lmpress has MPI; *out is then
 * the job's handle, else NULL.  Launched by one but built without MPI: an error, so that K copies
 * of the whole run do not each write the same files.  Called before the plugins load: it sets
 * OPENBLAS_NUM_THREADS (unless the user did) to the cores per rank on this node. */
int lmp_dist_start(int *argc, char ***argv, lmp_dist **out);
/* Ends MPI (d may be NULL).  code: this rank's exit code; returns the job's, the largest. */
int lmp_dist_end(lmp_dist *d, int code);

int lmp_dist_rank(const lmp_dist *d); /* 0 for NULL */
int lmp_dist_size(const lmp_dist *d); /* 1 for NULL */

/* Every rank calls it with its status; each gets back the lowest rank's non-zero status (0 when
 * all were 0).  A rank whose own st was 0 gets the message "rank R failed" recorded. */
int lmp_dist_agree(lmp_dist *d, int st);

/* Rank 0's buf[bytes] copied to every rank's buf (any size: sent in pieces under 1 GiB). */
int lmp_dist_bcast(lmp_dist *d, void *buf, int64_t bytes);

/* Jobs 0..n-1, each run once by whichever rank asks first.  Every rank calls
 * lmp_dist_run_jobs with the same n.  On rank 0, `take` sees each job's outcome, one call at a
 * time (from a second thread that answers the other ranks while rank 0 runs jobs itself). */
typedef struct lmp_dist_jobs {
    int n;
    /* Runs job j on this rank; on success *out is a malloc'd result of *out_bytes. */
    int (*run)(void *ud, int j, void **out, size_t *out_bytes);
    /* Rank 0: job j finished on `rank` (res[bytes]), or failed there (st < 0, msg its error).
     * A non-zero return stops the handing out of jobs and becomes the run's status. */
    int (*take)(void *ud, int j, int rank, int st, const char *msg, const void *res, size_t bytes);
    void *ud;
} lmp_dist_jobs;

/* Hands out the jobs until all are done or one failed (then no new job goes out, and those
 * running finish and are taken).  Returns on every rank the first failure's status (its message
 * names the rank and the job), else 0. */
int lmp_dist_run_jobs(lmp_dist *d, const lmp_dist_jobs *jobs);

#endif
