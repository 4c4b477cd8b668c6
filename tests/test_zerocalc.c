/* test_zerocalc.c — the calculator against the paper and the other sources.
 *
 * Every cell of the paper's Table 1 and Table 2 (copied into tests/data/ as printed) is
 * recomputed from the shared formula module; every worked example of the sources
 * (tests/data/source_examples.tsv) is recomputed by `zerocalc --check-sources`, and the printed
 * numbers that disagree with their own formula must be exactly the ones docs/errata.md
 * lists (tests/data/source_errata.tsv). Plus the command line: output, JSON, bad input.
 * Run from the repository root (make test does). */
#include "zl_test_util.h" /* first: it sets _GNU_SOURCE */

#include "common/formulas.h"

#define ZEROCALC "build/zerocalc"

typedef struct {
    char col[10][256];
    int n;
} tsv_row;

/* Read the non-comment rows of a TSV file. Returns the number of rows (<= cap). */
static int read_tsv(const char *path, tsv_row *rows, int cap) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "missing %s (run the tests from the repository root)", path);
    char line[4096];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\r\n")] = '\0';
        tsv_row *r = &rows[n++];
        r->n = 0;
        for (char *p = line; r->n < 10;) {
            char *tab = strchr(p, '\t');
            if (tab) *tab = '\0';
            snprintf(r->col[r->n++], sizeof r->col[0], "%.255s", p);
            if (!tab) break;
            p = tab + 1;
        }
    }
    fclose(f);
    return n;
}

/* ---- Table 1: all 54 cells, to the paper's printed digits ------------------------------ */

Test(paper, table1_every_cell) {
    static tsv_row rows[64];
    int n = read_tsv("tests/data/paper_table1.tsv", rows, 64);
    cr_assert_eq(n, 54, "Table 1 has 3 models x 6 N_d x 3 stages");
    for (int i = 0; i < n; i++) {
        double psi = atof(rows[i].col[0]), nd = atof(rows[i].col[1]);
        int stage = atoi(rows[i].col[2]);
        char cell[32];
        zl_paper_digits(zl_state_bytes(psi, nd, stage, ZL_PRECISION_MIXED, NULL) / 1e9, cell, sizeof cell);
        cr_expect_str_eq(cell, rows[i].col[3], "Psi=%s N_d=%s stage %d", rows[i].col[0], rows[i].col[1], stage);
    }
}

/* The same cells, rounded properly instead of truncated: exactly eight differ (errata). */
Test(paper, table1_truncated_cells) {
    static tsv_row rows[64];
    int n = read_tsv("tests/data/paper_table1.tsv", rows, 64), truncated = 0;
    for (int i = 0; i < n; i++) {
        double gb = zl_state_bytes(atof(rows[i].col[0]), atof(rows[i].col[1]), atoi(rows[i].col[2]),
                                   ZL_PRECISION_MIXED, NULL) / 1e9;
        if (gb >= 100 && floor(gb + 0.5) != atof(rows[i].col[3])) truncated++;
    }
    cr_expect_eq(truncated, 8);
}

/* ---- Table 2: 20 cells; the paper scales its rounded MP = 1 row, so 7 cells disagree ---- */

static double size_value(const char *s) { /* "7.6B" -> 7.6e9, "0.5T" -> 5e11 */
    double v = atof(s);
    return strchr(s, 'T') ? v * 1e12 : v * 1e9;
}
static double size_tolerance(const char *s) {
    const char *dot = strchr(s, '.');
    int decimals = dot ? (int)(strcspn(dot + 1, "BT")) : 0;
    return 0.5 * pow(10, -decimals) * (strchr(s, 'T') ? 1e12 : 1e9);
}

Test(paper, table2_every_cell) {
    static tsv_row rows[32];
    int n = read_tsv("tests/data/paper_table2.tsv", rows, 32);
    cr_assert_eq(n, 20);
    /* Hand-checked: 32e9·MP / (4 + 12/64) for P_os is 7.64B·MP, which the paper prints as
     * 7.6B·MP (15.2, 30.4, 60.8, 121.6 instead of 15.3, 30.6, 61.1, 122.3); P_os+g likewise
     * from MP = 4 on (57.6, 115.2, 230.4 instead of 57.7, 115.4, 230.8). */
    const char *expected_wrong[] = {"15.2B", "30.4B", "60.8B", "121.6B", "57.6B", "115.2B", "230.4B"};
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        double mp = atof(rows[i].col[0]), gpus = atof(rows[i].col[1]);
        int stage = atoi(rows[i].col[2]);
        double psi = zl_max_params(32e9 * mp, gpus / mp, stage, ZL_PRECISION_MIXED);
        int agrees = fabs(psi - size_value(rows[i].col[3])) <= size_tolerance(rows[i].col[3]) * (1 + 1e-9);
        int listed = 0;
        for (size_t k = 0; k < sizeof expected_wrong / sizeof expected_wrong[0]; k++)
            listed |= !strcmp(rows[i].col[3], expected_wrong[k]);
        cr_expect_eq(!agrees, listed, "MP=%s stage %d: computed %.4g, printed %s", rows[i].col[0], stage, psi,
                     rows[i].col[3]);
        wrong += !agrees;
    }
    cr_expect_eq(wrong, 7);
}

