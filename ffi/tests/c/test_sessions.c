/* Step-mode sessions on the builtins: open (with and without options), observation, act, done,
 * judgment, act after done, invalid actions, a multi-step game, and sessions outliving the
 * environment handle they came from. */

#include "common.h"

/* The answer to the session's arithmetic observation {"data": {"expression": "A op B"}, ...}. */
static long long solve(const nenyax_string_t *obs)
{
    char expr[64];
    long long a = 0, b = 0;
    char op = '+';
    const char *data = json_value(obs->ptr, obs->len, "data");
    REQUIRE(data != NULL);
    REQUIRE(json_string(data, (size_t)(obs->ptr + obs->len - data), "expression", expr,
                        sizeof expr) > 0);
    REQUIRE(sscanf(expr, "%lld %c %lld", &a, &op, &b) == 3);
    return op == '+' ? a + b : op == '-' ? a - b : a * b;
}

static void arithmetic(void)
{
    nenyax_env_t *env = NULL;
    nenyax_session_t *session = NULL, *seeded = NULL, *chosen = NULL;
    nenyax_string_t obs = {NULL, 0}, step = {NULL, 0}, judgment = {NULL, 0}, tasks = {NULL, 0};
    char action[64], buf[256];
    int n;
    printf("a session on builtin:arithmetic\n");
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=20&seed=3"), &env));
    REQUIRE_OK(nenyax_session_open(env, NULL, 0, &session));
    CHECK(!nenyax_session_done(session));
    REQUIRE_OK(nenyax_session_observation(session, &obs));
    CHECK(string_ok(&obs));
    CHECK(find_bytes(obs.ptr, obs.len, "\"task_id\":\"0\"") != NULL);
    CHECK(json_string(obs.ptr, obs.len, "text", buf, sizeof buf) > 0 &&
          strncmp(buf, "What is ", 8) == 0);

    /* an action the environment refuses leaves the episode running */
    CHECK_STATUS(nenyax_session_act(session, S("{\"answer\": 1}"), &step),
                 NENYAX_STATUS_INVALID_ACTION);
    CHECK(!nenyax_session_done(session));

    /* before acting, the judgment so far */
    CHECK_OK(nenyax_session_judgment(session, &judgment));
    CHECK(json_number(judgment.ptr, judgment.len, "score") == 0.0);
    nenyax_string_free(&judgment);

    n = snprintf(action, sizeof action, "\"<answer>%lld</answer>\"", solve(&obs));
    REQUIRE_OK(nenyax_session_act(session, action, (size_t)n, &step));
    CHECK(string_ok(&step));
    CHECK(json_number(step.ptr, step.len, "reward") == 1.0);
    CHECK(find_bytes(step.ptr, step.len, "\"terminated\":true") != NULL);
    CHECK(find_bytes(step.ptr, step.len, "\"truncated\":false") != NULL);
    CHECK(nenyax_session_done(session));
    nenyax_string_free(&step);

    REQUIRE_OK(nenyax_session_judgment(session, &judgment));
    CHECK(json_number(judgment.ptr, judgment.len, "score") == 1.0);
    CHECK(find_bytes(judgment.ptr, judgment.len, "\"passed\":true") != NULL);
    nenyax_string_free(&judgment);

    /* after the end: acting is an error, reading is not */
    CHECK_STATUS_MSG(nenyax_session_act(session, action, (size_t)n, &step),
                     NENYAX_STATUS_ENVIRONMENT, "the episode is over");
    CHECK(step.ptr == NULL);
    CHECK(nenyax_session_done(session));
    CHECK_OK(nenyax_session_observation(session, &judgment));
    nenyax_string_free(&judgment);
    nenyax_session_free(session);
    nenyax_string_free(&obs);

    /* options: a seed picks the task; a task picks itself */
    REQUIRE_OK(nenyax_session_open(env, S("{\"seed\": 7}"), &seeded));
    REQUIRE_OK(nenyax_session_observation(seeded, &obs));
    CHECK(find_bytes(obs.ptr, obs.len, "\"task_id\":\"7\"") != NULL);
    nenyax_string_free(&obs);
    REQUIRE_OK(nenyax_env_tasks(env, 0, &tasks));
    CHECK(count_bytes(tasks.ptr, tasks.len, "{\"id\":") == 20);
    nenyax_string_free(&tasks);
    REQUIRE_OK(nenyax_session_open(env, S("{\"task\": {\"id\": \"13\"}, \"seed\": 1}"), &chosen));
    REQUIRE_OK(nenyax_session_observation(chosen, &obs));
    CHECK(find_bytes(obs.ptr, obs.len, "\"task_id\":\"13\"") != NULL);
    /* a wrong answer */
    REQUIRE_OK(nenyax_session_act(chosen, S("\"<answer>-1</answer>\""), &step));
    CHECK(json_number(step.ptr, step.len, "reward") == 0.0);
    nenyax_string_free(&step);
    REQUIRE_OK(nenyax_session_judgment(chosen, &judgment));
    CHECK(json_number(judgment.ptr, judgment.len, "score") == 0.0);
    CHECK(find_bytes(judgment.ptr, judgment.len, "\"passed\":false") != NULL);
    nenyax_string_free(&judgment);
    nenyax_string_free(&obs);

    /* a task the environment does not have */
    CHECK_STATUS(nenyax_session_open(env, S("{\"task\": {\"id\": \"999\"}}"), &session),
                 NENYAX_STATUS_INVALID_PARAMETER);

    /* sessions outlive the environment handle */
    nenyax_env_free(env);
    REQUIRE_OK(nenyax_session_observation(seeded, &obs));
    n = snprintf(action, sizeof action, "\"<answer>%lld</answer>\"", solve(&obs));
    REQUIRE_OK(nenyax_session_act(seeded, action, (size_t)n, &step));
    CHECK(json_number(step.ptr, step.len, "reward") == 1.0);
    nenyax_string_free(&step);
    nenyax_string_free(&obs);
    nenyax_session_free(seeded);
    nenyax_session_free(chosen);
}

