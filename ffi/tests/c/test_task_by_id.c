/* Options take {"task": TaskRef}, and a TaskRef deserialises from just {"id": "..."}. A task
 * named by id must be the environment's task: the trajectory records its prompt and metadata,
 * and judges that read metadata.answer (with_judge) can judge it, in a single rollout and in a
 * batch's "tasks". */

#include "common.h"

static void expect_full_task(const nenyax_string_t *t, const char *what)
{
    char err[512] = "", line[256];
    const char *task = json_value(t->ptr, t->len, "task");
    size_t rest = task != NULL ? (size_t)(t->ptr + t->len - task) : 0;
    const char *metadata = task != NULL ? find_bytes(task, rest, "\"metadata\":") : NULL;
    int has_prompt = task != NULL && !json_is_null(task, rest, "prompt");
    int has_answer = metadata != NULL && strncmp(metadata + 11, "{\"answer\":", 10) == 0;
    json_string(t->ptr, t->len, "error", err, sizeof err);
    printf("        %s: error %s\n", what, err[0] ? err : "null");
    snprintf(line, sizeof line, "%s: the trajectory's task has its prompt", what);
    check_report(has_prompt, __FILE__, __LINE__, line, NULL);
    snprintf(line, sizeof line, "%s: the trajectory's task has metadata.answer", what);
    check_report(has_answer, __FILE__, __LINE__, line, NULL);
    snprintf(line, sizeof line, "%s: judged without error, score 1.0", what);
    check_report(json_is_null(t->ptr, t->len, "error") && trajectory_score(t->ptr, t->len) == 1.0,
                 __FILE__, __LINE__, line, err[0] ? err : NULL);
}

int main(void)
{
    nenyax_env_t *env = NULL, *judged = NULL;
    nenyax_policy_t *reference = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_string_t s = {NULL, 0};

    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=5"), &env));
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    REQUIRE_OK(nenyax_env_with_judge(env, S("{\"type\": \"exact\", \"extract\": \"answer_tag\"}"),
                                     &judged));
    REQUIRE_OK(nenyax_runner_new(1, &runner));

    printf("a task named by id, on the environment itself\n");
    REQUIRE_OK(nenyax_env_rollout(env, reference, S("{\"task\": {\"id\": \"3\"}}"), &s));
    expect_full_task(&s, "nenyax_env_rollout on builtin:arithmetic");
    nenyax_string_free(&s);

    printf("a task named by id, on the environment re-judged with with_judge\n");
    REQUIRE_OK(nenyax_env_rollout(judged, reference, S("{\"task\": {\"id\": \"3\"}}"), &s));
    expect_full_task(&s, "nenyax_env_rollout on the judged environment");
    nenyax_string_free(&s);

    REQUIRE_OK(nenyax_runner_run(runner, judged, reference,
                                 S("{\"n\": 1, \"tasks\": [{\"id\": \"2\"}]}"), NULL, NULL, &s));
    expect_full_task(&s, "nenyax_runner_run \"tasks\" on the judged environment");
    nenyax_string_free(&s);

    nenyax_runner_free(runner);
    nenyax_policy_free(reference);
    nenyax_env_free(judged);
    nenyax_env_free(env);
    return finish("test_task_by_id");
}
