/* distrib_none.c — distrib.h in a build without MPI: there is never more than one process. */
#include "distrib/distrib.h"

#include "base/error.h"

int lmp_dist_start(int *argc, char ***argv, lmp_dist **out)
{
    (void)argc;
    (void)argv;
    *out = NULL;
    /* one process under a launcher (srun -n 1) is just a run; K copies of it would each write
     * the same files */
    if (lmp_dist_launched() > 1)
        return lmp_fail(LMP_EINVAL, "started as one of %d processes by an MPI launcher, but this lmpress "
                        "was built without MPI: install Open MPI (libopenmpi-dev), rebuild, or run one process",
                        lmp_dist_launched());
    return 0;
}

int lmp_dist_end(lmp_dist *d, int code) { (void)d; return code; }
int lmp_dist_rank(const lmp_dist *d) { (void)d; return 0; }
int lmp_dist_size(const lmp_dist *d) { (void)d; return 1; }
int lmp_dist_agree(lmp_dist *d, int st) { (void)d; return st; }
int lmp_dist_bcast(lmp_dist *d, void *buf, int64_t bytes) { (void)d; (void)buf; (void)bytes; return 0; }

int lmp_dist_run_jobs(lmp_dist *d, const lmp_dist_jobs *J)
{
    (void)d;
    for (int j = 0; j < J->n; j++) {
        void *res = NULL;
        size_t bytes = 0;
        int st = J->run(J->ud, j, &res, &bytes);
        int rc = J->take(J->ud, j, 0, st, st ? lmp_last_error() : "", res, bytes);
        free(res);
        if (st || rc) return st ? st : rc;
    }
    return 0;
}
