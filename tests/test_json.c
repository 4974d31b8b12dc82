/* test_json.c — core/formats/json.c: (a) JSONTestSuite-style accept/reject tables (structure, numbers,
 * strings, escapes, surrogates, UTF-8, BOM, trailing garbage), each rejection checked for a
 * "doc:line:col:" message and its wording; (b) decoded values (member order, exact int64
 * integers, -0, 1e400, escapes to UTF-8, embedded NULs); (c) error positions; (d) the nesting
 * limit; (e) typed getters; (f) speed: GPT-2's encoder.json (50257 entries) in < 0.5 s and
 * ~25 MB of synthetic documents (long escaped strings, many numbers, many keys) in linear time.
 *
 * Decisions under test (documented in core/formats/json.c): a UTF-8 BOM is rejected with its own
 * message; 1e400 parses to inf (as in Python); duplicate keys are kept, lmp_json_get returns
 * the first. */
#include "base/error.h"
#include "formats/json.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef LMP_DATA_DIR
#error "LMP_DATA_DIR must be defined"
#endif

#define ENCODER_JSON LMP_DATA_DIR "/gpt2-tokenizer/encoder.json"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static lmp_json *parse_ok(const char *text)
{
    lmp_json *j = NULL;
    lmp_clear_error();
    int rc = lmp_json_parse(text, strlen(text), "t.json", &j);
    ck_assert_msg(rc == 0, "parsing %s failed: %s", text, lmp_last_error());
    ck_assert_ptr_nonnull(j);
    return j;
}

/* ---- (a) accept / reject tables ------------------------------------------------------------ */

static const char *valid_docs[] = {
    "[]", "{}", "0", "-0", "-0.0", "0e0", "0E+1", "1.5e+10", "1E-2", "-123.456e-7", "123456789012345678901234567890",
    "1e400", "-1e400", "1e-400", "\"\"", " [1, 2 ,3] ", "\t\r\n[\n]\r\n", "true", "false", "null",
    "[true,false,null]", "\"\\u0000\"", "\"\\uD834\\uDD1E\"", "\"\\ud83d\\ude00\"", "\"\\/\\\\\\\"\\b\\f\\n\\r\\t\"",
    "\"\xc3\xa9\"", "\"\xf0\x9f\x98\x80\"", "\"\xef\xbf\xbf\"", "\"\\uFFFF\"", "\"\xf4\x8f\xbf\xbf\"",
    "\"\xed\x9f\xbf\"", "\"\xee\x80\x80\"", "[[[[]]]]", "{\"a\":{\"b\":[]}}", "{\"a\":1,\"a\":2}",
    "{\"\":0}", "[\"\\u00e9\\u20AC\"]", "{ \"k\" : [ 1 , { } , [ ] ] }", "[1e1, 0.1, -0.5E-3, 10]",
    "\"\x7f\"", "[-9223372036854775808, 9223372036854775807, 9223372036854775808]",
};

START_TEST(test_valid)
{
    for (size_t i = 0; i < sizeof valid_docs / sizeof *valid_docs; i++) lmp_json_free(parse_ok(valid_docs[i]));
}
END_TEST

typedef struct {
    const char *text;
    size_t len; /* 0: strlen(text) */
    const char *msg; /* must occur in the message */
} bad_doc;

