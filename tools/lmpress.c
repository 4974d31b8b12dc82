/* lmpress.c — the command-line tool.  Each command parses its options, calls the core, and
 * prints; every failure prints one message (the core's last error) and exits non-zero:
 * 1 for a failed run, 2 for a usage error. */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/outfile.h"
#include "base/outlock.h"
#include "base/suggest.h"
#include "analyze/analyze.h"
#include "base/textfile.h"
#include "compare/compare.h"
#include "distrib/distrib.h"
#include "compress/imatrix_map.h"
#include "config/config.h"
#include "config/config_inputs.h"
#include "eval/lambada.h"
#include "eval/stream.h"
#include "export/export.h"
#include "compare/export_preflight.h"
#include "export/out_dir.h"
#include "model/kv_quant.h"
#include "model/forward.h"
#include "plugin/backend.h"
#include "base/ctx.h"
#include "base/log.h"
#include "plugin/registry.h"
#include "report/table_diff.h"
#include "formats/gguf.h"
#include "formats/llama_logits.h"
#include "text/tokenizer_open.h"
#include "cmd_quantize.h"

#include "cli.h"
#include "cmd_eval_kld.h"
#include "cmd_imatrix.h"

#define DEFAULT_MODEL LMP_DEFAULT_MODEL_DIR "/stories260K.bin"

static const char *const usage_main =
    "usage: lmpress [--quiet | --verbose] COMMAND [ARGS]\n"
    "\n"
    "Compress language models with plugin strategies and compare the variants.\n"
    "\n"
    "commands:\n"
    "  compare CONFIG    compress every variant of CONFIG and print them side by side\n"
    "  run CONFIG        compress and evaluate one variant of CONFIG\n"
    "  quantize MODEL OUT PRESET  one line: MODEL as Q4_K_M, IQ4_NL, ... (OUT.gguf) or W4A16, W8A8 (a folder)\n"
    "  analyze CONFIG    rank one variant's linears by sensitivity; skip lists\n"
    "  check CONFIG      validate CONFIG and its plugins' parameters without running\n"
    "  eval [MODEL]      perplexity (and LAMBADA accuracy) of an unmodified model\n"
    "  generate [MODEL]  greedy text generation (temperature 0)\n"
    "  tokenize [MODEL] TEXT  print the token ids of TEXT (or of --file F)\n"
    "  plugins [NAME]    list the plugins found (or plugin NAME), with their parameters\n"
    "  diff A.json B.json  do two tables of one config agree (e.g. on two backends)?\n"
    "  imatrix [MODEL] --calib TEXT -o F.gguf  an importance matrix for llama-quantize --imatrix\n"
    "\n"
    "MODEL is a llama2.c .bin, a .gguf, or a Hugging Face folder (config.json + safetensors);\n"
    "it defaults to the bundled stories260K.  `lmpress COMMAND --help` describes each.\n"
    "options: --quiet (errors only), --verbose (debug messages), --version, --help, and --threads N\n"
    "(the CPU's threads: OpenBLAS's and the cpu backend's, over a config's backend.params.threads;\n"
    "default: OPENBLAS_NUM_THREADS or every core), before or after the command\n"
    "\n"
    "Plugins load only from trusted folders: the build's plugin folder (installed:\n"
    "<prefix>/lib/lmpress/plugins), <lmpress dir>/plugins, $LMP_PLUGIN_PATH, and the folders\n"
    "given with --allow-plugin DIR or --plugin-path DIR.  A\n"
    "config that names a plugin or a plugins.search_path folder elsewhere is refused before\n"
    "anything is loaded: a plugin runs code as soon as it is opened.\n";

/* The options every command that loads plugins takes (see trust_option). */
#define TRUST_USAGE \
    "--allow-plugin DIR trusts the plugins in DIR (and below it), so a config may name them or\n" \
    "list DIR in plugins.search_path; --plugin-path DIR also searches DIR for plugins named by\n" \
    "name (both repeatable).  Without them, plugins load only from the build's plugin folder (an\n" \
    "installed lmpress: <prefix>/lib/lmpress/plugins), <lmpress dir>/plugins and\n" \
    "$LMP_PLUGIN_PATH: a config naming another is refused before\n" \
    "any of its code runs.\n"

static const char *const usage_compare =
    "usage: lmpress compare CONFIG [--variant GLOB]... [--backend NAME] [--json FILE] [--md FILE]\n"
    "                              [--csv FILE] [--html FILE [--analysis A.json]...] [--resume] [--output-dir DIR [--output-format gguf|hf]]\n"
    "                              [--embedding-type f32|f16|q8_0|...|q6_k]\n"
    "                              [--allow-plugin DIR]... [--plugin-path DIR]...\n"
    "       lmpress run CONFIG [--variant GLOB]... [-o|--output PATH] (and the options of compare)\n"
    "\n"
    "compare runs every variant of the libconfig file CONFIG, or those whose names match a\n"
    "--variant glob (repeatable: --variant 'gptq-*' --variant fp32); run is the same but needs\n"
    "--variant when CONFIG has several.  Each variant is compressed block by block on the\n"
    "calibration text and evaluated against the unmodified model on every evaluation text:\n"
    "perplexity, KL divergence and top-1 agreement, and LAMBADA accuracy when the config names a\n"
    "LAMBADA file (eval.lambada).  A variant may name another tool's model file instead of a\n"
    "pipeline (model = \"x.gguf\"; or a Hugging Face folder, compressed-tensors too): it runs as\n"
    "its own model (embedding, blocks, head) beside the others, after its vocabulary is checked\n"
    "against the base's; bits/w counts its block linears as the file stores them.\n"
    "Each row of the table is printed as its variant finishes.\n"
    "--json, --md, --csv and --html write the report to FILE, rewritten (complete, through a temporary\n"
    "file) after every variant, so an interrupted run keeps what it finished; \"-\" writes that\n"
    "format alone to standard output at the end (the table then goes to standard error).  An output\n"
    "path must hold nothing or a regular file: a link, FIFO, device or folder is refused, as is an\n"
    "output that is an input of the run or another output.  A second run on the same report is\n"
    "refused while the first holds its lock (REPORT.lock).\n"
    "--html FILE: one self-contained page (no network): the table, sortable; bits per weight against\n"
    "KL divergence with the Pareto front, external files in another colour; per-linear bits and\n"
    "weight-error heat maps (docs/report.md).  --analysis A.json (repeatable) adds the charts of an\n"
    "`lmpress analyze ... --json A.json` to the page.\n"
    "--resume: take the finished variants from the --json FILE of an earlier run of the same\n"
    "config and backend, and run only the others.  SIGINT/SIGTERM stop the run at the next\n"
    "block, window or passage, keep the finished variants and exit with 128 + the signal.\n"
    "--backend NAME replaces the config's backend (with that backend's default parameters), as\n"
    "editing backend.name would.  See configs/quickstart.cfg.\n"
    "A mixture of experts' block whose routed experts take more than memory.expert_group_mb\n"
    "(default 1024 MiB of f32 weights) is compressed and evaluated a group of experts of that size\n"
    "at a time, the same numbers bit for bit (docs/config.md; a block that cannot be streamed is\n"
    "held whole, and a warning says why).\n"
    "-o / --output PATH (run): write the variant as PATH: a GGUF file when PATH ends in .gguf (llama.cpp;\n"
    "linears on a GGUF grid (q8_0, q4_0, ...) in that type, the others F32), otherwise a Hugging Face folder\n"
    "(config.json with a compressed-tensors quantization_config, model.safetensors, the tokenizer\n"
    "files; linears on an int grid as int-quantized / pack-quantized).  The file holds the codes and\n"
    "scales the strategy chose: each weight is checked to read back bit for bit as evaluated.\n"
    "--output-dir DIR: the same for every variant run, as DIR/<variant>.gguf (or DIR/<variant>/\n"
    "with --output-format hf; outside letters, digits and . _ - + = , @ : each byte of the name,\n"
    "and a leading '.', becomes '_'); a variant that cannot be written is reported and the run goes\n"
    "on.  With --resume, a variant whose export is missing is compressed again to write it.\n"
    "What the format cannot say of the model's architecture (docs/architectures.md: a sliding\n"
    "window llama.cpp's architecture does not run, a head Gemma's GGUF has no tensor for, ...) is\n"
    "refused with -o or --output-dir once the model is read, before anything is compressed.\n"
    "--embedding-type f32|f16|q8_0|...|q6_k: a GGUF's token embedding and head (default: the config's\n"
    "export section, else the source GGUF's own type when it gives the values back exactly, else\n"
    "f32; f16 and the GGUF block types, quantized as llama-quantize does, are smaller, and differ\n"
    "there from the evaluated model: a warning says so).\n"
    "Files are written under a temporary name (PATH.tmp-HOST-PID-*) and renamed when complete; a later\n"
    "run removes those a killed run left.\n" TRUST_USAGE;

static const char *const usage_analyze =
    "usage: lmpress analyze CONFIG [--variant NAME] [--mode restore-one|quantize-one]\n"
    "                              [--per linear|block|role] [--metric kld|ppl|top1|lambada]\n"
    "                              [--rank measured|proxy]\n"
    "                              [--skip-top K | --target METRIC=X] [--keep-params TEXT]\n"
    "                              [--curve K1,K2,... [--curve-seeds N]] [--top N]\n"
    "                              [--json FILE [--resume]] [--csv FILE] [--svg FILE] [--html FILE]\n"
    "                              [--write-config FILE]\n"
    "                              [--backend NAME] [--allow-plugin DIR]... [--plugin-path DIR]...\n"
    "\n"
    "Per-layer sensitivity of one variant of CONFIG (--variant; needed when CONFIG has several\n"
    "pipelines).  The variant is compressed once; each unit (a linear, a block's linears, or a role's\n"
    "linears across blocks: --per) is then evaluated against the unmodified model with only that\n"
    "unit left in float (--mode restore-one, the default) or with only that unit compressed\n"
    "(quantize-one).  The metric (--metric, default kld; ppl, top1, or lambada, which needs\n"
    "eval.lambada) ranks the units by how much they gain from staying in float.  The\n"
    "baseline's block boundaries are cached, so a unit in block b reruns blocks b..n-1\n"
    "only; the cost line prints the block-forwards spent against one full evaluation per unit.\n"
    "Each unit also gets a proxy measured during compression, its relative output error on the\n"
    "calibration tokens ||XW'-Q(X)Q(W)'||^2/||XW'||^2, and the table gives Spearman's rho of proxy\n"
    "and measured sensitivity.  --rank proxy ranks the units by that proxy alone, with no evaluation\n"
    "per unit (the variant, float, and any skip list, curve or written config are still evaluated).\n"
    "--skip-top K: evaluate the variant with its K most sensitive units left in float.\n"
    "--target METRIC=X (kld or ppl: at most X; top1 or lambada: at least X, a fraction): the\n"
    "smallest K in rank order that reaches X, found by doubling K, then bisecting (0 when the\n"
    "variant already reaches it; a target none can reach, kld < 0, ppl < 1, a fraction outside\n"
    "[0, 1], is refused before any work).\n"
    "--json FILE is rewritten after every unit with the units finished so far; --resume takes\n"
    "them from FILE (same config, backend, variant, --mode, --per and --metric) and evaluates only\n"
    "the others.\n"
    "--keep-params TEXT (e.g. \"bits = 8;\"): skipped units get these stage parameters instead of\n"
    "float (mixed precision); the variant is compressed a second time with them.\n"
    "--write-config FILE: a ready config with the unmodified model, the variant and the variant with\n"
    "its skip list as one short override (skip = true, or params = { TEXT }), for `lmpress compare`.\n"
    "When the variant calibrates on compressed inputs, compare re-compresses the skip variant and its\n"
    "later blocks re-adapt: analyze then compresses and evaluates it as compare will and prints both\n"
    "numbers (and writes them into the config).\n"
    "--curve K1,K2,...: the metric with the first K units skipped in measured order, proxy order and\n"
    "--curve-seeds random orders (default 3).  --top N: rows of the printed table (default 20; 0 all).\n"
    "--html FILE: one self-contained page (no network): the bar chart, a block x role heat map of the\n"
    "sensitivity (--per linear), the skip curves, and the units as a sortable table.\n"
    "--json, --csv, --svg (a bar chart per unit, grouped by block, coloured by role), --html: written through\n"
    "a temporary file; \"-\" writes one of them to standard output (the table then goes to standard\n"
    "error).  docs/analyze.md has the details.\n" TRUST_USAGE;