static void guess(void)
{
    nenyax_env_t *env = NULL;
    nenyax_session_t *session = NULL;
    nenyax_string_t obs = {NULL, 0}, step = {NULL, 0}, judgment = {NULL, 0};
    int steps = 0;
    printf("a multi-step session on builtin:guess (bisection from the observation)\n");
    REQUIRE_OK(nenyax_env_load(S("builtin:guess?high=1000&max_guesses=12"), &env));
    REQUIRE_OK(nenyax_session_open(env, S("{\"seed\": 4}"), &session));
    REQUIRE_OK(nenyax_session_observation(session, &obs));
    while (!nenyax_session_done(session) && steps < 20) {
        const char *data = json_value(obs.ptr, obs.len, "data");
        size_t rest = (size_t)(obs.ptr + obs.len - data);
        double lo = json_number(data, rest, "low"), hi = json_number(data, rest, "high");
        char action[32];
        int n = snprintf(action, sizeof action, "%d", (int)(lo + (hi - lo) / 2));
        REQUIRE(!isnan(lo) && !isnan(hi));
        REQUIRE_OK(nenyax_session_act(session, action, (size_t)n, &step));
        nenyax_string_free(&obs);
        obs = step; /* the step's observation object is the next observation */
        step.ptr = NULL;
        step.len = 0;
        steps++;
    }
    printf("        %d guesses\n", steps);
    CHECK(nenyax_session_done(session));
    CHECK(steps >= 1 && steps <= 10);
    CHECK(find_bytes(obs.ptr, obs.len, "Correct") != NULL);
    REQUIRE_OK(nenyax_session_judgment(session, &judgment));
    CHECK(json_number(judgment.ptr, judgment.len, "score") > 0.0);
    nenyax_string_free(&judgment);
    nenyax_string_free(&obs);
    /* a text action is accepted too */
    nenyax_session_free(session);
    REQUIRE_OK(nenyax_session_open(env, NULL, 0, &session));
    REQUIRE_OK(nenyax_session_act(session, S("\"my guess is 500\""), &step));
    CHECK(find_bytes(step.ptr, step.len, "500") != NULL);
    nenyax_string_free(&step);
    nenyax_session_free(session);
    nenyax_env_free(env);
}

int main(void)
{
    arithmetic();
    guess();
    return finish("test_sessions");
}
