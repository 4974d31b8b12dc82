/* hf_write.c — see export.h.  Being written: refuses for now. */
#include "export/export.h"

#include "base/error.h"

int lmp_export_hf(lmp_ctx *ctx, const lmp_model *m, const lmp_block *blocks, const lmp_export_opts *o)
{
    (void)ctx;
    (void)m;
    (void)blocks;
    return lmp_fail(LMP_EUNSUPPORTED, "%s: this export format is not written yet", o->path);
}
