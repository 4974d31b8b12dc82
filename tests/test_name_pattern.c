/* test_name_pattern.c — core/analyze/name_pattern.c: the override pattern analyze writes for a
 * skip list is short (the block numbers alone for whole blocks, \d+ for a role in every block)
 * and selects exactly the intended linears, checked with the configs' own matcher against every
 * linear of stories260K, of a SmolLM2-shaped name list (30 blocks) and of 150 random sets. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/name_pattern.h"
#include "config/config.h"
#include "model/model.h"
#include "testutil.h"

#define MODEL LMP_SOURCE_DIR "/models/stories260K/stories260K.bin"

static const char *const hf_roles[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                       "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

typedef struct name_list {
    char **names;
    int64_t n_blocks;
    int n_lin;
} name_list;

static name_list make_names(const char *prefix, int64_t n_blocks, const char *const *suffixes, int n_lin)
{
    name_list l = {.names = calloc((size_t)(n_blocks * n_lin), sizeof(char *)), .n_blocks = n_blocks, .n_lin = n_lin};
    ck_assert_ptr_nonnull(l.names);
    for (int64_t b = 0; b < n_blocks; b++)
        for (int i = 0; i < n_lin; i++) {
            char s[256];
            snprintf(s, sizeof s, "%s%lld.%s", prefix, (long long)b, suffixes[i]);
            l.names[b * n_lin + i] = strdup(s);
        }
    return l;
}

/* The linears' names of a real model, as its block tables give them. */
static name_list model_names(const char *path)
{
    lmp_model *m = NULL;
    ck_assert_int_eq(lmp_model_load(path, &m), 0);
    name_list l = {.n_blocks = m->arch.n_layers};
    for (int64_t b = 0; b < m->arch.n_layers; b++) {
        lmp_block blk;
        ck_assert_int_eq(lmp_block_init(&blk, (int)b, &m->arch), 0);
        if (!l.names) {
            l.n_lin = blk.n_linears;
            l.names = calloc((size_t)(l.n_blocks * l.n_lin), sizeof(char *));
        }
        for (int i = 0; i < blk.n_linears; i++) l.names[b * l.n_lin + i] = strdup(blk.linears[i].name);
        lmp_block_free_tables(&blk);
    }
    lmp_model_free(m);
    return l;
}

static void free_names(name_list *l)
{
    for (int64_t g = 0; g < l->n_blocks * l->n_lin; g++) free(l->names[g]);
    free(l->names);
}

/* The pattern for sel, after checking that it selects sel and nothing else. */
static char *pattern_of(const name_list *l, const uint8_t *sel)
{
    char *p = lmp_name_pattern((const char *const *)l->names, l->n_blocks, l->n_lin, sel);
    ck_assert_ptr_nonnull(p);
    const int64_t n = l->n_blocks * l->n_lin;
    uint8_t *hits = malloc((size_t)n);
    ck_assert_int_eq(lmp_pattern_match_all(p, (const char *const *)l->names, n, hits), 0);
    for (int64_t g = 0; g < n; g++) {
        ck_assert_msg(hits[g] == (sel[g] != 0), "%s %s %s", p, sel[g] ? "misses" : "also selects", l->names[g]);
        if (g % 17 == 0) /* and the one-name matcher the configs use agrees */
            ck_assert_int_eq(lmp_pattern_match(p, l->names[g]), hits[g]);
    }
    free(hits);
    return p;
}

static void expect(const name_list *l, const uint8_t *sel, const char *want)
{
    char *p = pattern_of(l, sel);
    ck_assert_str_eq(p, want);
    free(p);
}

START_TEST(the_issues_example_and_roles)
{
    name_list l = make_names("model.layers.", 30, hf_roles, 7);
    uint8_t sel[210] = {0};
    const int blocks[] = {29, 28, 11, 2, 9};
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < 7; i++) sel[blocks[k] * 7 + i] = 1;
    expect(&l, sel, "re:^model\\.layers\\.(2|9|11|28|29)\\.");
    /* a role in every block */
    memset(sel, 0, sizeof sel);
    for (int b = 0; b < 30; b++) sel[b * 7 + 6] = 1;
    expect(&l, sel, "re:^model\\.layers\\.\\d+\\.mlp\\.down_proj$");
    /* a whole block and one linear of another */
    memset(sel, 0, sizeof sel);
    for (int i = 0; i < 7; i++) sel[3 * 7 + i] = 1;
    sel[7 * 7 + 0] = 1;
    expect(&l, sel, "re:^model\\.layers\\.(3\\.|7\\.self_attn\\.q_proj$)");
    /* a run of blocks as a class */
    memset(sel, 0, sizeof sel);
    for (int b = 20; b < 26; b++)
        for (int i = 0; i < 7; i++) sel[b * 7 + i] = 1;
    expect(&l, sel, "re:^model\\.layers\\.2[0-5]\\.");
    /* one linear */
    memset(sel, 0, sizeof sel);
    sel[12 * 7 + 5] = 1;
    expect(&l, sel, "re:^model\\.layers\\.12\\.mlp\\.up_proj$");
    free_names(&l);
}
END_TEST