static const bad_doc invalid_docs[] = {
    {"", 0, "empty document"},
    {" \n\t ", 0, "empty document"},
    {"[1,]", 0, "trailing comma before ']'"},
    {"{\"a\":1,}", 0, "trailing comma before '}'"},
    {"[1 2]", 0, "expected ',' or ']' in array"},
    {"[1,,2]", 0, "unexpected ','"},
    {"[,1]", 0, "unexpected ','"},
    {"{\"a\" 1}", 0, "expected ':' after object key"},
    {"{a:1}", 0, "expected a string key in object"},
    {"{\"a\":1 \"b\":2}", 0, "expected ',' or '}' in object"},
    {"{\"a\":1;\"b\":2}", 0, "expected ',' or '}' in object"},
    {"{1:2}", 0, "expected a string key"},
    {"{\"a\"}", 0, "expected ':'"},
    {"[", 0, "unterminated array"},
    {"[1", 0, "unterminated array"},
    {"{", 0, "unterminated object"},
    {"{\"a\":", 0, "unterminated object"},
    {"[1,", 0, "unterminated array"},
    {"[1, ", 0, "unterminated array"},
    {"{\"a\":1", 0, "unterminated object"},
    {"]", 0, "unexpected ']'"},
    {"01", 0, "leading zero"},
    {"-01", 0, "leading zero"},
    {"00", 0, "leading zero"},
    {"1.", 0, "expected a digit after '.'"},
    {"1.e5", 0, "expected a digit after '.'"},
    {".5", 0, "unexpected '.'"},
    {"+1", 0, "unexpected '+'"},
    {"1e", 0, "exponent"},
    {"1e+", 0, "exponent"},
    {"1E-x", 0, "exponent"},
    {"-", 0, "expected a digit after '-'"},
    {"- 1", 0, "expected a digit after '-'"},
    {"0x10", 0, "trailing characters"},
    {"1 2", 0, "trailing characters"},
    {"NaN", 0, "unexpected 'N'"},
    {"Infinity", 0, "unexpected 'I'"},
    {"-Infinity", 0, "expected a digit after '-'"},
    {"tru", 0, "invalid literal"},
    {"nul", 0, "invalid literal"},
    {"True", 0, "unexpected 'T'"},
    {"truex", 0, "trailing characters"},
    {"'a'", 0, "unexpected '''"},
    {"\"abc", 0, "unterminated string"},
    {"\"abc\\", 0, "unterminated string"},
    {"\"a\x01z\"", 0, "control character 0x01 in string"},
    {"\"a\tz\"", 0, "control character 0x09 in string"},
    {"\"a\nz\"", 0, "control character 0x0A in string"},
    {"\"a\0z\"", 5, "control character 0x00 in string"},
    {"\"\\x41\"", 0, "invalid escape"},
    {"\"\\'\"", 0, "invalid escape"},
    {"\"\\U0041\"", 0, "invalid escape"},
    {"\"\\u12\"", 0, "invalid \\u escape"},
    {"\"\\u12G4\"", 0, "invalid \\u escape"},
    {"\"\\u", 0, "invalid \\u escape"},
    {"\"\\uD800\"", 0, "high surrogate \\uD800 not followed by a low surrogate"},
    {"\"\\uD800\\u0041\"", 0, "high surrogate"},
    {"\"\\uD800\\uD800\"", 0, "high surrogate"},
    {"\"\\uDBFFx\"", 0, "high surrogate"},
    {"\"\\uDC00\"", 0, "lone low surrogate \\uDC00"},
    {"\"\\uDFFF\\uD800\"", 0, "lone low surrogate"},
    {"\"\xc3\x28\"", 0, "invalid UTF-8 byte 0xC3"},
    {"\"\xed\xa0\x80\"", 0, "invalid UTF-8 byte 0xED"},       /* UTF-8-encoded surrogate */
    {"\"\xc0\xaf\"", 0, "invalid UTF-8 byte 0xC0"},           /* overlong '/' */
    {"\"\xe0\x80\xaf\"", 0, "invalid UTF-8 byte 0xE0"},       /* overlong, 3 bytes */
    {"\"\xf0\x80\x80\xaf\"", 0, "invalid UTF-8 byte 0xF0"},   /* overlong, 4 bytes */
    {"\"\xf4\x90\x80\x80\"", 0, "invalid UTF-8 byte 0xF4"},   /* > U+10FFFF */
    {"\"\xf8\x88\x80\x80\x80\"", 0, "invalid UTF-8 byte 0xF8"},
    {"\"\xe2\x82\"", 0, "invalid UTF-8"},                     /* truncated sequence */
    {"\"\x80\"", 0, "invalid UTF-8 byte 0x80"},               /* lone continuation */
    {"\"\xff\"", 0, "invalid UTF-8 byte 0xFF"},
    {"\xef\xbb\xbf{}", 0, "byte order mark"},
    {"\xc2\xa0[]", 0, "unexpected byte 0xC2"},                /* NBSP is not JSON whitespace */
    {"\f[]", 0, "unexpected byte 0x0C"},                      /* nor is form feed */
    {"[1] x", 0, "trailing characters"},
    {"{}}", 0, "trailing characters"},
    {"[1]\0", 4, "trailing characters"},
    {"[\"a\"]]", 0, "trailing characters"},
    {"{\"a\":1}{}", 0, "trailing characters"},
    {"/* c */ 1", 0, "unexpected '/'"},
    {"[1] // c", 0, "trailing characters"},
};