static const char *const usage_check =
    "usage: lmpress check CONFIG [--allow-plugin DIR]... [--plugin-path DIR]...\n"
    "\n"
    "Parses CONFIG, loads the plugins it names, validates every stage against its plugin's\n"
    "parameter schema, checks every file it names (exists, readable, the right kind) and, from\n"
    "the model's header, that every targets/ignore/overrides pattern matches a linear, that an\n"
    "importance matrix (imatrix) has an entry of the right width for every linear quantized with it,\n"
    "that the seq_lens fit the model's context (and a learning stage's the calibration windows), that\n"
    "a block format (q4_0, q4_k ...) divides every row it quantizes, that a stage needing statistics\n"
    "has a calibration text, that random calibration windows fit the memory budget, and that the\n"
    "tokenizer's ids fit the model's vocabulary: all that compare does before any work.  Prints the\n"
    "variants.  A plugin file is checked before it is\n"
    "opened: inside a trusted folder, and an ELF shared object exporting lmp_plugin_entry (read\n"
    "from its symbol table, so a file that is not a plugin runs nothing).\n" TRUST_USAGE;

static const char *const usage_eval =
    "usage: lmpress eval [MODEL] [--text FILE] [--lambada FILE [--lambada-max N]]\n"
    "                    [--tokenizer FILE] [--seq-len L] [--max-windows N] [--score-second-half]\n"
    "                    [--kl-divergence-base BASE]\n"
    "                    [--backend NAME] [--json] [--allow-plugin DIR]... [--plugin-path DIR]...\n"
    "\n"
    "Perplexity of MODEL on FILE: the file's bytes are tokenized at once with BOS prepended,\n"
    "cut into floor(n/L) non-overlapping windows of L tokens (the tail dropped; --max-windows\n"
    "caps the count), each window evaluated from position 0, its L-1 next-token predictions\n"
    "scored; ppl = exp(mean negative log-likelihood).  L defaults to the model's context.\n"
    "--score-second-half scores only the predictions from position L/2 on (L/2-1 a window), as\n"
    "llama.cpp's llama-perplexity scores a chunk, so the two numbers can be compared.\n"
    "--lambada FILE: LAMBADA accuracy (lm-evaluation-harness lambada_openai) on a JSONL file of\n"
    "{\"text\": ...} passages (--lambada-max N: the first N).  --tokenizer takes a llama2.c\n"
    "tokenizer file, a Hugging Face tokenizer.json or a .gguf (its vocabulary); GGUF models\n"
    "bring their own, and a Hugging Face folder's tokenizer.json is used by default.\n"
    "--kl-divergence-base BASE: MODEL (any file eval reads: another tool's quantized GGUF, an\n"
    "export) against the model BASE on --text, as llama-perplexity --kl-divergence compares them:\n"
    "the windows above (tokenized with BASE's tokenizer; the vocabularies must be the same), BASE's\n"
    "log-probabilities kept, MODEL scored against them.  Prints PPL(Q) and PPL(base) with their\n"
    "uncertainties and ratio, the mean KL divergence +/- its error and its percentiles, the\n"
    "percentiles of dp = p_Q(next) - p_base(next), RMS dp and the same-top-token share; the KLD is\n"
    "compare's KLD column for the same pair and windows (docs/kl-divergence.md).  L defaults to BASE's\n"
    "context; with --score-second-half the statistics cover positions L/2 .. L-2 of each window.\n"
    "BASE may also be the logits file of llama-perplexity --kl-divergence-base FILE (llama.cpp's first\n"
    "step): then no --text: MODEL runs on the file's chunks (BOS first in each when its tokenizer adds\n"
    "one) and each chunk's second half is scored against the stored log-probabilities.\n" TRUST_USAGE;

static const char *const usage_generate =
    "usage: lmpress generate [MODEL] [--tokenizer FILE] [--prompt TEXT] [--steps N]\n"
    "                        [--backend NAME] [--allow-plugin DIR]... [--plugin-path DIR]...\n"
    "\n"
    "Greedy generation (argmax at every step) from BOS and the prompt, N steps in all\n"
    "(default 256), printed as llama2.c's run prints it.\n" TRUST_USAGE;

static const char *const usage_tokenize =
    "usage: lmpress tokenize [--tokenizer FILE | MODEL] (TEXT | --file F) [--json] [--no-bos]\n"
    "                        [--parse-special]\n"
    "\n"
    "Prints the token ids of TEXT (or of the whole file F) on one line, separated by spaces, or as\n"
    "a JSON array with --json: the ids eval and compare feed the model, so they can be checked\n"
    "against another tool (Hugging Face tokenizers, sentencepiece, llama.cpp) without C.\n"
    "The tokenizer is --tokenizer FILE when FILE is a Hugging Face tokenizer.json or a GGUF (its\n"
    "vocabulary), else MODEL's (default: the bundled stories260K) as eval finds it: a GGUF's own\n"
    "vocabulary, the tokenizer.json of a Hugging Face folder, tokenizer.bin beside a llama2.c model,\n"
    "or a llama2.c --tokenizer FILE read with MODEL's vocabulary size.  Supported: byte-level BPE\n"
    "(GPT-2, SmolLM2, Llama 3, Qwen2: any Split regex, NFC/NFKC), SentencePiece-style BPE\n"
    "(Llama 2, Mistral, Gemma tokenizer.json with byte_fallback; GGUF \"llama\" vocabularies;\n"
    "llama2.c); see docs/tokenizers.md.\n"
    "BOS is prepended when the tokenizer's convention says so (as eval does); --no-bos leaves it\n"
    "out (Hugging Face's add_special_tokens=False).  --parse-special also matches special tokens\n"
    "such as <|endoftext|> written in the text (Hugging Face's encode() does; by default text is\n"
    "data, as in llama.cpp's perplexity).\n";

static const char *const usage_plugins =
    "usage: lmpress plugins [NAME] [--plugin-path DIR]... [--allow-plugin DIR]...\n"
    "\n"
    "NAME (a strategy or backend, e.g. gptq): only that plugin's entry (every kind of that name);\n"
    "an unknown NAME is an error that names the nearest plugin.  Without NAME:\n"
    "Lists every lmp-*.so plugin in the search path (the --plugin-path and --allow-plugin\n"
    "folders, then $LMP_PLUGIN_PATH, then <lmpress dir>/plugins, then the build's plugin\n"
    "folder, or an installed lmpress's <prefix>/lib/lmpress/plugins; these are the trusted\n"
    "folders): kind, version, ABI, whether it can run here, and its full parameter schema.\n"
    "Files that fail to load are reported with the reason.  Each file's ELF symbol table is\n"
    "read before it is opened: a file that is not an lmpress plugin\n"
    "(no exported lmp_plugin_entry) and a link that leads out of the trusted folders are\n"
    "reported without being loaded, so none of their code runs.\n";

static const char *const usage_diff =
    "usage: lmpress diff A.json B.json [--noise N.json]... [--class exact|rounding|solver]\n"
    "\n"
    "Compares two tables of the same config written by `compare --json` (typically the config\n"
    "run with --backend cpu and with another backend), variant by variant: perplexity, KL\n"
    "divergence, top-1 agreement and LAMBADA accuracy of B against A, and bits per weight\n"
    "exactly.  Each number may differ by its variant's class floor (exact: fp32, RTN weight-only,\n"
    "magnitude pruning; rounding: anything whose decisions see activations; solver: GPTQ,\n"
    "SparseGPT) or, if larger, by 3x how far the same number moves in the --noise tables: the\n"
    "config run on the cpu backend with params { jitter = 1e-6; jitter_seed = K; }, which moves\n"
    "only the rounding (tools/bench/switch_backends.sh does all of it).  docs/backends.md gives\n"
    "the floors and why.  --class C judges every variant by class C's floors instead of its own\n"
    "(--class exact: two builds of the same code on one machine, e.g. before and after a\n"
    "refactoring).  Prints a line per variant; exits 0 when every number is within tolerance, 1\n"
    "when one is not or the tables cannot be compared.\n";

int fail(void)
{
    fprintf(stderr, "lmpress: error: %s\n", lmp_last_error());
    return 1;
}

/* fail() for the commands an MPI run spreads: every rank learns the run's error (distrib.h), and
 * rank 0 alone prints it. */
static int fail_on(lmp_ctx *ctx)
{
    return lmp_dist_rank(lmp_host_dist(ctx)) > 0 ? 1 : fail();
}

/* An MPI run, after every rank loaded the config: rank 0's error first if any rank failed, and
 * a rank that read another file (another node's copy) refused by its fingerprint. */
static int dist_same_config(lmp_ctx *ctx, int st, const lmp_run_config *c)
{
    lmp_dist *d = lmp_host_dist(ctx);
    if (!d || (st = lmp_dist_agree(d, st))) return st;
    char hash[17], mine[17], first[17];
    lmp_run_fingerprint(c, hash, mine);
    memcpy(first, mine, sizeof first);
    int local = lmp_dist_bcast(d, first, sizeof first);
    if (!local && strcmp(first, mine) != 0)
        local = lmp_fail(LMP_EINVAL, "rank %d: %s is not rank 0's (fingerprint %s, rank 0's %s): every rank must "
                         "read the same config, with the same backend and lmpress", lmp_dist_rank(d), c->path, mine, first);
    return lmp_dist_agree(d, local);
}

/* "lmpress compare" from a usage text's first line ("usage: lmpress compare CONFIG ..."), or
 * "lmpress" for the main one ("usage: lmpress [--quiet ..."). */
static void usage_command(const char *usage, char *cmd, size_t size)
{
    const char *p = strncmp(usage, "usage: lmpress ", 15) == 0 ? usage + 15 : "";
    size_t n = islower((unsigned char)*p) ? strcspn(p, " \n") : 0;
    snprintf(cmd, size, "lmpress%s%.*s", n ? " " : "", (int)n, p);
}

/* The option of `usage` (every --name and -x it mentions) nearest the unknown `given`, into
 * buf; NULL when none is near (base/suggest.h). */
static const char *suggest_option(const char *usage, const char *given, char *buf, size_t size)
{
    enum { MAX_OPTS = 96 };
    char names[MAX_OPTS][40];
    const char *cands[MAX_OPTS];
    size_t n = 0;
    for (const char *p = usage; *p && n < MAX_OPTS; p++) {
        if (*p != '-' || (p > usage && (isalnum((unsigned char)p[-1]) || p[-1] == '-'))) continue;
        size_t len = strspn(p, "-");
        if (len > 2 || !isalpha((unsigned char)p[len])) continue;
        len += strspn(p + len, "abcdefghijklmnopqrstuvwxyz0123456789-");
        if (len >= sizeof names[0]) continue;
        memcpy(names[n], p, len);
        names[n][len] = 0;
        cands[n] = names[n];
        n++;
        p += len - 1;
    }
    /* "--json=x": the name before '='. */
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(given, "="), given);
    const char *best = lmp_suggest(name, cands, n);
    if (!best) return NULL;
    snprintf(buf, size, "%s", best);
    return buf;
}

/* A usage error: one line, the message (an unknown option with the nearest one the usage text
 * names), then where the full usage is.  Exit status 2. */
int usage_error(const char *usage, const char *fmt, const char *arg)
{
    char cmd[64], near[64];
    usage_command(usage, cmd, sizeof cmd);
    fprintf(stderr, "lmpress: ");
    fprintf(stderr, fmt, arg);
    if (strncmp(fmt, "unknown option", 14) == 0 && suggest_option(usage, arg, near, sizeof near))
        fprintf(stderr, " (did you mean %s?)", near);
    fprintf(stderr, "; see '%s --help'\n", cmd);
    return 2;
}

int wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

/* Option parsing: "--name VALUE" pairs; returns the value or NULL with *bad set. */
const char *opt_value(int argc, char **argv, int *i, int *bad)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "lmpress: option %s needs a value\n", argv[*i]);
        *bad = 1;
        return NULL;
    }
    return argv[++*i];
}

/* --allow-plugin DIR (trusted) and --plugin-path DIR (trusted and searched by name): the user's
 * word for this run, so every registry made on its context afterwards trusts DIR (registry.h).  Returns 1 when argv[*i] is
 * one of them (a bad DIR sets *bad after printing why), 0 otherwise.  search_all: an
 * --allow-plugin folder is searched too (`plugins`, whose work is listing). */
int trust_option(lmp_ctx *ctx, int argc, char **argv, int *i, int *bad, int search_all)
{
    int search = search_all || strcmp(argv[*i], "--plugin-path") == 0;
    if (strcmp(argv[*i], "--plugin-path") != 0 && strcmp(argv[*i], "--allow-plugin") != 0) return 0;
    const char *dir = opt_value(argc, argv, i, bad);
    if (dir && lmp_registry_allow_dir(ctx, dir, search)) {
        fprintf(stderr, "lmpress: error: %s\n", lmp_last_error());
        *bad = 1;
    }
    return 1;
}

int parse_count(const char *s, const char *opt, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo) {
        fprintf(stderr, "lmpress: %s wants an integer >= %lld, not \"%s\"\n", opt, (long long)lo, s);
        return 2;
    }
    *out = v;
    return 0;
}

/* ---- diff ----------------------------------------------------------------------------------- */
static int read_table(const char *path, lmp_json **out)
{
    char *text;
    size_t n;
    int st = lmp_read_file(path, &text, &n);
    if (st) return st;
    st = lmp_json_parse(text, n, path, out);
    free(text);
    return st;
}

static int cmd_diff(int argc, char **argv)
{
    if (wants_help(argc, argv)) {
        fputs(usage_diff, stdout);
        return 0;
    }
    enum { MAX_NOISE = 16 };
    const char *paths[2 + MAX_NOISE];
    int n_paths = 0, n_noise = 0, bad = 0, as_class = -1;
    for (int i = 0; i < argc && !bad; i++) {
        if (strcmp(argv[i], "--class") == 0) {
            const char *v = opt_value(argc, argv, &i, &bad);
            if (v && (as_class = lmp_class_by_name(v)) < 0)
                return usage_error(usage_diff, "--class %s: expected exact, rounding or solver", v);
        } else if (strcmp(argv[i], "--noise") == 0) {
            const char *v = opt_value(argc, argv, &i, &bad);
            if (v && n_noise == MAX_NOISE) return usage_error(usage_diff, "more than %s noise tables", "16");
            if (v) paths[2 + n_noise++] = v;
        } else if (argv[i][0] == '-' && argv[i][1]) return usage_error(usage_diff, "unknown option %s", argv[i]);
        else if (n_paths == 2) return usage_error(usage_diff, "unexpected argument %s", argv[i]);
        else paths[n_paths++] = argv[i];
    }
    if (bad) return 2;
    if (n_paths != 2) return usage_error(usage_diff, "%s", "two tables are required");
    lmp_json *json[2 + MAX_NOISE] = {0};
    lmp_table t[2 + MAX_NOISE];
    int st = 0;
    for (int i = 0; i < 2 + n_noise && !st; i++) {
        st = read_table(paths[i], &json[i]);
        t[i] = (lmp_table){.json = json[i], .name = paths[i]};
    }
    lmp_diff_summary sum;
    if (!st) st = lmp_table_diff_as(&t[0], &t[1], t + 2, n_noise, as_class, stdout, &sum);
    for (int i = 0; i < 2 + n_noise; i++) lmp_json_free(json[i]);
    if (st) return fail();
    for (int c = 0; c < LMP_N_CLASSES; c++)
        printf("largest %-8s differences: ppl rel %.1e  kld %.1e  top1 %.1e  lambada %.1e\n", lmp_class_name(c),
               sum.worst[c][0], sum.worst[c][1], sum.worst[c][2], sum.worst[c][3]);
    printf("%d variants, %d numbers, %d noise tables: %d beyond tolerance\n", sum.variants, sum.numbers, n_noise,
           sum.beyond);
    if (sum.beyond) {
        lmp_fail(LMP_EINVAL, "%s and %s differ beyond tolerance in %d numbers", paths[0], paths[1], sum.beyond);
        return fail();
    }
    return 0;
}

/* ---- compare / run ---------------------------------------------------------------------------- */

/* Where the report goes.  Files are rewritten (complete, through a temporary file) after every
 * finished variant; "-" (standard output) is written once, at the end. */
typedef struct compare_outputs {
    const char *path[4];       /* --json, --md, --csv, --html; NULL: none */
    FILE *table;               /* the human table, row by row; NULL: none */
    /* Exports: run --output PATH (the one variant), --output-dir DIR (every variant run, as
     * DIR/<name>.gguf, or DIR/<name>/ with --output-format hf). */
    const char *output, *output_dir, *embedding_type;
    int output_hf;
    lmp_ctx *ctx;
    const lmp_run_config *cfg;
    int export_failures;       /* --output-dir: variants whose export failed (the run goes on) */
    int exported;              /* files written */
    /* --analysis FILE (with --html): analyses read back from `analyze --json`, whose charts the
     * page shows after the comparison's */
    const char *analysis_path[8];
    lmp_json *analysis_json[8];
    const lmp_analysis *analyses[8];
    int n_analyses;
} compare_outputs;

enum { N_REPORTS = 4 };
static void (*const writers[N_REPORTS])(const lmp_report *, FILE *) = {lmp_report_json, lmp_report_markdown,
                                                                       lmp_report_csv, lmp_report_html};
static const char *const output_options[N_REPORTS] = {"--json", "--md", "--csv", "--html"};

typedef struct writer_call {
    int k;                     /* index into writers[] */
    const lmp_report *r;
    const compare_outputs *o;
} writer_call;

static void analysis_charts(const void *arg, FILE *f)
{
    const compare_outputs *o = arg;
    for (int k = 0; k < o->n_analyses; k++) lmp_analysis_charts_html(o->analyses[k], f);
}

static void call_writer(const void *arg, FILE *f)
{
    const writer_call *w = arg;
    if (writers[w->k] == lmp_report_html) lmp_report_html_with(w->r, analysis_charts, w->o, f);
    else writers[w->k](w->r, f);
}

static int write_outputs(const lmp_report *r, const compare_outputs *o, int at_end)
{
    for (int k = 0; k < N_REPORTS; k++) {
        if (!o->path[k]) continue;
        writer_call w = {k, r, o};
        if (strcmp(o->path[k], "-") == 0) {
            if (at_end) call_writer(&w, stdout);
            continue;
        }
        int st = lmp_outfile_write(o->path[k], call_writer, &w);
        if (st) return st;
    }
    return 0;
}

static void export_path(const compare_outputs *o, const lmp_variant *v, char *path, size_t n);

static int on_prepared(const lmp_report *r, void *ud)
{
    const compare_outputs *o = ud;
    /* what the export will refuse (the architecture: a window llama.cpp does not run, a head
     * Gemma's GGUF has no tensor for, ...; a group size vLLM cannot take), before the first
     * block is compressed (export.h) */
    for (int i = 0; i < r->n_results && (o->output || o->output_dir); i++) {
        char path[4400];
        export_path(o, r->results[i].v, path, sizeof path);
        if (!r->results[i].done && lmp_export_preflight(r->model, o->cfg, r->results[i].v, path))
            return lmp_fail_prefix(LMP_EUNSUPPORTED, "%s", o->output ? "--output" : "--output-dir");
    }
    if (o->table) lmp_report_table_head(r, o->table);
    return 0;
}

static int on_finished(const lmp_report *r, int i, void *ud)
{
    const compare_outputs *o = ud;
    if (o->table) lmp_report_table_row(r, i, o->table);
    return write_outputs(r, o, 0);
}

/* Where a variant is exported: --output PATH, or DIR/<its file name>.gguf (or DIR/<file name>/
 * with --output-format hf), the name through out_dir.h's one safe mapping. */
static void export_path(const compare_outputs *o, const lmp_variant *v, char *path, size_t n)
{
    char file[LMP_VARIANT_FILE_MAX + 1];
    if (o->output) snprintf(path, n, "%s", o->output);
    else snprintf(path, n, "%s/%s%s", o->output_dir, lmp_variant_file_name(v->name, file, sizeof file),
                  o->output_hf ? "" : ".gguf");
}

/* Every file the run writes is its own: not an input of the run (the config, the model, a
 * text, ...), not another output (--json X --md X; two variants' exports).  Checked once the
 * config is loaded, before any work; which[n_which] the variants exported (NULL: the first
 * n_which). */
static int check_outputs_distinct(const compare_outputs *o, const lmp_run_config *c, const int *which, int n_which)
{
    const int n_exports = o->output ? 1 : o->output_dir ? n_which : 0;
    const int max_in = lmp_config_inputs_max(c);
    lmp_named_path *in = calloc((size_t)max_in + 1 + (size_t)o->n_analyses, sizeof *in);
    lmp_named_path *outs = calloc((size_t)n_exports + N_REPORTS + 1, sizeof *outs);
    char (*paths)[4400] = calloc((size_t)n_exports + 1, sizeof *paths);
    char (*whats)[256] = calloc((size_t)n_exports + 1, sizeof *whats);
    int st = in && outs && paths && whats ? 0 : lmp_fail(LMP_ENOMEM, "out of memory");
    int n_out = 0, n_in = st ? 0 : lmp_config_inputs(c, in, max_in);
    for (int k = 0; k < o->n_analyses && !st; k++) in[n_in++] = (lmp_named_path){o->analysis_path[k], "--analysis"};
    for (int k = 0; k < N_REPORTS && !st; k++) outs[n_out++] = (lmp_named_path){o->path[k], output_options[k]};
    for (int i = 0; i < n_exports && !st; i++) {
        const lmp_variant *v = &c->variants[which ? which[i] : i];
        if (v->model_path && !o->output) continue; /* another tool's file: not exported */
        export_path(o, v, paths[i], sizeof paths[i]);
        if (o->output) snprintf(whats[i], sizeof whats[i], "--output");
        else snprintf(whats[i], sizeof whats[i], "--output-dir: variant '%.200s' to", v->name);
        outs[n_out++] = (lmp_named_path){paths[i], whats[i]};
    }
    if (!st) st = lmp_outfile_distinct(outs, n_out, in, n_in);
    free(in);
    free(outs);
    free(paths);
    free(whats);
    return st;
}

/* --resume with --output / --output-dir: a variant the report already holds was not compressed
 * in this run, so it would not be exported.  Those the user chose (by --variant, or all) whose
 * export is not there yet are run again (rerun[k] = 1, k indexing which[]); with --output always
 * (the user asks for that file now).  Another tool's file is never exported. */
static void exports_to_rerun(lmp_ctx *ctx, const compare_outputs *o, const lmp_run_config *c, const int *which,
                             int n_which, const char *const *globs, int n_globs, uint8_t *rerun)
{
    for (int k = 0; k < n_which; k++) {
        const lmp_variant *v = &c->variants[which[k]];
        int asked = n_globs == 0;
        for (int g = 0; g < n_globs && !asked; g++) asked = fnmatch(globs[g], v->name, 0) == 0;
        if (!asked || v->model_path || (!o->output && !o->output_dir)) continue;
        char path[4400];
        export_path(o, v, path, sizeof path);
        lmp_outdir_state state = LMP_OUTDIR_ABSENT;
        if (!o->output && lmp_outdir_state_of(path, &state) == 0 &&
            (o->output_hf ? state == LMP_OUTDIR_FULL : state == LMP_OUTDIR_OTHER))
            continue; /* exported by the run that wrote the report */
        rerun[k] = 1;
        if (!o->output)
            lmp_log(ctx, LMP_LOG_INFO, "variant %s: not at %s yet: compressed again to export it (not taken from --resume)",
                    v->name, path);
    }
}