/* ---- the sources ----------------------------------------------------------------------- */

Test(sources, check_sources_lists_exactly_the_errata) {
    static tsv_row examples[512], errata[128];
    int n_examples = read_tsv("tests/data/source_examples.tsv", examples, 512);
    int n_errata = read_tsv("tests/data/source_errata.tsv", errata, 128);
    cr_assert(n_examples > 50, "the sources hold more worked numbers than %d", n_examples);
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --check-sources --data tests/data/source_examples.tsv");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    char summary[128];
    snprintf(summary, sizeof summary, "%d of %d printed numbers disagree", n_errata, n_examples);
    cr_expect(strstr(r.out, summary) != NULL, "expected '%s' in:\n%s", summary, r.out);
    /* Each erratum appears in the output: its locator (the first 60 bytes, as zerocalc prints
     * it) and its printed value on one line. */
    for (int i = 0; i < n_errata; i++) {
        char where[61];
        snprintf(where, sizeof where, "%.60s", errata[i].col[1]);
        const char *hit = strstr(r.out, where);
        cr_expect(hit != NULL, "erratum '%s' (%s) not reported", errata[i].col[1], errata[i].col[0]);
        if (!hit) continue;
        const char *eol = strchr(hit, '\n'), *val = strstr(hit, errata[i].col[2]);
        cr_expect(val && (!eol || val < eol), "erratum '%s': printed value %s not on its line", errata[i].col[1],
                  errata[i].col[2]);
        /* ... and its source's short title at the start of that line. */
        const char *bol = hit;
        while (bol > r.out && bol[-1] != '\n') bol--;
        cr_expect(!strncmp(bol, errata[i].col[0], strlen(errata[i].col[0])),
                  "erratum '%s': line does not start with '%s'", errata[i].col[1], errata[i].col[0]);
    }
}

Test(sources, pytorch_post_fp32_worked_example) {
    /* The PyTorch from-scratch post: 7B parameters, 8 GPUs, fp32 training with Adam: 112 / 63 / 38.5 / 14 GB. */
    const double expect[4] = {112, 63, 38.5, 14};
    for (int s = 0; s < 4; s++)
        cr_expect_float_eq(zl_state_bytes(7e9, 8, s, ZL_PRECISION_FP32, NULL) / 1e9, expect[s], 1e-9, "stage %d", s);
}

/* ---- command line ---------------------------------------------------------------------- */

Test(cli, calculator_json) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --params 7.5e9 --ranks 64 --json");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "not JSON: %s", r.out);
    cr_expect_eq(zl_num(j, "params"), 7.5e9);
    cr_expect_eq(zl_num(j, "ranks"), 64);
    cJSON *stages = zl_get(j, "stages");
    cr_assert_eq(cJSON_GetArraySize(stages), 4);
    const double expect[4] = {120e9, 31.40625e9, 16.640625e9, 1.875e9}; /* hand-computed, paper §5 */
    for (int s = 0; s < 4; s++) {
        cJSON *st = cJSON_GetArrayItem(stages, s);
        cr_expect_eq(zl_num(st, "stage"), s);
        cr_expect_float_eq(zl_num(st, "bytes_per_rank"), expect[s], 1);
    }
    cJSON_Delete(j);
}

Test(cli, layers_dim_uses_the_padded_partition) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --layers 2 --dim 31 --ranks 4 --stage 3 --json");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j);
    /* a block of D = 31 has 7843 params, padded to 7844 for N = 4 */
    cr_expect_eq(zl_num(j, "params"), 2 * 7843);
    cr_expect_eq(zl_num(j, "params_padded"), 2 * 7844);
    cJSON *st = cJSON_GetArrayItem(zl_get(j, "stages"), 0);
    cr_expect_eq(zl_num(st, "stage"), 3);
    cr_expect_eq(zl_num(st, "bytes_per_rank_padded"), 16 * 2 * 7844 / 4);
    cJSON_Delete(j);
}