START_TEST(test_invalid)
{
    for (size_t i = 0; i < sizeof invalid_docs / sizeof *invalid_docs; i++) {
        const bad_doc *d = &invalid_docs[i];
        size_t len = d->len ? d->len : strlen(d->text);
        lmp_json *j = (lmp_json *)(uintptr_t)1;
        lmp_clear_error();
        int rc = lmp_json_parse(d->text, len, "bad.json", &j);
        const char *m = lmp_last_error();
        ck_assert_msg(rc == LMP_EINVAL, "case %zu (%s): rc %d, expected LMP_EINVAL", i, d->text, rc);
        ck_assert_msg(j == NULL, "case %zu: *out not cleared on error", i);
        ck_assert_msg(strncmp(m, "bad.json:", 9) == 0, "case %zu: message does not name the document: %s", i, m);
        ck_assert_msg(strstr(m, d->msg) != NULL, "case %zu (%s): message '%s' lacks '%s'", i, d->text, m, d->msg);
    }
}
END_TEST

/* ---- (b) values ------------------------------------------------------------------------------ */

START_TEST(test_values)
{
    lmp_json *j = parse_ok("{\"z\": 1, \"a\": [true, false, null, \"s\", 2.5], \"m\": {}, \"e\": []}");
    ck_assert_int_eq(j->type, LMP_JSON_OBJECT);
    ck_assert_uint_eq(j->n, 4);
    /* member order is the document's */
    ck_assert_str_eq(j->keys[0], "z");
    ck_assert_str_eq(j->keys[1], "a");
    ck_assert_str_eq(j->keys[2], "m");
    ck_assert_str_eq(j->keys[3], "e");
    ck_assert_uint_eq(j->key_lens[1], 1);
    const lmp_json *a = lmp_json_get(j, "a");
    ck_assert_ptr_eq(a, &j->items[1]);
    ck_assert_int_eq(a->type, LMP_JSON_ARRAY);
    ck_assert_uint_eq(a->n, 5);
    ck_assert_int_eq(a->items[0].type, LMP_JSON_BOOL);
    ck_assert_int_eq(a->items[0].boolean, 1);
    ck_assert_int_eq(a->items[1].boolean, 0);
    ck_assert_int_eq(a->items[2].type, LMP_JSON_NULL);
    ck_assert_str_eq(a->items[3].str, "s");
    ck_assert(a->items[4].number == 2.5 && !a->items[4].is_integer);
    ck_assert_uint_eq(lmp_json_get(j, "m")->n, 0);
    ck_assert_int_eq(lmp_json_get(j, "e")->type, LMP_JSON_ARRAY);
    ck_assert_ptr_null(lmp_json_get(j, "missing"));
    ck_assert_ptr_null(lmp_json_get(a, "a")); /* not an object */
    ck_assert_ptr_null(lmp_json_get(NULL, "a"));
    lmp_json_free(j);

    /* numbers */
    struct {
        const char *text;
        int is_int;
        int64_t ival;
        double dval;
    } nums[] = {
        {"0", 1, 0, 0.0},
        {"-0", 1, 0, -0.0},
        {"15496", 1, 15496, 15496.0},
        {"-42", 1, -42, -42.0},
        {"9223372036854775807", 1, INT64_MAX, 9223372036854775807.0},
        {"-9223372036854775808", 1, INT64_MIN, -9223372036854775808.0},
        {"9223372036854775808", 0, 0, 9223372036854775808.0},
        {"-9223372036854775809", 0, 0, -9223372036854775809.0},
        {"18446744073709551616", 0, 0, 18446744073709551616.0},
        {"1.0", 0, 0, 1.0},
        {"1e2", 0, 0, 100.0},
        {"0.1", 0, 0, 0.1},
        {"-1.5E-3", 0, 0, -1.5e-3},
        {"2.2250738585072014e-308", 0, 0, 2.2250738585072014e-308},
        {"4.9406564584124654e-324", 0, 0, 4.9406564584124654e-324},
        {"1e-400", 0, 0, 0.0},
        {"1e400", 0, 0, HUGE_VAL},
        {"-1e400", 0, 0, -HUGE_VAL},
    };
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        j = parse_ok(nums[i].text);
        ck_assert_int_eq(j->type, LMP_JSON_NUMBER);
        ck_assert_msg(j->is_integer == nums[i].is_int, "%s: is_integer %d", nums[i].text, j->is_integer);
        if (nums[i].is_int) ck_assert_msg(j->integer == nums[i].ival, "%s: integer %lld", nums[i].text, (long long)j->integer);
        ck_assert_msg(j->number == nums[i].dval && !signbit(j->number) == !signbit(nums[i].dval), "%s: number %.17g",
                      nums[i].text, j->number);
        lmp_json_free(j);
    }
    /* a number literal longer than the 64-byte fast buffer */
    char longnum[400];
    memset(longnum, '9', 300);
    strcpy(longnum + 300, ".5e-290");
    j = parse_ok(longnum);
    ck_assert(fabs(j->number - 1e10) < 1e-5);
    lmp_json_free(j);

    /* strings: escapes, surrogate pairs and raw UTF-8 come out as UTF-8 */
    struct {
        const char *text;
        const char *expect;
        size_t len;
    } strs[] = {
        {"\"plain\"", "plain", 5},
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8},
        {"\"\\u0041\\u00e9\\u20AC\"", "A\xc3\xa9\xe2\x82\xac", 6},
        {"\"\\uD834\\uDD1E\"", "\xf0\x9d\x84\x9e", 4},
        {"\"\\udbff\\udfff\"", "\xf4\x8f\xbf\xbf", 4},
        {"\"\\u0120world\"", "\xc4\xa0world", 7},
        {"\"a\\u0000b\"", "a\0b", 3},
        {"\"x\xf0\x9f\x98\x80y\"", "x\xf0\x9f\x98\x80y", 6},
        {"\"\\u007F\\u0080\\u07FF\\u0800\\uFFFF\"", "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf", 11},
    };
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        j = parse_ok(strs[i].text);
        ck_assert_int_eq(j->type, LMP_JSON_STRING);
        ck_assert_msg(j->str_len == strs[i].len && memcmp(j->str, strs[i].expect, strs[i].len) == 0,
                      "%s decoded wrongly (len %zu)", strs[i].text, j->str_len);
        ck_assert_int_eq(j->str[j->str_len], 0);
        lmp_json_free(j);
    }

    /* duplicate keys are kept; lookup gives the first */
    j = parse_ok("{\"a\":1,\"b\":2,\"a\":3}");
    ck_assert_uint_eq(j->n, 3);
    ck_assert_int_eq(lmp_json_get(j, "a")->integer, 1);
    ck_assert_int_eq(j->items[2].integer, 3);
    lmp_json_free(j);

    /* a key with an embedded NUL does not match its prefix */
    j = parse_ok("{\"a\\u0000b\":1,\"a\":2}");
    ck_assert_uint_eq(j->key_lens[0], 3);
    ck_assert_int_eq(lmp_json_get(j, "a")->integer, 2);
    lmp_json_free(j);

    /* the input need not be NUL-terminated: only text[0..len) is read */
    const char *buf = "[12]]]]garbage";
    ck_assert_int_eq(lmp_json_parse(buf, 4, "t", &j), 0);
    ck_assert_int_eq(j->items[0].integer, 12);
    lmp_json_free(j);
    ck_assert_int_eq(lmp_json_parse("12345", 2, "t", &j), 0);
    ck_assert_int_eq(j->integer, 12);
    lmp_json_free(j);
    ck_assert_int_eq(lmp_json_parse("\"abc\"", 4, "t", &j), LMP_EINVAL);
    ck_assert_int_eq(lmp_json_parse(NULL, 0, "t", &j), LMP_EINVAL);
    ck_assert_ptr_null(j);
    lmp_json_free(NULL);
}
END_TEST