/* Writes the variant where --output / --output-dir say.  With --output the run stops on a
 * failure; with --output-dir the failure is reported, the other variants still run and the
 * exit status says that one failed. */
static int on_compressed(const lmp_model *m, const lmp_variant_result *res, const lmp_block_source *blocks, void *ud)
{
    compare_outputs *o = ud;
    if (!o->output && !o->output_dir) return 0;
    char path[4400], *pipeline = NULL;
    size_t pipeline_len = 0;
    export_path(o, res->v, path, sizeof path);
    FILE *mem = open_memstream(&pipeline, &pipeline_len);
    if (mem) {
        lmp_report_json_stages(res->v, mem);
        fclose(mem);
    }
    lmp_export_opts eo = {.path = path, .variant = res->v->name, .pipeline = pipeline ? pipeline : "[]",
                          .config_path = o->cfg->path, .tokenizer_path = o->cfg->tokenizer_path,
                          .embedding_type = o->embedding_type ? o->embedding_type : o->cfg->export_embedding_type,
                          .output_type = o->embedding_type ? NULL : o->cfg->export_output_type};
    double t0 = lmp_now_s();
    int st = mem ? lmp_export_model(o->ctx, m, blocks, &eo) : lmp_fail(LMP_ENOMEM, "out of memory");
    free(pipeline);
    if (!st) {
        lmp_log(o->ctx, LMP_LOG_INFO, "variant %s: written to %s (%.1f s)", res->v->name, path, lmp_now_s() - t0);
        o->exported++;
        return 0;
    }
    if (o->output || lmp_host_interrupted(o->ctx)) return lmp_fail_prefix(st, "--output %s", path);
    fprintf(stderr, "lmpress: error: variant '%s': not exported to %s: %s\n", res->v->name, path, lmp_last_error());
    o->export_failures++;
    return 0;
}

/* SIGINT / SIGTERM: the run stops at the next block, window or passage and keeps what is
 * finished.  The flag is the process's one piece of global state: a signal handler can reach
 * nothing else; the run's context holds a pointer to it.  SA_RESETHAND: a second signal ends
 * the process at once. */
static volatile sig_atomic_t interrupt_signal;

static void on_signal(int sig) { interrupt_signal = sig; }

static void catch_interrupts(lmp_ctx *ctx)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    lmp_host_set_interrupt_flag(ctx, &interrupt_signal);
}

/* --backend NAME: the config's backend replaced by NAME with its default parameters (the
 * config's parameters belong to the backend it names). */
static int override_backend(lmp_run_config *c, const char *name)
{
    if (strcmp(name, c->backend_name) == 0) return 0;
    const lmp_plugin *p;
    int st = lmp_registry_require(&c->reg, LMP_PLUGIN_BACKEND, name, &p);
    if (st) return st;
    lmp_value *defaults;
    if ((st = lmp_params_defaults(p->desc, &defaults))) return st;
    free(c->backend_params);
    c->backend_params = defaults;
    c->backend_name = p->desc->name;
    return 0;
}

/* --threads N (0: not given) over a config whose backend is cpu: its `threads` parameter, the
 * command line's word over the config's.  Any other backend's CPU fallback, and eval and
 * generate, take N from OPENBLAS_NUM_THREADS, which run_args set before any plugin loaded
 * OpenBLAS (the cpu backend's threads = 0 keeps OpenBLAS's default, and its own threads follow
 * OpenBLAS's count). */
static int apply_threads(lmp_run_config *c, int64_t threads)
{
    if (threads <= 0 || strcmp(c->backend_name, "cpu") != 0) return 0;
    const lmp_plugin *p = lmp_registry_find(&c->reg, LMP_PLUGIN_BACKEND, "cpu");
    for (uint32_t k = 0; p && k < p->desc->n_params; k++)
        if (strcmp(p->desc->params[k].name, "threads") == 0) c->backend_params[k].num = (double)threads;
    return 0;
}

/* " (did you mean 'w4-g32'?)" into hint when a variant of c is near `name`; else "". */
static void variant_hint(const lmp_run_config *c, const char *name, char *hint, size_t size)
{
    enum { MAX_NAMES = 256 };
    const char *cands[MAX_NAMES];
    size_t n = 0;
    for (int i = 0; i < c->n_variants && n < MAX_NAMES; i++) cands[n++] = c->variants[i].name;
    const char *best = lmp_suggest(name, cands, n);
    hint[0] = 0;
    if (best) snprintf(hint, size, " (did you mean '%s'?)", best);
}

/* The variants to run, in config order: those matching any --variant glob (each glob must
 * match one), or all (`run`: the only one), plus those an earlier report to resume holds. */
static int choose_variants(const lmp_run_config *c, const char *const *globs, int n_globs, int single,
                           const lmp_json *resume, int *which, int *n_which)
{
    char names[2048] = "";
    for (int i = 0; i < c->n_variants; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", c->variants[i].name);
    if (single && n_globs == 0 && c->n_variants > 1)
        return lmp_fail(LMP_EINVAL, "%s: several variants: choose one with --variant NAME (a glob; repeatable); its variants: %s", c->path, names);
    for (int g = 0; g < n_globs; g++) {
        int hit = 0;
        for (int i = 0; i < c->n_variants && !hit; i++) hit = fnmatch(globs[g], c->variants[i].name, 0) == 0;
        char hint[160] = "";
        variant_hint(c, globs[g], hint, sizeof hint);
        if (!hit) return lmp_fail(LMP_EINVAL, "%s: no variant named '%s'%s (nor matching it as a glob); its variants: %s", c->path, globs[g], hint, names);
    }
    const lmp_json *done = resume ? lmp_json_get(resume, "variants") : NULL;
    *n_which = 0;
    for (int i = 0; i < c->n_variants; i++) {
        int chosen = n_globs == 0;
        for (int g = 0; g < n_globs && !chosen; g++) chosen = fnmatch(globs[g], c->variants[i].name, 0) == 0;
        for (size_t k = 0; done && done->type == LMP_JSON_ARRAY && k < done->n && !chosen; k++) {
            const lmp_json *name = lmp_json_get(&done->items[k], "name");
            chosen = name && name->type == LMP_JSON_STRING && strcmp(name->str, c->variants[i].name) == 0;
        }
        if (chosen) which[(*n_which)++] = i;
    }
    return 0;
}

static int cmd_compare(lmp_ctx *ctx, int argc, char **argv, int single, int64_t threads)
{
    enum { MAX_GLOBS = 64 };
    const char *cfg_path = NULL, *backend = NULL, *globs[MAX_GLOBS], *output_format = NULL;
    compare_outputs out = {.path = {NULL, NULL, NULL, NULL}, .table = stdout, .ctx = ctx};
    int bad = 0, n_globs = 0, resume = 0;
    if (wants_help(argc, argv)) {
        fputs(usage_compare, stdout);
        return 0;
    }
    for (int i = 0; i < argc && !bad; i++) {
        int k = 0;
        while (k < N_REPORTS && strcmp(argv[i], output_options[k]) != 0) k++;
        if (k < N_REPORTS) out.path[k] = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--variant") == 0) {
            const char *v = opt_value(argc, argv, &i, &bad);
            if (v && n_globs == MAX_GLOBS) return usage_error(usage_compare, "more than %s --variant options", "64");
            if (v) globs[n_globs++] = v;
        } else if (strcmp(argv[i], "--backend") == 0) backend = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--resume") == 0) resume = 1;
        else if (single && (strcmp(argv[i], "--output") == 0 || strcmp(argv[i], "-o") == 0))
            out.output = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--output-dir") == 0) out.output_dir = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--output-format") == 0) output_format = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--embedding-type") == 0) out.embedding_type = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--analysis") == 0) {
            const char *v = opt_value(argc, argv, &i, &bad);
            if (v && out.n_analyses == 8) return usage_error(usage_compare, "more than %s --analysis options", "8");
            if (v) out.analysis_path[out.n_analyses++] = v;
        } else if (trust_option(ctx, argc, argv, &i, &bad, 0)) continue;
        else if (argv[i][0] == '-') return usage_error(usage_compare, "unknown option %s", argv[i]);
        else if (cfg_path) return usage_error(usage_compare, "unexpected argument %s", argv[i]);
        else cfg_path = argv[i];
    }
    if (bad) return 2;
    if (!cfg_path) return usage_error(usage_compare, "%s", "a CONFIG file is required");
    int to_stdout = 0;
    for (int k = 0; k < N_REPORTS; k++) to_stdout += out.path[k] && strcmp(out.path[k], "-") == 0;
    if (to_stdout > 1) return usage_error(usage_compare, "%s", "only one of --json, --md, --csv and --html can be \"-\"");
    if (resume && (!out.path[0] || strcmp(out.path[0], "-") == 0))
        return usage_error(usage_compare, "%s", "--resume needs --json FILE: the report it resumes");
    if (out.n_analyses && !out.path[3])
        return usage_error(usage_compare, "%s", "--analysis goes with --html FILE: the page that shows its charts");
    if (out.output && out.output_dir) return usage_error(usage_compare, "%s", "--output and --output-dir exclude each other");
    if (output_format && strcmp(output_format, "gguf") != 0 && strcmp(output_format, "hf") != 0)
        return usage_error(usage_compare, "--output-format %s: expected gguf or hf", output_format);
    if (output_format && !out.output_dir)
        return usage_error(usage_compare, "%s", "--output-format goes with --output-dir (--output takes it from the path: .gguf or a folder)");
    out.output_hf = output_format && strcmp(output_format, "hf") == 0;
    char emb_word[32];
    snprintf(emb_word, sizeof emb_word, " %.20s ", out.embedding_type ? out.embedding_type : "");
    if (out.embedding_type && (strlen(out.embedding_type) > 8 ||
                               !strstr(" f32 f16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q2_k q3_k q4_k q5_k q6_k ", emb_word)))
        return usage_error(usage_compare, "--embedding-type %s: expected f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                           "iq4_nl or q2_k .. q6_k", out.embedding_type);
    if (out.embedding_type && (out.output_hf || (out.output && !lmp_export_is_gguf(out.output)) || (!out.output && !out.output_dir)))
        return usage_error(usage_compare, "%s", "--embedding-type goes with a GGUF export (--output X.gguf, or --output-dir)");
    lmp_dist *dist = lmp_host_dist(ctx);
    if (dist && (out.output || out.output_dir))
        return usage_error(usage_compare, "%s", "--output and --output-dir are not spread over MPI ranks: export the "
                           "variant you chose with `lmpress run CONFIG --variant NAME --output PATH` in one process");
    if (lmp_dist_rank(dist) > 0) { /* rank 0 writes the report */
        for (int k = 0; k < N_REPORTS; k++) out.path[k] = NULL;
        out.table = NULL;
        to_stdout = 0;
    }
    if ((out.output && lmp_export_check_path(out.output, "--output")) ||
        (out.output_dir && lmp_export_check_dir(out.output_dir, "--output-dir")))
        return fail();
    /* Standard output carries only the requested format; the human table then goes to stderr. */
    if (to_stdout) out.table = lmp_host_verbosity(ctx) >= LMP_LOG_INFO ? stderr : NULL;
    /* From here a failure goes through st: in an MPI run every rank must reach the agreement in
     * dist_same_config, also when only rank 0's output files are wrong. */
    int st = 0;
    for (int k = 0; k < N_REPORTS && !st; k++)
        if (out.path[k] && strcmp(out.path[k], "-") != 0) st = lmp_outfile_check(out.path[k], output_options[k]);

    /* --analysis: read and checked before any work */
    lmp_analysis_doc *analysis_docs[8] = {NULL};
    for (int k = 0; k < out.n_analyses && !st; k++) {
        st = read_table(out.analysis_path[k], &out.analysis_json[k]);
        if (!st) st = lmp_analysis_doc_read(out.analysis_json[k], out.analysis_path[k], &analysis_docs[k]);
        if (!st) out.analyses[k] = &analysis_docs[k]->a;
    }
    lmp_run_config *c = NULL;
    lmp_json *prior = NULL;
    int *which = NULL, n_which = 0;
    uint8_t *rerun = NULL;
    lmp_outlock locks[N_REPORTS] = {{.fd = -1}, {.fd = -1}, {.fd = -1}, {.fd = -1}};
    if (!st) st = lmp_config_load(ctx, cfg_path, &c);
    if (!st && backend) st = override_backend(c, backend);
    if (!st) st = check_outputs_distinct(&out, c, NULL, c->n_variants);
    /* one run per report at a time: taken before --resume reads it (base/outlock.h) */
    for (int k = 0; k < N_REPORTS && !st; k++)
        if (out.path[k] && !lmp_outfile_is_stdout(out.path[k])) st = lmp_outlock_take(&locks[k], out.path[k], output_options[k]);
    if (!st) st = apply_threads(c, threads);
    if (!st && resume && out.path[0] && access(out.path[0], F_OK) == 0) st = read_table(out.path[0], &prior);
    else if (!st && resume && out.path[0]) lmp_log(ctx, LMP_LOG_INFO, "%s does not exist yet: nothing to resume, running every variant", out.path[0]);
    if (!st && !(which = malloc((size_t)c->n_variants * sizeof *which))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st) st = choose_variants(c, globs, n_globs, single, prior, which, &n_which);
    if (!st && !(rerun = calloc((size_t)n_which + 1, 1))) st = lmp_fail(LMP_ENOMEM, "out of memory");
    if (!st && prior) exports_to_rerun(ctx, &out, c, which, n_which, globs, n_globs, rerun);
    if (dist) { /* rank 0's choice, which --resume may have widened, for every rank */
        st = dist_same_config(ctx, st, c);
        if (!st) st = lmp_dist_bcast(dist, &n_which, sizeof n_which);
        if (!st) st = lmp_dist_bcast(dist, which, (int64_t)n_which * (int64_t)sizeof *which);
    }
    lmp_report *r = NULL;
    if (!st) {
        catch_interrupts(ctx);
        out.cfg = c;
        lmp_compare_opts opts = {.which = which, .n_which = n_which, .resume = prior, .resume_path = out.path[0],
                                 .rerun = rerun,
                                 .hooks = {on_prepared, out.output || out.output_dir ? on_compressed : NULL,
                                           on_finished, &out}};
        st = lmp_run_compare(ctx, c, &opts, &r);
    }
    if (!st) st = write_outputs(r, &out, 1);
    int rc = 0;
    if (interrupt_signal) { /* one message, not the "interrupted" error of the loop it stopped */
        const char *kept = out.path[0] && strcmp(out.path[0], "-") ? out.path[0] : NULL;
        fprintf(stderr, "lmpress: error: stopped by %s; %s%s%s\n", interrupt_signal == SIGINT ? "SIGINT" : "SIGTERM",
                kept ? "every finished variant is kept in " : "the finished rows are above",
                kept ? kept : "", kept ? " (run again with --resume to finish)" : "");
        rc = 128 + interrupt_signal;
    } else if (st) rc = fail_on(ctx);
    else if (r && r->n_failed) {
        fprintf(stderr, "lmpress: error: %d variant%s failed (see above); the report holds the others\n",
                r->n_failed, r->n_failed == 1 ? "" : "s");
        rc = 1;
    } else if (out.output && !out.exported) { /* another tool's file, or taken from --resume: nothing ran */
        fprintf(stderr, "lmpress: error: --output %s: nothing was written: the variant was not compressed in this run "
                        "(another tool's file, or taken from --resume)\n", out.output);
        rc = 1;
    } else if (out.export_failures) {
        fprintf(stderr, "lmpress: error: %d variant%s could not be exported (see above)\n", out.export_failures,
                out.export_failures == 1 ? "" : "s");
        rc = 1;
    }
    lmp_report_free(r);
    lmp_json_free(prior);
    free(which);
    free(rerun);
    for (int k = 0; k < N_REPORTS; k++) lmp_outlock_release(&locks[k]);
    for (int k = 0; k < out.n_analyses; k++) {
        lmp_analysis_doc_free(analysis_docs[k]);
        lmp_json_free(out.analysis_json[k]);
    }
    lmp_config_free(c);
    return rc;
}