/* Random sets of every density: exact, and never longer than the names listed one by one. */
START_TEST(random_sets_are_exact)
{
    name_list l = make_names("model.layers.", 30, hf_roles, 7);
    uint64_t x = 12345;
    uint8_t sel[210];
    for (int trial = 0; trial < 150; trial++) {
        const int per_mille = (trial * 37) % 1000 + 1;
        int any = 0;
        for (int g = 0; g < 210; g++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            sel[g] = (int)((x >> 33) % 1000) < per_mille;
            any |= sel[g];
        }
        if (!any) sel[trial % 210] = 1;
        char *p = pattern_of(&l, sel);
        size_t listed = 6;
        for (int g = 0; g < 210; g++)
            if (sel[g]) listed += strlen(l.names[g]) + 3; /* escaped dots and a bar, at least */
        ck_assert_msg(strlen(p) <= listed, "%s", p);
        free(p);
    }
    free_names(&l);
}
END_TEST

/* The real model's names (stories260K: 5 blocks of 7 linears): every block alone, every role,
 * and every single linear select exactly themselves. */
START_TEST(against_the_models_names)
{
    name_list l = model_names(MODEL);
    ck_assert_int_eq((int)l.n_blocks, 5);
    const int64_t n = l.n_blocks * l.n_lin;
    uint8_t *sel = calloc((size_t)n, 1);
    for (int64_t g = 0; g < n; g++) { /* each linear alone */
        memset(sel, 0, (size_t)n);
        sel[g] = 1;
        free(pattern_of(&l, sel));
    }
    for (int64_t b = 0; b < l.n_blocks; b++) { /* each block */
        memset(sel, 0, (size_t)n);
        for (int i = 0; i < l.n_lin; i++) sel[b * l.n_lin + i] = 1;
        char *p = pattern_of(&l, sel);
        ck_assert_msg(strlen(p) < 40, "%s", p);
        free(p);
    }
    for (int i = 0; i < l.n_lin; i++) { /* each role */
        memset(sel, 0, (size_t)n);
        for (int64_t b = 0; b < l.n_blocks; b++) sel[b * l.n_lin + i] = 1;
        free(pattern_of(&l, sel));
    }
    free(sel);
    free_names(&l);
}
END_TEST

/* Names of another shape (GGUF's blk.N.attn_q) and names with no block number at all. */
START_TEST(other_shapes)
{
    static const char *const gguf[] = {"attn_q", "attn_k", "ffn_down"};
    name_list l = make_names("blk.", 12, gguf, 3);
    uint8_t sel[36] = {0};
    for (int i = 0; i < 3; i++) sel[10 * 3 + i] = sel[1 * 3 + i] = 1;
    expect(&l, sel, "re:^blk\\.(1|10)\\.");
    free_names(&l);
    /* no PREFIX<block>. shape: listed one by one, still exact */
    char *odd[] = {"a.q", "b.q", "c.x"};
    name_list o = {.names = odd, .n_blocks = 1, .n_lin = 3};
    uint8_t s2[3] = {1, 0, 1};
    expect(&o, s2, "re:^(a\\.q|c\\.x)$");
    /* nothing selected: no pattern */
    uint8_t none[3] = {0};
    ck_assert_ptr_null(lmp_name_pattern((const char *const *)odd, 1, 3, none));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("name_pattern");
    TCase *tc = tcase_create("name_pattern");
    tcase_set_timeout(tc, 120); /* the random sets under a sanitizer build */
    tcase_add_test(tc, the_issues_example_and_roles);
    tcase_add_test(tc, random_sets_are_exact);
    tcase_add_test(tc, against_the_models_names);
    tcase_add_test(tc, other_shapes);
    suite_add_tcase(s, tc);
    return lmp_test_main(s);
}