/* ---- (c) error positions --------------------------------------------------------------------- */

static void expect_error_at(const char *text, const char *want_prefix)
{
    lmp_json *j;
    lmp_clear_error();
    ck_assert_int_eq(lmp_json_parse(text, strlen(text), "doc.json", &j), LMP_EINVAL);
    ck_assert_msg(strncmp(lmp_last_error(), want_prefix, strlen(want_prefix)) == 0, "got '%s', want '%s...'",
                  lmp_last_error(), want_prefix);
}

START_TEST(test_positions)
{
    expect_error_at("{\"a\":1 \"b\":2}", "doc.json:1:8: expected ',' or '}' in object (byte 7)");
    expect_error_at("{\n  \"a\": 1,\n  \"b\" 2\n}", "doc.json:3:7: expected ':' after object key (byte 18)");
    expect_error_at("[1,\r\n 2,\r\n 3,\r\n]", "doc.json:4:1: trailing comma before ']' in array");
    expect_error_at("\n\n   \"ab\\qc\"", "doc.json:3:7: invalid escape");
    expect_error_at("[\"\\u00e9\", \"\\uD800\"]", "doc.json:1:13: high surrogate");
    expect_error_at("[1,\n  [2,\n   [3\n", "doc.json:3:4: unterminated array"); /* points at the '[' left open */
    expect_error_at("  \"never closed", "doc.json:1:3: unterminated string");
    expect_error_at("{\"k\": 012}", "doc.json:1:7: invalid number: leading zero");
    expect_error_at("[1]\n\n  x", "doc.json:3:3: trailing characters");
    /* columns count bytes: the é before the error is two of them */
    expect_error_at("[\"\xc3\xa9\", x]", "doc.json:1:8: unexpected 'x'");
}
END_TEST