/* ---- analyze ------------------------------------------------------------------------------- */
typedef struct analysis_writer {
    void (*fn)(const lmp_analysis *, FILE *);
    const lmp_analysis *a;
} analysis_writer;

static void call_analysis_writer(const void *arg, FILE *f)
{
    const analysis_writer *w = arg;
    w->fn(w->a, f);
}

/* "1,2,4,8" into counts[max]; returns the count, or -1 (after a message) on a bad list. */
static int parse_curve(const char *s, int *counts, int max)
{
    int n = 0;
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > 1000000 || (*end && *end != ',') || n == max) {
            fprintf(stderr, "lmpress: --curve wants counts >= 0 separated by commas (at most %d), not \"%s\"\n", max, s);
            return -1;
        }
        counts[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* analyze --json FILE: rewritten after every unit with the units finished so far, so an
 * interrupted scan keeps them (--resume takes them back). */
static void call_progress_writer(const void *arg, FILE *f) { lmp_analysis_progress_json(arg, f); }

static int write_unit_progress(const lmp_analysis *a, void *ud)
{
    return lmp_outfile_write(ud, call_progress_writer, a);
}

static int cmd_analyze(lmp_ctx *ctx, int argc, char **argv, int64_t threads)
{
    enum { MAX_CURVE = 64 };
    enum { N_AN_OUT = 5 };
    const char *cfg_path = NULL, *variant = NULL, *backend = NULL, *paths[N_AN_OUT] = {NULL, NULL, NULL, NULL, NULL};
    const char *const path_opts[N_AN_OUT] = {"--json", "--csv", "--svg", "--write-config", "--html"};
    void (*const fns[N_AN_OUT])(const lmp_analysis *, FILE *) = {lmp_analysis_json, lmp_analysis_csv, lmp_analysis_svg,
                                                                 lmp_analysis_config, lmp_analysis_html};
    lmp_analyze_opts o = {.curve_seeds = 3};
    int curve[MAX_CURVE], bad = 0, seeds_given = 0, resume = 0;
    int64_t top = 20, num;
    if (wants_help(argc, argv)) {
        fputs(usage_analyze, stdout);
        return 0;
    }
    for (int i = 0; i < argc && !bad; i++) {
        const char *v;
        int k = 0;
        while (k < N_AN_OUT && strcmp(argv[i], path_opts[k]) != 0) k++;
        if (k < N_AN_OUT) paths[k] = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--variant") == 0) variant = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--backend") == 0) backend = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--keep-params") == 0) o.keep_params = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--resume") == 0) resume = 1;
        else if (strcmp(argv[i], "--mode") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && (int)(o.mode = lmp_an_mode_by_name(v)) < 0)
                return usage_error(usage_analyze, "--mode %s: expected restore-one or quantize-one", v);
        } else if (strcmp(argv[i], "--per") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && (int)(o.gran = lmp_an_gran_by_name(v)) < 0)
                return usage_error(usage_analyze, "--per %s: expected linear, block or role", v);
        } else if (strcmp(argv[i], "--rank") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && strcmp(v, "proxy") != 0 && strcmp(v, "measured") != 0)
                return usage_error(usage_analyze, "--rank %s: expected measured or proxy", v);
            if (v) o.rank_proxy = strcmp(v, "proxy") == 0;
        } else if (strcmp(argv[i], "--metric") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && (int)(o.metric = lmp_an_metric_by_name(v)) < 0)
                return usage_error(usage_analyze, "--metric %s: expected kld, ppl, top1 or lambada", v);
        } else if (strcmp(argv[i], "--skip-top") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--skip-top", 1, &num)) return 2;
            if (v) o.skip_top = num > 1000000 ? 1000000 : (int)num;
        } else if (strcmp(argv[i], "--top") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--top", 0, &top)) return 2;
        } else if (strcmp(argv[i], "--curve-seeds") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--curve-seeds", 0, &num)) return 2;
            if (v) o.curve_seeds = num > 100 ? 100 : (int)num, seeds_given = 1;
        } else if (strcmp(argv[i], "--curve") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && (o.n_curve = parse_curve(v, curve, MAX_CURVE)) < 0) return 2;
            o.curve = curve;
        } else if (strcmp(argv[i], "--target") == 0) {
            if (!(v = opt_value(argc, argv, &i, &bad))) continue;
            const char *eq = strchr(v, '=');
            char name[16] = "";
            if (eq && (size_t)(eq - v) < sizeof name) memcpy(name, v, (size_t)(eq - v));
            char *end = NULL;
            errno = 0;
            o.target = eq ? strtod(eq + 1, &end) : NAN;
            if (!eq || (int)(o.target_metric = lmp_an_metric_by_name(name)) < 0 || errno || !end || end == eq + 1 || *end ||
                !isfinite(o.target))
                return usage_error(usage_analyze, "--target %s: expected METRIC=X, METRIC kld, ppl, top1 or lambada "
                                                  "(top1 and lambada as fractions: lambada=0.3)", v);
            if (lmp_an_check_target(o.target_metric, o.target)) /* one no skip list can reach: before any work */
                return usage_error(usage_analyze, "%s", lmp_last_error());
            o.have_target = 1;
        } else if (trust_option(ctx, argc, argv, &i, &bad, 0)) continue;
        else if (argv[i][0] == '-') return usage_error(usage_analyze, "unknown option %s", argv[i]);
        else if (cfg_path) return usage_error(usage_analyze, "unexpected argument %s", argv[i]);
        else cfg_path = argv[i];
    }
    if (bad) return 2;
    if (!cfg_path) return usage_error(usage_analyze, "%s", "a CONFIG file is required");
    if (o.have_target && o.skip_top) return usage_error(usage_analyze, "%s", "--skip-top and --target exclude each other");
    if (paths[3] && !o.have_target && !o.skip_top)
        return usage_error(usage_analyze, "%s", "--write-config needs a skip list: --skip-top K or --target METRIC=X");
    if (o.keep_params && !o.have_target && !o.skip_top && !o.n_curve)
        return usage_error(usage_analyze, "%s", "--keep-params goes with --skip-top, --target or --curve");
    if (seeds_given && !o.n_curve) return usage_error(usage_analyze, "%s", "--curve-seeds goes with --curve");
    if (resume && (!paths[0] || lmp_outfile_is_stdout(paths[0])))
        return usage_error(usage_analyze, "%s", "--resume needs --json FILE: the analysis it resumes");
    if (resume && o.rank_proxy)
        return usage_error(usage_analyze, "%s", "--rank proxy evaluates no unit: there is nothing to --resume");
    o.check_config = paths[3] != NULL;
    int to_stdout = 0;
    for (int k = 0; k < N_AN_OUT; k++) to_stdout += lmp_outfile_is_stdout(paths[k]);
    if (to_stdout > 1)
        return usage_error(usage_analyze, "%s", "only one of --json, --csv, --svg, --write-config and --html can be \"-\"");
    const int lead = lmp_dist_rank(lmp_host_dist(ctx)) == 0; /* rank 0 of an MPI run writes the results */
    for (int k = 0; k < N_AN_OUT && !lead; k++) paths[k] = NULL;
    int st = 0; /* through st, as in cmd_compare: rank 0's output files are checked on rank 0 only */
    for (int k = 0; k < N_AN_OUT && !st; k++)
        if (paths[k] && !lmp_outfile_is_stdout(paths[k])) st = lmp_outfile_check(paths[k], path_opts[k]);
    lmp_run_config *c = NULL;
    lmp_outlock locks[N_AN_OUT] = {{.fd = -1}, {.fd = -1}, {.fd = -1}, {.fd = -1}, {.fd = -1}};
    if (!st) st = lmp_config_load(ctx, cfg_path, &c);
    if (!st && backend) st = override_backend(c, backend);
    if (!st) { /* no output is an input or another output (base/outfile.h) */
        const int max_in = lmp_config_inputs_max(c);
        lmp_named_path *in = calloc((size_t)max_in + 1, sizeof *in), outs[N_AN_OUT];
        for (int k = 0; k < N_AN_OUT; k++) outs[k] = (lmp_named_path){paths[k], path_opts[k]};
        st = in ? lmp_outfile_distinct(outs, N_AN_OUT, in, lmp_config_inputs(c, in, max_in)) : lmp_fail(LMP_ENOMEM, "out of memory");
        free(in);
    }
    for (int k = 0; k < N_AN_OUT && !st; k++) /* one run per output file at a time (base/outlock.h) */
        if (paths[k] && !lmp_outfile_is_stdout(paths[k])) st = lmp_outlock_take(&locks[k], paths[k], path_opts[k]);
    lmp_json *prior = NULL;
    if (!st && resume && paths[0] && access(paths[0], F_OK) == 0) st = read_table(paths[0], &prior);
    else if (!st && resume && paths[0]) lmp_log(ctx, LMP_LOG_INFO, "%s does not exist yet: nothing to resume", paths[0]);
    o.resume = prior;
    o.resume_path = paths[0];
    if (paths[0] && !lmp_outfile_is_stdout(paths[0])) { /* each finished unit kept at once */
        o.unit_done = write_unit_progress;
        o.ud = (void *)paths[0];
    }
    if (!st) st = apply_threads(c, threads);
    st = dist_same_config(ctx, st, c);
    if (!st) { /* the variant: named, or the only one with a pipeline */
        o.variant = -1;
        int pipelines = 0;
        for (int i = 0; i < c->n_variants; i++) {
            if (variant && strcmp(c->variants[i].name, variant) == 0) o.variant = i;
            if (!variant && c->variants[i].n_stages && pipelines++ == 0) o.variant = i;
        }
        if (!variant && pipelines != 1)
            st = lmp_fail(LMP_EINVAL, "%s: %d variants with a pipeline: choose one with --variant NAME", cfg_path, pipelines);
        else if (o.variant < 0) {
            char hint[160];
            variant_hint(c, variant, hint, sizeof hint);
            st = lmp_fail(LMP_EINVAL, "%s: no variant named '%s'%s", cfg_path, variant, hint);
        }
    }
    lmp_analysis *a = NULL;
    if (!st) {
        catch_interrupts(ctx);
        st = lmp_analyze(ctx, c, &o, &a);
    }
    /* "-": that output alone on standard output; the table then goes to standard error */
    if (!st && lead) lmp_analysis_table(a, to_stdout ? stderr : stdout, (int)top);
    for (int k = 0; k < N_AN_OUT && !st; k++) {
        if (!paths[k]) continue;
        if (lmp_outfile_is_stdout(paths[k])) {
            fns[k](a, stdout);
            fflush(stdout);
            continue;
        }
        analysis_writer w = {fns[k], a};
        st = lmp_outfile_write(paths[k], call_analysis_writer, &w);
    }
    for (int k = 0; k < N_AN_OUT; k++) lmp_outlock_release(&locks[k]);
    int rc = 0;
    if (interrupt_signal) {
        const char *kept = o.unit_done ? paths[0] : NULL;
        fprintf(stderr, "lmpress: error: stopped by %s; %s%s%s\n", interrupt_signal == SIGINT ? "SIGINT" : "SIGTERM",
                kept ? "the finished units are kept in " : "nothing is kept (--json FILE keeps each finished unit)",
                kept ? kept : "", kept ? " (run again with --resume to finish)" : "");
        rc = 128 + interrupt_signal;
    } else if (st) rc = fail_on(ctx);
    lmp_analysis_free(a);
    lmp_json_free(prior);
    lmp_config_free(c);
    return rc;
}