/* The Korean post's ZeRO-Offload example: 70B at N = 16, ZeRO-3's 70 GB per GPU falls to
 * 17.5 GB (4Psi/N) with the optimizer state (12Psi/N = 52.5 GB) on the host; stage 2 keeps
 * its 2Psi of params. Stages 0 and 1 refuse --offload. */
Test(cli, offload_device_host_split) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --params 70e9 --ranks 16 --json --offload");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "not JSON: %s", r.out);
    cJSON *s2 = cJSON_GetArrayItem(zl_get(j, "stages"), 2), *s3 = cJSON_GetArrayItem(zl_get(j, "stages"), 3);
    cr_expect_float_eq(zl_num(s3, "bytes_per_rank"), 70e9, 1);
    cr_expect_float_eq(zl_num(s3, "offload.device_bytes_per_rank"), 17.5e9, 1);
    cr_expect_float_eq(zl_num(s3, "offload.host_bytes_per_rank"), 52.5e9, 1);
    cr_expect_float_eq(zl_num(s2, "offload.device_bytes_per_rank"), 2 * 70e9 + 2 * 70e9 / 16, 1);
    cr_expect(!cJSON_GetObjectItem(cJSON_GetArrayItem(zl_get(j, "stages"), 1), "offload"), "stage 1 does not offload");
    cJSON_Delete(j);
    zl_run_plain(&r, ZEROCALC " --params 1e9 --stage 1 --offload");
    cr_expect_eq(r.exit_code, 2);
    /* --max-model: device 4 bytes/param at stage 3 with N = 4 -> 80 GB holds 80B */
    zl_run_plain(&r, ZEROCALC " --max-model --memory 80e9 --ranks 4 --stage 3 --offload");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "80000000000 |      80B") != NULL, "%s", r.out);
}

Test(cli, precisions) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --params 7e9 --ranks 8 --precision fp32 --stage 2 --json");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_expect_float_eq(zl_num(cJSON_GetArrayItem(zl_get(j, "stages"), 0), "bytes_per_rank"), 38.5e9, 1);
    cJSON_Delete(j);
    zl_run_plain(&r, ZEROCALC " --params 1e9 --ranks 4 --precision custom --param-bytes 2 --grad-bytes 4 --k 16 --json");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    j = cJSON_Parse(r.out);
    /* stage 1: 2 + 4 + 16/4 = 10 bytes per parameter */
    cr_expect_float_eq(zl_num(cJSON_GetArrayItem(zl_get(j, "stages"), 1), "bytes_per_rank"), 10e9, 1);
    cJSON_Delete(j);
}

Test(cli, tables_print) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --paper-table1");
    cr_assert_eq(r.exit_code, 0);
    cr_expect(strstr(r.out, "31.4") && strstr(r.out, "2218") && strstr(r.out, "15.6"), "%s", r.out);
    zl_run_plain(&r, ZEROCALC " --max-model --memory 32e9 --ranks 64");
    cr_assert_eq(r.exit_code, 0);
    cr_expect(strstr(r.out, "7.6B") && strstr(r.out, "14.4B") && strstr(r.out, "128B"), "%s", r.out);
}

/* The GB column rounds half up, as the sources do (docs/errata.md): the Korean post's 70B model
 * at N = 16 is 201.25 GB under ZeRO-2, exact in binary, where %.4g alone prints 201.2. */
Test(cli, gb_column_rounds_half_up) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --params 70e9 --ranks 16");
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "|      201.3 |") && !strstr(r.out, "201.2 "), "%s", r.out);
    cr_expect(strstr(r.out, "|      332.5 |") && strstr(r.out, "|         70 |"), "%s", r.out);
}

/* --max-layers: the largest L whose every buffer fits. Checked against the run table (a
 * different path through zerocalc: --layers L --batch B, peak_total): L fits, L + 1 does not,
 * and the boundary is "<=" — memory = peak_total(L) still gives L, one byte less gives L - 1. */
static double run_peak(int layers, int stage, const char *extra) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --layers %d --dim 64 --batch 16 --ranks 4 --stage %d --json %s", layers, stage, extra);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "not JSON: %s", r.out);
    double v = zl_num(cJSON_GetArrayItem(zl_get(j, "stages"), 0), "peak_total");
    cJSON_Delete(j);
    return v;
}

static cJSON *max_layers_json(int stage, double memory, const char *extra) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --max-layers --dim 64 --batch 16 --ranks 4 --stage %d --memory %.0f --json %s", stage,
                 memory, extra);
    cr_assert_eq(r.exit_code, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "not JSON: %s", r.out);
    return cJSON_GetArrayItem(zl_get(j, "stages"), 0); /* the tests leak the small tree */
}

