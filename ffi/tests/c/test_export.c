/* Exports through nenyax_export: in-memory JSONL and a file as SFT, DPO and raw rows, to JSONL
 * and Parquet (checked by its magic bytes and the row count; tests/export.rs reads the same
 * files back with pyarrow), and the error statuses of bad input. */

#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <stdlib.h>
#include <unistd.h>

/* Two attempts at one task scoring 1 and 0, and a failed episode. */
static const char RUNS[] =
    "{\"env_id\":\"builtin:arithmetic\",\"mode\":\"step\",\"task\":{\"id\":\"t1\"},\"seed\":1,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"},{\"role\":\"assistant\",\"content\":\"4\"}],"
    "\"judgment\":{\"score\":1.0}}\n"
    "{\"env_id\":\"builtin:arithmetic\",\"mode\":\"step\",\"task\":{\"id\":\"t1\"},\"seed\":2,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"},{\"role\":\"assistant\",\"content\":\"5\"}],"
    "\"judgment\":{\"score\":0.0}}\n"
    "{\"env_id\":\"builtin:arithmetic\",\"mode\":\"step\",\"error\":\"EnvironmentError: boom\"}\n";

static char dir[] = "/tmp/nenyax-export-XXXXXX";

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    if (f == NULL)
        return NULL;
    buf = calloc(1, 1 << 20);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    return buf;
}

static void in_memory(void)
{
    char options[512], path[256];
    nenyax_string_t summary = {NULL, 0};
    size_t len = 0;
    char *text;
    printf("in-memory JSONL as DPO rows (JSONL) and SFT rows (Parquet)\n");
    snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
    snprintf(options, sizeof options, "{\"to\": \"jsonl\", \"rows\": \"dpo\", \"out\": \"%s\"}",
             path);
    REQUIRE_OK(nenyax_export(S(RUNS), options, strlen(options), &summary));
    CHECK(find_bytes(summary.ptr, summary.len, "\"rows\":1") != NULL);
    CHECK(find_bytes(summary.ptr, summary.len, "\"trajectories\":3") != NULL);
    CHECK(find_bytes(summary.ptr, summary.len, "\"failed\":1") != NULL);
    nenyax_string_free(&summary);
    text = slurp(path, &len);
    REQUIRE(text != NULL);
    CHECK(count_bytes(text, len, "\n") == 1);
    CHECK(find_bytes(text, len, "\"chosen\":[{\"content\":\"4\",\"role\":\"assistant\"}]") != NULL);
    CHECK(find_bytes(text, len, "\"rejected\":[{\"content\":\"5\",\"role\":\"assistant\"}]") != NULL);
    CHECK(find_bytes(text, len, "\"score_rejected\":0.0") != NULL);
    free(text);

    snprintf(path, sizeof path, "%s/sft.parquet", dir);
    snprintf(options, sizeof options,
             "{\"to\": \"parquet\", \"rows\": \"sft\", \"min_score\": 0.5, \"out\": \"%s\"}", path);
    REQUIRE_OK(nenyax_export(S(RUNS), options, strlen(options), &summary));
    CHECK(find_bytes(summary.ptr, summary.len, "\"rows\":1") != NULL);
    CHECK(find_bytes(summary.ptr, summary.len, "\"below_min_score\":1") != NULL);
    nenyax_string_free(&summary);
    text = slurp(path, &len);
    REQUIRE(text != NULL && len > 8);
    CHECK(memcmp(text, "PAR1", 4) == 0 && memcmp(text + len - 4, "PAR1", 4) == 0);
    free(text);
}

static void from_file(void)
{
    char options[512], input[256], out[256];
    nenyax_string_t summary = {NULL, 0};
    FILE *f;
    printf("a JSONL file as raw rows in a Hugging Face dataset folder\n");
    snprintf(input, sizeof input, "%s/runs.jsonl", dir);
    f = fopen(input, "wb");
    REQUIRE(f != NULL);
    fwrite(RUNS, 1, sizeof RUNS - 1, f);
    fclose(f);
    snprintf(options, sizeof options, "{\"input\": \"%s\", \"to\": \"hf\"}", input);
    REQUIRE_OK(nenyax_export(NULL, 0, options, strlen(options), &summary));
    CHECK(find_bytes(summary.ptr, summary.len, "\"rows\":3") != NULL);
    nenyax_string_free(&summary);
    snprintf(out, sizeof out, "%s/runs.raw/data/train-00000-of-00001.parquet", dir);
    CHECK(access(out, R_OK) == 0);
    snprintf(out, sizeof out, "%s/runs.raw/README.md", dir);
    CHECK(access(out, R_OK) == 0);
}

static void errors(void)
{
    nenyax_string_t summary = {NULL, 0};
    char options[512];
    printf("bad input\n");
    snprintf(options, sizeof options, "{\"out\": \"%s/x.jsonl\"}", dir);
    CHECK_STATUS_MSG(nenyax_export(S("not json\n"), options, strlen(options), &summary),
                     NENYAX_STATUS_PROTOCOL, "line 1 is not a trajectory");
    CHECK_STATUS_MSG(nenyax_export(S(RUNS), S("{\"rows\": \"ppo\"}"), &summary),
                     NENYAX_STATUS_CONFIG, "unknown rows `ppo`");
    CHECK_STATUS_MSG(nenyax_export(S(RUNS), S("{\"to\": \"atif\", \"rows\": \"sft\", \"out\": \"/tmp/x\"}"), &summary),
                     NENYAX_STATUS_CONFIG, "ATIF");
    CHECK_STATUS_MSG(nenyax_export(S(RUNS), S("{}"), &summary), NENYAX_STATUS_INVALID_ARGUMENT,
                     "needs the option \"out\"");
    CHECK_STATUS_MSG(nenyax_export(NULL, 0, S("{}"), &summary), NENYAX_STATUS_INVALID_ARGUMENT,
                     "no trajectories");
    CHECK_STATUS_MSG(nenyax_export(S(RUNS), S("{\"input\": \"a\", \"out\": \"b\"}"), &summary),
                     NENYAX_STATUS_INVALID_ARGUMENT, "not both");
    CHECK_STATUS_MSG(nenyax_export(NULL, 0, S("{\"input\": \"/nonexistent/runs.jsonl\"}"),
                                   &summary),
                     NENYAX_STATUS_IO, "/nonexistent/runs.jsonl");
    CHECK_STATUS(nenyax_export(S(RUNS), S("[1]"), &summary), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_export(S(RUNS), options, strlen(options), NULL),
                 NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(summary.ptr == NULL);
}

int main(void)
{
    REQUIRE(mkdtemp(dir) != NULL);
    in_memory();
    from_file();
    errors();
    return finish("test_export");
}