static int cmd_check(lmp_ctx *ctx, int argc, char **argv)
{
    if (wants_help(argc, argv)) {
        fputs(usage_check, stdout);
        return 0;
    }
    const char *cfg_path = NULL;
    int bad = 0;
    for (int i = 0; i < argc && !bad; i++) {
        if (trust_option(ctx, argc, argv, &i, &bad, 0)) continue;
        if (argv[i][0] == '-') return usage_error(usage_check, "unknown option %s", argv[i]);
        if (cfg_path) return usage_error(usage_check, "%s", "expected exactly one CONFIG file");
        cfg_path = argv[i];
    }
    if (bad) return 2;
    if (!cfg_path) return usage_error(usage_check, "%s", "expected exactly one CONFIG file");
    lmp_run_config *c;
    if (lmp_config_load(ctx, cfg_path, &c)) return fail();
    /* The model's header gives its linears' names: a pattern that matches none is a typo that
     * would otherwise leave a variant silently unquantized. */
    lmp_model *m = NULL;
    lmp_tokenizer *tok = NULL;
    int st = lmp_model_load(c->model_path, &m);
    if (!st) st = lmp_model_rotate(m, &c->rotate); /* a family it refuses is refused here */
    /* what compare refuses before any work: patterns, contexts, imatrix, block formats ... */
    if (!st) st = lmp_run_check_model(ctx, c, m, NULL);
    /* and a tokenizer whose ids do not fit the model (tokenizer_open.h) */
    if (!st) st = lmp_open_tokenizer(m, c->tokenizer_path, &tok);
    lmp_tokenizer_free(tok);
    lmp_model_free(m);
    if (st) {
        lmp_config_free(c);
        return fail();
    }
    printf("%s: ok: model %s, backend %s, %d variant%s\n", cfg_path, c->model_path, c->backend_name,
           c->n_variants, c->n_variants == 1 ? "" : "s");
    for (int i = 0; i < c->n_variants; i++) {
        printf("  %s:", c->variants[i].name);
        if (c->variants[i].model_path) printf(" external model %s", c->variants[i].model_path);
        else if (!c->variants[i].n_stages) printf(" (unmodified)");
        for (int s = 0; s < c->variants[i].n_stages; s++)
            printf("%s %s", s ? " ->" : "", c->variants[i].stages[s].plugin->desc->name);
        if (c->variants[i].n_stages && c->variants[i].calib_inputs != LMP_CALIB_INPUTS_COMPRESSED)
            printf(" (calibration inputs: %s)", lmp_calib_inputs_name(c->variants[i].calib_inputs));
        if (c->variants[i].imatrix)
            printf(" (imatrix %s: %lld entries)", c->variants[i].imatrix_path, (long long)c->variants[i].imatrix->n_entries);
        if (c->variants[i].kv.type != LMP_KV_NONE) { /* the KV cache's simulated quantization */
            char kv[64];
            printf(" (KV cache: %s)", lmp_kv_describe(&c->variants[i].kv, kv, sizeof kv));
        }
        printf("\n");
    }
    lmp_config_free(c);
    return 0;
}

/* ---- eval / generate: a model without a config ---------------------------------------------- */
int direct_open(lmp_ctx *ctx, direct_run *d, const char *model, const char *tokenizer, const char *backend)
{
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    int st = lmp_registry_init(&d->reg, ctx, NULL, 0);
    if (!st) st = lmp_backend_open(ctx, &d->reg, backend, NULL, &d->be);
    if (!st) lmp_host_set_backend(ctx, &d->be);
    if (!st) st = lmp_model_load(model, &d->m);
    if (!st) st = lmp_open_tokenizer(d->m, tokenizer, &d->tok);
    return st;
}

void direct_close(direct_run *d)
{
    lmp_tokenizer_free(d->tok);
    lmp_model_free(d->m);
    lmp_host_set_backend(d->ctx, NULL);
    if (d->be.vt) lmp_backend_close(&d->be);
    lmp_registry_free(&d->reg);
}

void print_json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", (unsigned char)*s);
        else putchar(*s);
    }
    putchar('"');
}

static int cmd_eval(lmp_ctx *ctx, int argc, char **argv)
{
    const char *model = NULL, *tokenizer = NULL, *text = NULL, *backend = "cpu", *lambada = NULL, *kld_base = NULL;
    int64_t L = 0, max_windows = 0, lambada_max = 0;
    int json = 0, bad = 0, second_half = 0;
    if (wants_help(argc, argv)) {
        fputs(usage_eval, stdout);
        return 0;
    }
    for (int i = 0; i < argc && !bad; i++) {
        const char *v;
        if (strcmp(argv[i], "--text") == 0) text = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--tokenizer") == 0) tokenizer = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--backend") == 0) backend = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--score-second-half") == 0) second_half = 1;
        else if (trust_option(ctx, argc, argv, &i, &bad, 0)) continue;
        else if (strcmp(argv[i], "--lambada") == 0) lambada = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--kl-divergence-base") == 0) kld_base = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--lambada-max") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--lambada-max", 0, &lambada_max)) return 2;
        }
        else if (strcmp(argv[i], "--seq-len") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--seq-len", 2, &L)) return 2;
        } else if (strcmp(argv[i], "--max-windows") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--max-windows", 0, &max_windows)) return 2;
        } else if (argv[i][0] == '-') return usage_error(usage_eval, "unknown option %s", argv[i]);
        else if (model) return usage_error(usage_eval, "unexpected argument %s", argv[i]);
        else model = argv[i];
    }
    if (bad) return 2;
    if (kld_base && (lambada || (!text && !lmp_llama_logits_is(kld_base))))
        return usage_error(usage_eval, "%s", "--kl-divergence-base compares on --text FILE (not --lambada)");
    if (!text && !lambada && !kld_base) return usage_error(usage_eval, "%s", "--text FILE or --lambada FILE is required");
    if (!model) model = DEFAULT_MODEL;
    if (kld_base)
        return cmd_eval_kld(ctx, &(eval_kld_args){.model = model, .base = kld_base, .tokenizer = tokenizer,
                                                  .text = text, .backend = backend, .seq_len = L,
                                                  .max_windows = max_windows, .second_half = second_half,
                                                  .json = json});
    direct_run d;
    int st = direct_open(ctx, &d, model, tokenizer, backend);
    int32_t *ids = NULL;
    int64_t n = 0;
    lmp_score score = {0};
    lmp_lambada_score lscore = {0};
    if (!st && L == 0) L = d.m->arch.seq_len;
    if (!st && L > d.m->arch.seq_len)
        st = lmp_fail(LMP_EINVAL, "--seq-len %lld exceeds the model's context of %lld", (long long)L,
                      (long long)d.m->arch.seq_len);
    /* Every input is read before any evaluation, so a bad one fails at once. */
    lmp_lambada lam;
    int have_lam = 0;
    if (!st && text) st = lmp_tokenize_file(d.tok, text, &ids, &n);
    if (!st && lambada) have_lam = (st = lmp_lambada_load(lambada, d.tok, lambada_max, &lam)) == 0;
    int64_t windows = !st && text ? lmp_eval_windows(n, L, max_windows) : 0;
    if (!st && text && windows == 0)
        st = lmp_fail(LMP_EINVAL, "%s: %lld tokens, too short for one evaluation window of %lld", text, (long long)n,
                      (long long)L);
    /* block by block: one block's weights in memory at a time (eval/stream.h) */
    lmp_ref_logprobs no_cache = {.store.fd = -1};
    if (!st) {
        lmp_stream s;
        st = lmp_stream_begin(&s, ctx, &d.be, d.m, text ? 1 : 0, &ids, &windows, L, have_lam ? &lam : NULL, "eval");
        if (second_half) s.score_from = L / 2;
        if (!st) st = lmp_stream_model(&s, d.m, &no_cache, 1, &score, &lscore);
        lmp_stream_free(&s);
    }
    if (have_lam) lmp_lambada_free(&lam);
    if (!st && json) {
        printf("{\"model\": ");
        print_json_string(model);
        if (text) {
            printf(", \"text\": ");
            print_json_string(text);
            printf(", \"seq_len\": %lld, \"tokens\": %lld, \"windows\": %lld, \"scored\": %lld, \"ppl\": %.10g",
                   (long long)L, (long long)n, (long long)score.windows, (long long)score.scored, lmp_score_ppl(&score));
        }
        if (lambada)
            printf(", \"lambada\": {\"passages\": %lld, \"correct\": %lld, \"acc\": %.10g, \"stderr\": %.10g}",
                   (long long)lscore.passages, (long long)lscore.correct, lmp_lambada_acc(&lscore),
                   lmp_lambada_stderr(&lscore));
        printf("}\n");
    } else if (!st) {
        printf("model %s\n", model);
        if (text)
            printf("text %s: %lld tokens, %lld windows of %lld, %lld scored\nppl %.6f\n", text, (long long)n,
                   (long long)score.windows, (long long)L, (long long)score.scored, lmp_score_ppl(&score));
        if (lambada)
            printf("lambada %s: %lld of %lld passages correct, accuracy %.4f +/- %.4f\n", lambada,
                   (long long)lscore.correct, (long long)lscore.passages, lmp_lambada_acc(&lscore),
                   lmp_lambada_stderr(&lscore));
    }
    free(ids);
    direct_close(&d);
    return st ? fail() : 0;
}