Test(cli, max_layers_is_the_largest_that_fits) {
    for (int s = 0; s <= 3; s++) {
        cJSON *st = max_layers_json(s, 40e6, "");
        int L = (int)zl_num(st, "max_layers");
        cr_assert(L >= 2, "stage %d: L = %d", s, L);
        double fit = run_peak(L, s, ""), over = run_peak(L + 1, s, "");
        cr_expect(fit <= 40e6 && over > 40e6, "stage %d: L = %d needs %.0f, L + 1 needs %.0f", s, L, fit, over);
        cr_expect_eq(zl_num(st, "need_device"), fit, "stage %d", s);
        cr_expect_eq(zl_num(st, "next_need_device"), over, "stage %d", s);
        cr_expect_str_eq(cJSON_GetObjectItem(st, "next_bound")->valuestring, "device");
        cr_expect_eq(zl_num(max_layers_json(s, fit, ""), "max_layers"), L, "stage %d: memory = need", s);
        cr_expect_eq(zl_num(max_layers_json(s, fit - 1, ""), "max_layers"), L - 1, "stage %d: one byte less", s);
    }
    /* ZeRO-3 shards everything: it fits more layers than DDP in the same memory */
    cr_expect_gt(zl_num(max_layers_json(3, 40e6, ""), "max_layers"), 2 * zl_num(max_layers_json(0, 40e6, ""), "max_layers"));
    cr_expect_eq(zl_num(max_layers_json(0, 1000, ""), "max_layers"), 0, "nothing fits in 1000 bytes");
}

/* With --offload the host (master, m, v: 12Psi_pad/N, plus 2Psi_pad/N pinned staging and the
 * hash's and checkpoint's staging, per rank, times the node's ranks) can be the bound: a device
 * of 1e12 bytes, a host just big enough for 4 ranks of L = 7 -> L = 7, bound "host". */
Test(cli, max_layers_host_bound_with_offload) {
    cJSON *st7 = max_layers_json(3, 1e12, "--offload --host-memory 1e15");
    cr_assert(zl_num(st7, "max_layers") > 8);
    zl_run_result r;
    /* need_host at L = 7: from a search whose host budget we then set to 4 x that */
    double lo = 1e3, hi = 1e12; /* the smallest host budget at which L >= 7, by bisection on bytes */
    while (hi - lo > 1) {
        double mid = floor((lo + hi) / 2);
        char extra[96];
        snprintf(extra, sizeof extra, "--offload --host-memory %.0f", mid);
        if (zl_num(max_layers_json(3, 1e12, extra), "max_layers") >= 7) hi = mid;
        else lo = mid;
    }
    char extra[96];
    snprintf(extra, sizeof extra, "--offload --host-memory %.0f", hi);
    cJSON *st = max_layers_json(3, 1e12, extra);
    cr_expect_eq(zl_num(st, "max_layers"), 7);
    cr_expect_eq(zl_num(st, "need_host") * 4, hi, "the budget is exactly 4 ranks' need");
    cr_expect_str_eq(cJSON_GetObjectItem(st, "next_bound")->valuestring, "host");
    /* the host part, by hand: 7 blocks of D = 64 (8*64*64 + 5*64 = 33088 params, divisible by 4) */
    double psi = 7 * 33088.0;
    cr_expect_eq(zl_num(st, "params"), psi);
    /* master, m, v 12Psi/N and their pinned staging 2Psi/N; the parameter hash's staging, 2 B of the
     * largest unit, and the checkpoint's, 4 B of it (below 2^21 elements) */
    cr_expect_eq(zl_num(st, "need_host"), 14 * psi / 4 + 2 * 33088.0 + 4 * 33088.0, "need_host %.0f",
                 zl_num(st, "need_host"));
    zl_run_plain(&r, ZEROCALC " --max-layers --dim 64 --batch 16 --ranks 4 --memory 1e9 --stage 1 --offload");
    cr_expect_eq(r.exit_code, 2, "stage 1 has no --offload");
}

/* --attention left out: zerocalc picks as the programs do (args.c), fused only up to the fused
 * kernels' ZL_GPT_FLASH_MAX_BATCH sequences; asked for past it, refused as the programs refuse. */
