/* fuzz_resume.c — libFuzzer entry for the --resume readers: compare's (core/report/report_resume.c,
 * lmp_report_resume) and analyze's (core/analyze/analyze_resume.c, lmp_analysis_resume).  The
 * first byte picks one; the rest is the earlier --json file.  Each is given a run of its own:
 * compare with variants "fp32", "w8" and "w4", one evaluation text "eval.txt" of 3 windows / 189
 * scored tokens and LAMBADA; analyze with units "block 0" .. "block 3" of variant "w4"
 * (restore-one per block, metric kld).  The fingerprint both expect is "00000000fuzzf00d" (put it
 * in the seeds).  A read must fail with a message, or take back numbers that a run could have
 * printed: counts within what the run evaluates, sums finite.  No crash, leak or hang. */
#include <math.h>
#include <string.h>

#include "analyze/analyze.h"
#include "base/error.h"
#include "config/config.h"
#include "formats/json.h"
#include "report/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FINGERPRINT "00000000fuzzf00d"

static void compare_resume(const lmp_json *doc)
{
    static lmp_variant vs[3] = {{.name = "fp32"}, {.name = "w8"}, {.name = "w4"}};
    static lmp_run_config c = {.path = "fuzz.cfg", .lambada = "lambada.jsonl", .n_eval_texts = 1};
    lmp_text_info text = {.path = "eval.txt", .key = "eval.txt", .tokens = 200, .windows = 3, .scored = 189};
    lmp_score scores[3][1];
    memset(scores, 0, sizeof scores);
    lmp_variant_result res[3];
    memset(res, 0, sizeof res);
    for (int i = 0; i < 3; i++) res[i].v = &vs[i], res[i].scores = scores[i];
    lmp_report r = {.cfg = &c, .n_texts = 1, .texts = &text, .n_results = 3, .results = res};
    memcpy(r.fingerprint, FINGERPRINT, 17);
    if (lmp_report_resume(&r, doc, "fuzz.json") != 0) {
        if (!lmp_last_error()[0]) __builtin_trap();
        return;
    }
    for (int i = 0; i < 3; i++) {
        if (!res[i].done) continue;
        if (res[i].prior == NULL) __builtin_trap();
        const lmp_score *s = &res[i].scores[0];
        if (s->windows != text.windows || s->scored != text.scored) __builtin_trap();
        (void)lmp_score_ppl(s);
    }
}

static void analyze_resume(const lmp_json *doc)
{
    static lmp_variant v = {.name = "w4"};
    static lmp_run_config c = {.path = "fuzz.cfg"};
    lmp_an_unit units[4];
    memset(units, 0, sizeof units);
    for (int u = 0; u < 4; u++) snprintf(units[u].name, sizeof units[u].name, "block %d", u);
    uint8_t finished[4] = {0};
    lmp_analysis a = {.c = &c, .v = &v, .n_units = 4, .units = units, .unit_finished = finished};
    a.o.mode = LMP_AN_RESTORE_ONE;
    a.o.gran = LMP_AN_BLOCK;
    a.o.metric = LMP_AN_KLD;
    memcpy(a.fingerprint, FINGERPRINT, 17);
    if (lmp_analysis_resume(&a, doc, "fuzz.json") != 0) {
        if (!lmp_last_error()[0]) __builtin_trap();
        return;
    }
    int n = 0;
    for (int u = 0; u < 4; u++) {
        if (!finished[u]) continue;
        n++;
        const lmp_bcache_result *r = &units[u].res;
        if (!isfinite(r->score.nll_sum) || !isfinite(r->score.kld_sum) || r->score.top1_hits > r->score.scored ||
            r->score.scored < 0 || r->lambada.correct > r->lambada.passages)
            __builtin_trap();
    }
    if (n != a.n_finished || n != a.n_resumed) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    lmp_json *doc = NULL;
    if (lmp_json_parse((const char *)data + 1, size - 1, "fuzz.json", &doc) != 0) return 0;
    if (data[0] & 1) analyze_resume(doc);
    else compare_resume(doc);
    lmp_json_free(doc);
    return 0;
}
