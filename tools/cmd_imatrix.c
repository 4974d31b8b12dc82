/* cmd_imatrix.c — `lmpress imatrix` (cmd_imatrix.h). */
#include "cmd_imatrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/outfile.h"
#include "base/textfile.h"
#include "cli.h"
#include "compress/imatrix_collect.h"
#include "export/imatrix_write.h"

const char *const usage_imatrix =
    "usage: lmpress imatrix [MODEL] --calib TEXT -o|--output F.gguf [-c|--ctx-size C] [--chunks N]\n"
    "                       [--tokenizer FILE] [--backend NAME] [--allow-plugin DIR]... [--plugin-path DIR]...\n"
    "\n"
    "Writes the importance matrix of MODEL on TEXT to F.gguf in llama.cpp's GGUF form, the file\n"
    "llama-imatrix writes and llama-quantize --imatrix reads (and lmpress's importance = \"imatrix\").\n"
    "As llama-imatrix -f TEXT -c C computes it: the file's bytes (one trailing newline dropped, as\n"
    "llama.cpp's -f drops it) tokenized with BOS when the tokenizer adds one, cut into floor(n/C)\n"
    "chunks of C tokens (default 512; --chunks N: the first N), the first token of each chunk\n"
    "replaced by BOS (when the tokenizer adds one); for every block linear, in_sum2 = the sum over\n"
    "every token of every chunk of x^2 of each input, counts = the tokens.  The head\n"
    "(output.weight) is left out, as llama-imatrix leaves it out by default.  Entries are named\n"
    "after the GGUF tensors (blk.N.attn_q.weight ...).  Prints the perplexity of the chunks'\n"
    "second halves, the estimate llama-imatrix prints.  See docs/imatrix.md for the comparison\n"
    "with llama-imatrix's file on SmolLM2.  The file is written through a temporary file.\n";

int cmd_imatrix(lmp_ctx *ctx, int argc, char **argv, const char *default_model)
{
    const char *model = NULL, *calib = NULL, *out = NULL, *tokenizer = NULL, *backend = "cpu";
    int64_t C = 512, max_chunks = 0;
    int bad = 0;
    if (wants_help(argc, argv)) {
        fputs(usage_imatrix, stdout);
        return 0;
    }
    for (int i = 0; i < argc && !bad; i++) {
        const char *v;
        if (strcmp(argv[i], "--calib") == 0) calib = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) out = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--tokenizer") == 0) tokenizer = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--backend") == 0) backend = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--ctx-size") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, argv[i - 1], 2, &C)) return 2;
        } else if (strcmp(argv[i], "--chunks") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--chunks", 1, &max_chunks)) return 2;
        } else if (trust_option(ctx, argc, argv, &i, &bad, 0)) continue;
        else if (argv[i][0] == '-') return usage_error(usage_imatrix, "unknown option %s", argv[i]);
        else if (model) return usage_error(usage_imatrix, "unexpected argument %s", argv[i]);
        else model = argv[i];
    }
    if (bad) return 2;
    if (!calib) return usage_error(usage_imatrix, "%s", "--calib TEXT is required");
    if (!out) return usage_error(usage_imatrix, "%s", "-o F.gguf is required");
    if (!model) model = default_model;
    /* the output is checked before any work, and is none of the inputs */
    const lmp_named_path outs[1] = {{out, "-o"}};
    const lmp_named_path ins[3] = {{model, "the model"}, {calib, "--calib"}, {tokenizer, "--tokenizer"}};
    int st = lmp_outfile_check(out, "-o");
    if (!st) st = lmp_outfile_distinct(outs, 1, ins, 3);
    if (st) return fail();
    direct_run d;
    st = direct_open(ctx, &d, model, tokenizer, backend);
    if (!st && C > d.m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "-c %lld exceeds the model's context of %lld", (long long)C,
                      (long long)d.m->arch.seq_len);
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL, *chunks = NULL;
    int64_t n = 0, n_chunks = 0;
    if (!st) st = lmp_read_file(calib, &text, &len);
    if (!st && len && text[len - 1] == '\n') len--; /* llama.cpp's -f drops one trailing newline */
    const int bos = !st && lmp_tokenizer_adds_bos(d.tok) ? lmp_tokenizer_bos(d.tok) : -1;
    if (!st) st = lmp_tokenize_ex(d.tok, text, len, bos >= 0 ? LMP_TOKENIZE_ADD_BOS : 0u, &ids, &n);
    if (st && text) lmp_fail_prefix(st, "%s", calib);
    if (!st) st = lmp_imatrix_chunks(ids, n, C, max_chunks, bos, &chunks, &n_chunks);
    if (!st && n_chunks == 0)
        st = lmp_fail(LMP_EINVAL, "%s: %lld tokens, too short for one chunk of %lld (-c)", calib, (long long)n,
                      (long long)C);
    lmp_imatrix_sums sums = {0};
    lmp_score ppl = {0};
    if (!st) st = lmp_imatrix_collect(ctx, &d.be, d.m, chunks, n_chunks, C, &sums, &ppl);
    sums.dataset = calib;
    if (!st) st = lmp_imatrix_write(out, &sums);
    if (!st)
        printf("imatrix %s: %lld entries from %lld chunks of %lld tokens of %s (%lld tokens%s); second-half ppl %.4f\n",
               out, (long long)sums.n_entries, (long long)n_chunks, (long long)C, calib, (long long)n,
               bos >= 0 ? ", BOS first in each chunk" : "", lmp_score_ppl(&ppl));
    lmp_imatrix_sums_free(&sums);
    free(chunks);
    free(ids);
    free(text);
    direct_close(&d);
    return st ? fail() : 0;
}