/* ---- (d) nesting ----------------------------------------------------------------------------- */

static char *nested(int depth, int objects)
{
    char *s = malloc((size_t)depth * 6 + 16), *p = s;
    for (int i = 0; i < depth; i++) p += objects ? sprintf(p, "{\"a\":") : sprintf(p, "[");
    p += sprintf(p, "0");
    for (int i = 0; i < depth; i++) *p++ = objects ? '}' : ']';
    *p = 0;
    return s;
}

START_TEST(test_depth)
{
    for (int objects = 0; objects <= 1; objects++) {
        char *s = nested(512, objects);
        lmp_json *j = parse_ok(s);
        const lmp_json *v = j;
        for (int d = 0; d < 512; d++) {
            ck_assert_uint_eq(v->n, 1);
            v = &v->items[0];
        }
        ck_assert_int_eq(v->type, LMP_JSON_NUMBER);
        lmp_json_free(j);
        free(s);
        s = nested(513, objects);
        ck_assert_int_eq(lmp_json_parse(s, strlen(s), "deep.json", &j), LMP_EINVAL);
        ck_assert_msg(strstr(lmp_last_error(), "nesting deeper than 512"), "%s", lmp_last_error());
        ck_assert_ptr_null(j);
        free(s);
    }
    /* a million unclosed brackets: stopped at the limit, no stack overflow */
    size_t n = 1000000;
    char *s = malloc(n);
    memset(s, '[', n);
    lmp_json *j;
    ck_assert_int_eq(lmp_json_parse(s, n, "deep.json", &j), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "deep.json:1:513: nesting deeper than 512"), "%s", lmp_last_error());
    free(s);
}
END_TEST