static int attention_is_fused(int batch) {
    zl_run_result r;
    zl_run_plain(&r, ZEROCALC " --model gpt --layers 1 --dim 64 --heads 1 --seq 1 --batch %d --ranks 1 --stage 0",
                 batch);
    cr_assert_eq(r.exit_code, 0, "--batch %d: %s", batch, r.err);
    cr_assert(strstr(r.out, "attention fused") || strstr(r.out, "attention strided"), "%s", r.out);
    return strstr(r.out, "attention fused") != NULL;
}

Test(cli, attention_by_shape_as_the_programs) {
    cr_expect(attention_is_fused(65535));
    cr_expect(!attention_is_fused(65536));
}

static void refused(const char *args, const char *expect) {
    zl_run_result r;
    char line[512];
    snprintf(line, sizeof line, ZEROCALC " %s", args);
    zl_run_plain(&r, "%s", line);
    cr_expect_eq(r.exit_code, 2, "'%s' exited %d", args, r.exit_code);
    cr_expect(strstr(r.err, expect) != NULL, "'%s': '%s' lacks '%s'", args, r.err, expect);
    char *nl = strchr(r.err, '\n');
    cr_expect(nl && nl[1] == '\0', "'%s': one line expected, got '%s'", args, r.err);
    cr_expect_str_eq(r.out, "", "'%s' printed output anyway", args);
}

Test(cli, bad_input_exits_2) {
    refused("--params -1", "--params: expected a whole number in [1, 1e+18]");
    refused("--params 0", "--params");
    refused("--params abc", "--params");
    refused("--params 1e30", "--params");
    refused("--params 7.5e9 --ranks 0", "--ranks");
    refused("--params 7.5e9 --ranks 2.5", "--ranks: expected a whole number");
    refused("--params 7.5e9 --ranks \t4", "--ranks: expected a whole number"); /* strtod skips white space */
    refused("--params 7.5e9 --stage 4", "--stage");
    refused("--params 7.5e9 --precision bf16", "--precision: expected mixed, fp32 or custom");
    refused("--params 7.5e9 --precision custom --k 8", "--precision custom: needs");
    refused("--params 7.5e9 --k 8", "only with --precision custom");
    refused("--params 7.5e9 --layers 2 --dim 8", "not both");
    refused("--layers 2", "--layers/--dim: give both");
    refused("--ranks 8", "--params: required");
    refused("--max-model --ranks 8", "--memory: required");
    refused("--max-model --memory -5", "--memory");
    refused("--frob", "unknown flag '--frob'");
    refused("--max-layers --dim 64 --memory 1e9", "--max-layers: needs --dim, --batch and --memory");
    refused("--max-layers --dim 64 --batch 8 --memory 1e9 --layers 3", "--max-layers: finds --layers");
    refused("--params 1e9 --host-memory 1e9", "--host-memory/--local-ranks: only with --max-layers");
    refused("--check-sources --data /nonexistent.tsv", "--data: cannot open");
    refused("--check-sources --data /tmp", "--data: '/tmp' is not a regular file"); /* it printed "0 of 0 disagree", exit 0 */
    refused("--max-model --memory 80e9 --json", "--json: with --params, --layers/--dim or --max-layers (--max-model"); /* ignored */
    refused("--paper-table1 --json", "(--paper-table1 prints a table only)");
    refused("--model gpt --layers 1 --dim 64 --heads 1 --seq 1 --batch 70000 --ranks 1 --attention fused",
            "--attention fused: --batch at most 65535 (got 70000)");
}

/* A report that cannot reach stdout (a full disk: /dev/full) is lost: exit 1 and one line naming
 * strerror, never 0. Every mode prints through the same exit path; --help and a long table (past
 * stdio's buffer, so printf itself fails first) too. */
static void stdout_full(const char *args) {
    zl_run_result r;
    char line[512];
    snprintf(line, sizeof line, ZEROCALC " %s", args);
    zl_run_plain_stdout(&r, "/dev/full", "%s", line);
    cr_expect_eq(r.exit_code, 1, "'%s' > /dev/full exited %d: '%s'", args, r.exit_code, r.err);
    cr_expect(strstr(r.err, "zerocalc: writing the report to stdout failed: No space left on device"),
              "'%s' > /dev/full: '%s'", args, r.err);
}

Test(cli, stdout_full_exits_1) {
    if (access("/dev/full", W_OK)) cr_skip_test("no /dev/full");
    stdout_full("--params 1000");
    stdout_full("--params 1000 --json");
    stdout_full("--layers 2 --dim 31 --batch 4 --ranks 2 --json");
    stdout_full("--paper-table1");
    stdout_full("--max-model --memory 32e9 --ranks 64");
    stdout_full("--check-sources");
    stdout_full("--help");
}