/* llama2.c's safe_printf: skip a lone byte that is neither printable nor whitespace. */
static void print_piece(const char *p, size_t len)
{
    if (len == 1 && !isprint((unsigned char)p[0]) && !isspace((unsigned char)p[0])) return;
    fwrite(p, 1, len, stdout);
}

/* generate holds the model's blocks in f32 when they take at most this; a larger model's blocks
 * are read from the file one at a time at every step (slow, but one block in memory). */
#define GENERATE_HOLD_BYTES ((int64_t)1 << 30)

/* logits[T, vocab] of seq[0..T); x: [T, dim] scratch. */
static int generate_logits(direct_run *d, const int32_t *seq, int64_t T, float *x, float *logits)
{
    const lmp_model *m = d->m;
    if (lmp_model_block_linear_params(m) * m->arch.n_layers * 4 <= GENERATE_HOLD_BYTES) {
        const lmp_block *blocks = lmp_model_blocks(d->m);
        return blocks ? lmp_forward(&d->be, m, blocks, seq, T, 0, logits) : lmp_fail_prefix(LMP_EIO, "%s", m->path);
    }
    lmp_embed(m, seq, T, x);
    int st = 0;
    for (int64_t b = 0; b < m->arch.n_layers && !st; b++) {
        lmp_block blk;
        if ((st = lmp_model_block_copy(m, b, &blk))) break;
        st = lmp_block_forward(&d->be, &m->arch, &blk, T, x, NULL, NULL);
        lmp_block_free(&blk);
    }
    return st ? st : lmp_head(&d->be, m, T, x, 0, logits);
}

static int cmd_generate(lmp_ctx *ctx, int argc, char **argv)
{
    const char *model = NULL, *tokenizer = NULL, *prompt = "", *backend = "cpu";
    int64_t steps = 256;
    int bad = 0;
    if (wants_help(argc, argv)) {
        fputs(usage_generate, stdout);
        return 0;
    }
    for (int i = 0; i < argc && !bad; i++) {
        const char *v;
        if (strcmp(argv[i], "--tokenizer") == 0) tokenizer = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--prompt") == 0) prompt = opt_value(argc, argv, &i, &bad);
        else if (trust_option(ctx, argc, argv, &i, &bad, 0)) continue;
        else if (strcmp(argv[i], "--backend") == 0) backend = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--steps") == 0) {
            if ((v = opt_value(argc, argv, &i, &bad)) && parse_count(v, "--steps", 1, &steps)) return 2;
        } else if (argv[i][0] == '-') return usage_error(usage_generate, "unknown option %s", argv[i]);
        else if (model) return usage_error(usage_generate, "unexpected argument %s", argv[i]);
        else model = argv[i];
    }
    if (bad) return 2;
    if (!model) model = DEFAULT_MODEL;
    direct_run d;
    int st = direct_open(ctx, &d, model, tokenizer, backend);
    int32_t *prompt_ids = NULL, *seq = NULL;
    int64_t n_prompt = 0;
    float *logits = NULL, *x = NULL;
    if (!st) st = lmp_tokenize(d.tok, prompt, strlen(prompt), lmp_tokenizer_adds_bos(d.tok), &prompt_ids, &n_prompt);
    if (!st && n_prompt == 0) { /* nothing to start from: BOS, or EOS for vocabularies without one */
        free(prompt_ids);
        prompt_ids = malloc(sizeof *prompt_ids);
        if (!prompt_ids) st = lmp_fail(LMP_ENOMEM, "out of memory");
        else prompt_ids[0] = lmp_tokenizer_bos(d.tok) >= 0 ? lmp_tokenizer_bos(d.tok) : lmp_tokenizer_eos(d.tok);
        n_prompt = 1;
    }
    if (!st) {
        if (steps > d.m->arch.seq_len) steps = d.m->arch.seq_len;
        seq = malloc((size_t)steps * sizeof *seq);
        logits = malloc((size_t)(steps * d.m->arch.vocab) * sizeof *logits);
        x = malloc((size_t)(steps * d.m->arch.dim) * sizeof *x);
        if (!seq || !logits || !x) st = lmp_fail(LMP_ENOMEM, "out of memory");
    }
    /* As llama2.c's generate(): feed the prompt, then the argmax; stop at BOS or after `steps`.
     * Without a KV cache each step reruns the sequence so far: fine for small models. */
    int64_t V = st ? 0 : d.m->arch.vocab;
    int32_t token = st ? 0 : prompt_ids[0];
    if (!st && !lmp_tokenizer_adds_bos(d.tok) && token != lmp_tokenizer_bos(d.tok)) {
        size_t len; /* the first token is text here, not a BOS marker: show it */
        const char *piece = lmp_tokenizer_decode(d.tok, -1, token, &len);
        print_piece(piece, len);
    }
    for (int64_t pos = 0; pos < steps && !st; pos++) {
        seq[pos] = token;
        int32_t next;
        if (pos < n_prompt - 1) {
            next = prompt_ids[pos + 1];
        } else {
            if ((st = generate_logits(&d, seq, pos + 1, x, logits))) break;
            const float *last = logits + pos * V;
            next = 0;
            for (int64_t v = 1; v < V; v++)
                if (last[v] > last[next]) next = (int32_t)v;
        }
        if (next == lmp_tokenizer_bos(d.tok)) break;
        size_t len;
        const char *piece = lmp_tokenizer_decode(d.tok, token, next, &len);
        print_piece(piece, len);
        fflush(stdout);
        token = next;
    }
    if (!st) printf("\n");
    free(prompt_ids);
    free(seq);
    free(logits);
    free(x);
    direct_close(&d);
    return st ? fail() : 0;
}

/* ---- tokenize ------------------------------------------------------------------------------ */

/* A tokenizer.json or GGUF given alone needs no model. */
static int standalone_tokenizer(const char *path, lmp_tokenizer **out, int *done)
{
    *done = 0;
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".json") == 0) {
        *done = 1;
        return lmp_tokenizer_load_hf(path, out);
    }
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    int is_gguf = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    if (!is_gguf) return 0;
    *done = 1;
    lmp_gguf *g = NULL;
    int st = lmp_gguf_open(path, &g);
    if (!st) st = lmp_tokenizer_load_gguf(g, out);
    lmp_gguf_close(g);
    return st;
}

static int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *tokenizer = NULL, *file = NULL, *text = NULL;
    int json = 0, no_bos = 0, special = 0, bad = 0;
    if (wants_help(argc, argv)) {
        fputs(usage_tokenize, stdout);
        return 0;
    }
    const char *pos[2];
    int n_pos = 0;
    for (int i = 0; i < argc && !bad; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0) tokenizer = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--file") == 0) file = opt_value(argc, argv, &i, &bad);
        else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--no-bos") == 0) no_bos = 1;
        else if (strcmp(argv[i], "--parse-special") == 0) special = 1;
        else if (strcmp(argv[i], "--") == 0) { /* the rest is TEXT, even if it starts with '-' */
            for (i++; i < argc; i++) {
                if (n_pos == 2) return usage_error(usage_tokenize, "unexpected argument %s", argv[i]);
                pos[n_pos++] = argv[i];
            }
        } else if (argv[i][0] == '-' && argv[i][1]) return usage_error(usage_tokenize, "unknown option %s", argv[i]);
        else if (n_pos == 2) return usage_error(usage_tokenize, "unexpected argument %s", argv[i]);
        else pos[n_pos++] = argv[i];
    }
    if (bad) return 2;
    /* TEXT is the last positional argument unless --file gives the text; MODEL comes before it */
    int want_text = file == NULL;
    if (n_pos > want_text + 1) return usage_error(usage_tokenize, "unexpected argument %s", pos[n_pos - 1]);
    if (want_text && n_pos == 0) return usage_error(usage_tokenize, "%s", "TEXT or --file F is required");
    if (want_text) text = pos[n_pos - 1];
    if (n_pos > want_text) model = pos[0];
    if (model && tokenizer)
        return usage_error(usage_tokenize, "give --tokenizer FILE or MODEL, not both (%s)", model);

    lmp_tokenizer *tok = NULL;
    lmp_model *m = NULL;
    int done = 0, st = tokenizer ? standalone_tokenizer(tokenizer, &tok, &done) : 0;
    if (!st && !done) { /* the model's tokenizer, or a llama2.c file sized by the model */
        st = lmp_model_load(model ? model : DEFAULT_MODEL, &m);
        if (!st) st = lmp_open_tokenizer(m, tokenizer, &tok);
    }
    char *data = NULL;
    size_t len = 0;
    if (!st && file) st = lmp_read_file(file, &data, &len);
    int32_t *ids = NULL;
    int64_t n = 0;
    if (!st) {
        unsigned flags = (!no_bos && lmp_tokenizer_adds_bos(tok) ? LMP_TOKENIZE_ADD_BOS : 0u) |
                         (special ? LMP_TOKENIZE_PARSE_SPECIAL : 0u);
        st = lmp_tokenize_ex(tok, file ? data : text, file ? len : strlen(text), flags, &ids, &n);
        if (st && file) lmp_fail_prefix(st, "%s", file);
    }
    if (!st) {
        fputs(json ? "[" : "", stdout);
        for (int64_t i = 0; i < n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", (int)ids[i]);
        fputs(json ? "]\n" : "\n", stdout);
        if (fflush(stdout) || ferror(stdout)) st = lmp_fail(LMP_EIO, "cannot write the ids to standard output");
    }
    free(ids);
    free(data);
    lmp_tokenizer_free(tok);
    lmp_model_free(m);
    return st ? fail() : 0;
}

/* ---- plugins ------------------------------------------------------------------------------- */
static const char *type_name(lmp_param_type t)
{
    switch (t) {
    case LMP_PARAM_BOOL: return "bool";
    case LMP_PARAM_INT: return "int";
    case LMP_PARAM_FLOAT: return "float";
    case LMP_PARAM_ENUM: return "enum";
    case LMP_PARAM_STRING: return "string";
    }
    return "?";
}

static void print_param(const lmp_param_spec *p)
{
    char def[128] = "", range[256] = "";
    switch (p->type) {
    case LMP_PARAM_BOOL: snprintf(def, sizeof def, "%s", p->def_num ? "true" : "false"); break;
    case LMP_PARAM_INT:
        snprintf(def, sizeof def, "%lld", (long long)p->def_num);
        snprintf(range, sizeof range, "%lld..%lld", (long long)p->min, (long long)p->max);
        break;
    case LMP_PARAM_FLOAT:
        snprintf(def, sizeof def, "%g", p->def_num);
        snprintf(range, sizeof range, "%g..%g", p->min, p->max);
        break;
    case LMP_PARAM_ENUM:
        snprintf(def, sizeof def, "\"%s\"", p->choices[(int)p->def_num]);
        for (int i = 0; p->choices[i]; i++)
            snprintf(range + strlen(range), sizeof range - strlen(range), "%s%s", i ? "|" : "", p->choices[i]);
        break;
    case LMP_PARAM_STRING: snprintf(def, sizeof def, "\"%s\"", p->def_str ? p->def_str : ""); break;
    }
    if (p->flags & LMP_PARAM_REQUIRED) snprintf(def, sizeof def, "(required)");
    /* Help on its own line: long names and enum ranges would push it out of any fixed column. */
    printf("    %-20s %-6s %-12s %s\n", p->name, type_name(p->type), def, range);
    if (p->help) printf("        %s\n", p->help);
}