/* ---- (e) typed getters ----------------------------------------------------------------------- */

START_TEST(test_getters)
{
    lmp_json *j = parse_ok("{\"n\": 576, \"f\": 4096.0, \"e\": 1e3, \"x\": 1.5, \"big\": 1e300, \"s\": \"llama\","
                           " \"b\": true, \"neg\": -3}");
    int64_t i = 0;
    double d = 0;
    const char *s = NULL;
    ck_assert_int_eq(lmp_json_get_int(j, "n", "config.json", &i), 0);
    ck_assert_int_eq(i, 576);
    ck_assert_int_eq(lmp_json_get_int(j, "neg", "config.json", &i), 0);
    ck_assert_int_eq(i, -3);
    /* integral doubles are accepted as integers */
    ck_assert_int_eq(lmp_json_get_int(j, "f", "config.json", &i), 0);
    ck_assert_int_eq(i, 4096);
    ck_assert_int_eq(lmp_json_get_int(j, "e", "config.json", &i), 0);
    ck_assert_int_eq(i, 1000);
    ck_assert_int_eq(lmp_json_get_int(j, "x", "config.json", &i), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "config.json: \"x\" is 1.5, expected an integer"), "%s", lmp_last_error());
    ck_assert_int_eq(lmp_json_get_int(j, "big", "config.json", &i), LMP_EINVAL);
    ck_assert_int_eq(lmp_json_get_int(j, "s", "config.json", &i), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "config.json: \"s\" is a string, expected a number"), "%s",
                  lmp_last_error());
    ck_assert_int_eq(lmp_json_get_int(j, "hidden_size", "config.json", &i), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "config.json: missing key \"hidden_size\""), "%s", lmp_last_error());
    ck_assert_int_eq(lmp_json_get_number(j, "x", "config.json", &d), 0);
    ck_assert(d == 1.5);
    ck_assert_int_eq(lmp_json_get_number(j, "n", "config.json", &d), 0);
    ck_assert(d == 576.0);
    ck_assert_int_eq(lmp_json_get_number(j, "b", "config.json", &d), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "\"b\" is a boolean"), "%s", lmp_last_error());
    ck_assert_int_eq(lmp_json_get_string(j, "s", "config.json", &s), 0);
    ck_assert_str_eq(s, "llama");
    ck_assert_int_eq(lmp_json_get_string(j, "n", "config.json", &s), LMP_EINVAL);
    ck_assert_int_eq(lmp_json_get_string(&j->items[0], "n", "config.json", &s), LMP_EINVAL);
    ck_assert_msg(strstr(lmp_last_error(), "not an object"), "%s", lmp_last_error());
    lmp_json_free(j);
}
END_TEST

/* ---- (f) real and big documents -------------------------------------------------------------- */

static char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = 0;
    *size = (size_t)n;
    return buf;
}

START_TEST(test_encoder_json)
{
    size_t size;
    char *text = slurp(ENCODER_JSON, &size);
    lmp_json *j = NULL;
    double t0 = now_s();
    int rc = lmp_json_parse(text, size, ENCODER_JSON, &j);
    double dt = now_s() - t0;
    ck_assert_msg(rc == 0, "%s", lmp_last_error());
    fprintf(stderr, "test_json: encoder.json (%zu bytes, %zu entries) parsed in %.3f s\n", size, j->n, dt);
    ck_assert_int_eq(j->type, LMP_JSON_OBJECT);
    ck_assert_uint_eq(j->n, 50257);
    int64_t id;
    ck_assert_int_eq(lmp_json_get_int(j, "Hello", "encoder.json", &id), 0);
    ck_assert_int_eq(id, 15496);
    ck_assert_int_eq(lmp_json_get_int(j, "\xc4\xa0world", "encoder.json", &id), 0); /* "\u0120world" */
    ck_assert_int_eq(id, 995);
    ck_assert_int_eq(lmp_json_get_int(j, "<|endoftext|>", "encoder.json", &id), 0);
    ck_assert_int_eq(id, 50256);
    /* the ids are exactly 0..50256, each once */
    char *seen = calloc(j->n, 1);
    for (size_t i = 0; i < j->n; i++) {
        ck_assert(j->items[i].type == LMP_JSON_NUMBER && j->items[i].is_integer);
        ck_assert(j->items[i].integer >= 0 && (size_t)j->items[i].integer < j->n);
        ck_assert(!seen[j->items[i].integer]);
        seen[j->items[i].integer] = 1;
    }
    free(seen);
    lmp_json_free(j);
    free(text);
}
END_TEST