static void report_bad_plugin(const char *path, const char *msg)
{
    (void)path;
    printf("  [not loaded] %s\n", msg);
}

/* What the listing's grid parameters mean for the files lmpress writes and reads. */
static const char *const grids_and_files =
    "Weight grids: rtn, rtn_mse, gptq and sparse24 share bits, sym, granularity, group_size,\n"
    "rounding, clip, format, scale_dtype, importance and sym_scale (plugins/common/wgrid.h,\n"
    "docs/algorithms.md section 1).  format = \"int\" is the integer grid of bits/sym/granularity\n"
    "(sym_scale: qmax, full or signed), its scales rounded to scale_dtype; \"q8_0\", \"q4_0\", \"q4_1\",\n"
    "\"q5_0\", \"q5_1\", \"iq4_nl\" are GGUF's blocks of 32 and \"q2_k\" .. \"q6_k\" its k-quants'\n"
    "super-blocks of 256 (narrower rows take llama-quantize's fallback type), computed as ggml computes\n"
    "them, and with importance = \"calibration\" searched as llama-quantize --imatrix searches them,\n"
    "weighted by lmpress's own calibration; importance = \"imatrix\" weights the same search by a\n"
    "llama.cpp importance matrix (llama-imatrix's .gguf or legacy .dat, or `lmpress imatrix`'s) named in the config:\n"
    "imatrix = \"file\"; at the top level or in a variant.  \"nf4\" is bitsandbytes' NF4 in blocks of\n"
    "64 (no importance; a GGUF export stores it as F32).  \"fp8_e4m3\", \"fp8_e5m2\", \"nvfp4\", \"mxfp4\",\n"
    "\"mxfp8\" are compressed-tensors' floating-point grids (FP8 per tensor, channel, group, or with\n"
    "granularity = \"block\" per group_size x group_size block: FP8_BLOCK's 128 x 128 weights).\n"
    "Files: `run --output X.gguf` / `compare --output-dir DIR` store a linear on a GGUF grid in that\n"
    "GGUF type; `--output DIR` (or --output-format hf) stores an int linear as compressed-tensors\n"
    "(int-quantized at 8 bits, pack-quantized below), scales in scale_dtype.  Each weight is written\n"
    "as its code on the grid the strategy recorded and checked to read back as evaluated.\n"
    "Other tools' files: a variant `{ name = \"x\"; model = \"file\"; }` evaluates a GGUF (any type\n"
    "lmpress reads), llama2.c, safetensors or compressed-tensors (int4/int8) model in the same table.\n";

static int cmd_plugins(lmp_ctx *ctx, int argc, char **argv)
{
    int bad = 0;
    if (wants_help(argc, argv)) {
        fputs(usage_plugins, stdout);
        return 0;
    }
    /* Listing is what plugins does: an --allow-plugin folder is listed too (searched). */
    const char *only = NULL;
    for (int i = 0; i < argc && !bad; i++) {
        if (trust_option(ctx, argc, argv, &i, &bad, 1)) continue;
        if (argv[i][0] == '-') return usage_error(usage_plugins, "unknown option %s", argv[i]);
        if (only) return usage_error(usage_plugins, "unexpected argument %s", argv[i]);
        only = argv[i];
    }
    if (bad) return 2;
    lmp_registry reg;
    if (lmp_registry_init(&reg, ctx, NULL, 0)) return fail();
    int failures = 0, shown = 0, has_grid = 0;
    if (only) { /* one plugin: the files that fail to load are not its business unless it is among them */
        failures = lmp_registry_scan(&reg, NULL);
    } else {
        printf("search path:");
        for (int i = 0; i < reg.n_search; i++) printf(" %s", reg.search[i]);
        printf("\nhost plugin ABI %d.%d\n\n", LMP_ABI_MAJOR, LMP_ABI_MINOR);
        failures = lmp_registry_scan(&reg, report_bad_plugin);
    }
    for (int i = 0; i < reg.n; i++) {
        const lmp_plugin *p = reg.items[i];
        const lmp_plugin_desc *d = p->desc;
        if (only && strcmp(d->name, only) != 0) continue;
        shown++;
        for (uint32_t k = 0; k < d->n_params; k++) has_grid |= strcmp(d->params[k].name, "format") == 0;
        printf("%s %s %s (ABI %u.%u) %s\n  %s\n  %s\n", lmp_kind_name(d->kind), d->name, d->version,
               d->abi_major, d->abi_minor, p->path, d->summary ? d->summary : "",
               p->usable ? "usable here" : "NOT usable here");
        if (!p->usable) printf("    reason: %s\n", p->reason);
        if (d->n_params) printf("  parameters:\n");
        for (uint32_t k = 0; k < d->n_params; k++) print_param(&d->params[k]);
        printf("\n");
    }
    if (only && !shown) { /* an unknown name: the nearest one */
        enum { MAX_NAMES = 256 };
        const char *names[MAX_NAMES];
        size_t n = 0;
        for (int i = 0; i < reg.n && n < MAX_NAMES; i++) names[n++] = reg.items[i]->desc->name;
        const char *near = lmp_suggest(only, names, n);
        lmp_fail(LMP_EINVAL, "no plugin named '%s'%s%s%s (`lmpress plugins` lists them all%s)", only,
                 near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "",
                 failures ? ", and says why some files failed to load" : "");
        lmp_registry_free(&reg);
        return fail();
    }
    if (reg.n == 0) printf("no plugins found\n");
    else if (!only || has_grid) fputs(grids_and_files, stdout);
    lmp_registry_free(&reg);
    return failures && !only ? 1 : 0;
}

static int run_command(lmp_ctx *ctx, const char *cmd, int argc, char **argv, int64_t threads)
{
    if (strcmp(cmd, "compare") == 0) return cmd_compare(ctx, argc, argv, 0, threads);
    if (strcmp(cmd, "run") == 0) return cmd_compare(ctx, argc, argv, 1, threads);
    if (strcmp(cmd, "quantize") == 0) return lmp_cmd_quantize(ctx, argc, argv, threads, cmd_compare);
    if (strcmp(cmd, "check") == 0) return cmd_check(ctx, argc, argv);
    if (strcmp(cmd, "analyze") == 0) return cmd_analyze(ctx, argc, argv, threads);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(ctx, argc, argv);
    if (strcmp(cmd, "generate") == 0) return cmd_generate(ctx, argc, argv);
    if (strcmp(cmd, "plugins") == 0) return cmd_plugins(ctx, argc, argv);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc, argv);
    if (strcmp(cmd, "diff") == 0) return cmd_diff(argc, argv);
    if (strcmp(cmd, "imatrix") == 0) return cmd_imatrix(ctx, argc, argv, DEFAULT_MODEL);
    static const char *const commands[] = {"compare", "run",     "check",    "analyze", "eval",
                                           "generate", "plugins", "tokenize", "diff",   "quantize", "imatrix"};
    const char *near = lmp_suggest(cmd, commands, sizeof commands / sizeof *commands);
    char msg[160];
    snprintf(msg, sizeof msg, "unknown command '%.60s'%s%s%s", cmd, near ? " (did you mean " : "", near ? near : "",
             near ? "?)" : "");
    return usage_error(usage_main, "%s", msg);
}

/* --threads N (argv[*i]; the value is consumed): into *threads, and OPENBLAS_NUM_THREADS for
 * the plugins that load OpenBLAS later (apply_threads).  Returns 0, or 2 after a message. */
static int threads_option(int argc, char **argv, int *i, int64_t *threads)
{
    int bad = 0;
    const char *v = opt_value(argc, argv, i, &bad);
    if (bad || parse_count(v, "--threads", 1, threads)) return 2;
    if (*threads > 256) {
        fprintf(stderr, "lmpress: --threads %s: at most 256 (the cpu backend's limit)\n", v);
        return 2;
    }
    char n[24];
    snprintf(n, sizeof n, "%lld", (long long)*threads);
    setenv("OPENBLAS_NUM_THREADS", n, 1);
    return 0;
}

/* The global options, then the command. */
static int run_args(lmp_ctx *ctx, int argc, char **argv)
{
    int i = 1;
    int64_t threads = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--threads") == 0) {
            if (threads_option(argc, argv, &i, &threads)) return 2;
        } else if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) lmp_host_set_verbosity(ctx, LMP_LOG_ERROR);
        else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) lmp_host_set_verbosity(ctx, LMP_LOG_DEBUG);
        else if (strcmp(argv[i], "--version") == 0) {
            printf("lmpress %s (plugin ABI %d.%d)\n", LMP_VERSION, LMP_ABI_MAJOR, LMP_ABI_MINOR);
            return 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_main, stdout);
            return 0;
        } else return usage_error(usage_main, "unknown option %s", argv[i]);
    }
    if (i >= argc) return usage_error(usage_main, "%s", "a command is required");
    const char *cmd = argv[i];
    int sub_argc = argc - i - 1;
    char **sub_argv = argv + i + 1;
    /* --quiet / --verbose / --threads N are also accepted after the command. */
    int k = 0;
    for (int j = 0; j < sub_argc; j++) {
        if (strcmp(sub_argv[j], "--threads") == 0) {
            if (threads_option(sub_argc, sub_argv, &j, &threads)) return 2;
        } else if (strcmp(sub_argv[j], "--quiet") == 0 || strcmp(sub_argv[j], "-q") == 0) lmp_host_set_verbosity(ctx, LMP_LOG_ERROR);
        else if (strcmp(sub_argv[j], "--verbose") == 0 || strcmp(sub_argv[j], "-v") == 0) lmp_host_set_verbosity(ctx, LMP_LOG_DEBUG);
        else sub_argv[k++] = sub_argv[j];
    }
    sub_argc = k;
    lmp_dist *dist = lmp_host_dist(ctx);
    if (dist && strcmp(cmd, "compare") != 0 && strcmp(cmd, "analyze") != 0)
        return lmp_dist_rank(dist) > 0 ? 2 : usage_error(usage_main, "only compare and analyze run over MPI ranks, "
                                                         "not '%s': run it without mpirun or srun", cmd);
    return run_command(ctx, cmd, sub_argc, sub_argv, threads);
}

int main(int argc, char **argv)
{
    /* The forward allocates its activations per call (tens of MB for a 512-token window); keep
     * freed memory in the heap instead of returning it to the kernel and faulting zeroed pages
     * in again on the next call (that cost 8 % of an evaluation). */
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's maximum on 64-bit */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    /* Past a file size limit (ulimit -f) a write should fail with EFBIG, reported with the file's
     * name, rather than the signal killing the process mid-report. */
    signal(SIGXFSZ, SIG_IGN);
    /* Under mpirun / srun: MPI starts here, before the plugins load (distrib.h). */
    lmp_dist *dist = NULL;
    if (lmp_dist_start(&argc, &argv, &dist)) return fail();
    /* The command is the run: its verbosity, trusted folders, backend, RNG and progress line. */
    lmp_ctx ctx;
    lmp_ctx_init(&ctx);
    lmp_host_set_dist(&ctx, dist);
    if (lmp_dist_rank(dist) > 0) lmp_host_set_verbosity(&ctx, LMP_LOG_WARN); /* rank 0 speaks for the run */
    int rc = run_args(&ctx, argc, argv);
    lmp_ctx_clear(&ctx);
    return lmp_dist_end(dist, rc);
}