/* Appends to a growing buffer (the test's own, so it builds big inputs in linear time too). */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1 << 20;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static double time_parse(const sbuf *b, lmp_json **j)
{
    double t0 = now_s();
    int rc = lmp_json_parse(b->p, b->n, "big.json", j);
    double dt = now_s() - t0;
    ck_assert_msg(rc == 0, "%s", lmp_last_error());
    return dt;
}

START_TEST(test_big_documents)
{
    /* 1: one 8 MB string with an escape every 8 bytes (a quadratic append would take minutes) */
    sbuf b = {0};
    sb_add(&b, "\"", 1);
    for (int i = 0; i < 1000000; i++) sb_add(&b, "abc\\n\\u00e9", 11);
    sb_add(&b, "\"", 1);
    lmp_json *j;
    double t1 = time_parse(&b, &j);
    ck_assert_uint_eq(j->str_len, 1000000u * 6);
    ck_assert(memcmp(j->str + 6 * 999999, "abc\n\xc3\xa9", 6) == 0);
    size_t n1 = b.n;
    lmp_json_free(j);
    free(b.p);

    /* 2: an array of 1M numbers, ~8 MB */
    b = (sbuf){0};
    sb_add(&b, "[", 1);
    char tmp[64];
    for (int i = 0; i < 1000000; i++) sb_add(&b, tmp, (size_t)sprintf(tmp, "%s%d.25", i ? "," : "", i));
    sb_add(&b, "]", 1);
    double t2 = time_parse(&b, &j);
    ck_assert_uint_eq(j->n, 1000000);
    ck_assert(j->items[999999].number == 999999.25);
    size_t n2 = b.n;
    lmp_json_free(j);
    free(b.p);

    /* 3: a tokenizer.json-like object: 300k keys with merges-like string values, ~10 MB */
    b = (sbuf){0};
    sb_add(&b, "{\"model\": {\"vocab\": {", 21);
    for (int i = 0; i < 300000; i++)
        sb_add(&b, tmp, (size_t)sprintf(tmp, "%s\"\\u0120tok%d\": %d, \"m%d\": \"a b\"", i ? "," : "", i, i, i));
    sb_add(&b, "}}}", 3);
    double t3 = time_parse(&b, &j);
    const lmp_json *vocab = lmp_json_get(lmp_json_get(j, "model"), "vocab");
    ck_assert_uint_eq(vocab->n, 600000);
    ck_assert_int_eq(lmp_json_get(vocab, "\xc4\xa0tok299999")->integer, 299999);
    size_t n3 = b.n;
    lmp_json_free(j);
    free(b.p);

    fprintf(stderr, "test_json: big documents: %.1f MB string %.3f s, %.1f MB numbers %.3f s, %.1f MB object %.3f s\n",
            n1 / 1e6, t1, n2 / 1e6, t2, n3 / 1e6, t3);
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("grammar");
    tcase_add_test(tc, test_valid);
    tcase_add_test(tc, test_invalid);
    tcase_add_test(tc, test_values);
    tcase_add_test(tc, test_positions);
    tcase_add_test(tc, test_depth);
    tcase_add_test(tc, test_getters);
    suite_add_tcase(s, tc);
    tc = tcase_create("documents");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_encoder_json);
    tcase_add_test(tc, test_big_documents);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(json_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
