/* A trajectory sink that stops a batch must make nenyax_runner_run return
 * NENYAX_STATUS_CALLBACK promptly, whatever the callbacks' threading flags.
 *
 * Each scenario runs in a child process with a watchdog (alarm), so a hang is reported as a
 * failure with the scenario's name instead of hanging the test. The parent makes no library
 * call before forking. */

#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum { WATCHDOG_S = 20 };

static int32_t act(void *user_data, const char *obs, size_t len, nenyax_reply_t *reply)
{
    (void)user_data;
    (void)obs;
    (void)len;
    return nenyax_reply_set(reply, S("\"<answer>0</answer>\"")) ? 0 : 1;
}

static int32_t score(void *user_data, const char *task, size_t task_len, const char *reply,
                     size_t reply_len, double *score_out, nenyax_reply_t *error)
{
    (void)user_data;
    (void)task;
    (void)task_len;
    (void)error;
    *score_out = find_bytes(reply, reply_len, "<answer>1</answer>") != NULL;
    return 0;
}

static int32_t reference(void *user_data, const char *task, size_t task_len,
                         nenyax_reply_t *reply)
{
    (void)user_data;
    (void)task;
    (void)task_len;
    return nenyax_reply_set(reply, S("<answer>1</answer>")) ? 0 : 1;
}

static int32_t stop_at_3(void *user_data, size_t index, const char *traj, size_t len)
{
    size_t *calls = user_data;
    (void)traj;
    (void)len;
    (*calls)++;
    return index == 3 ? 1 : 0;
}

/* A callback policy on builtin:arithmetic, stopped at job 3 of 2000. */
static int policy_scenario(uint32_t flags)
{
    nenyax_env_t *env = NULL;
    nenyax_policy_t *p = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, act, NULL, NULL, NULL};
    size_t calls = 0;
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic"), &env));
    REQUIRE_OK(nenyax_policy_new(&vt, NULL, NULL, flags, &p));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    CHECK_STATUS_MSG(nenyax_runner_run(runner, env, p, S("{\"n\": 2000}"), stop_at_3, &calls,
                                       NULL),
                     NENYAX_STATUS_CALLBACK, "at job 3");
    CHECK(calls == 4);
    nenyax_runner_free(runner);
    nenyax_policy_free(p);
    nenyax_env_free(env);
    return checks_failed == 0 ? 0 : 1;
}

/* A callback-defined environment and its own reference policy, stopped at job 3 of 2000. */
static int env_scenario(uint32_t flags)
{
    static const char rows[] = "[{\"prompt\": \"a\"}, {\"prompt\": \"b\"}, {\"prompt\": \"c\"}]";
    nenyax_env_t *env = NULL;
    nenyax_policy_t *p = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_task_vtable_t vt = {NENYAX_VTABLE_VERSION, score, reference};
    size_t calls = 0;
    REQUIRE_OK(nenyax_env_define_tasks(S("stop"), S(rows), &vt, NULL, NULL, flags, &env));
    REQUIRE_OK(nenyax_env_reference_policy(env, &p));
    REQUIRE_OK(nenyax_runner_new(2, &runner));
    CHECK_STATUS_MSG(nenyax_runner_run(runner, env, p, S("{\"n\": 2000}"), stop_at_3, &calls,
                                       NULL),
                     NENYAX_STATUS_CALLBACK, "at job 3");
    CHECK(calls == 4);
    nenyax_runner_free(runner);
    nenyax_policy_free(p);
    nenyax_env_free(env);
    return checks_failed == 0 ? 0 : 1;
}

/* Run one scenario in a child with a watchdog; report it by name. */
static void scenario(const char *name, int (*body)(uint32_t), uint32_t flags)
{
    pid_t pid;
    int status = 0;
    char what[160];
    fflush(stdout);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int rc;
        alarm(WATCHDOG_S);
        rc = body(flags);
        fflush(stdout);
        exit(rc); /* not _exit: LeakSanitizer checks the child at exit */
    }
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
        snprintf(what, sizeof what,
                 "%s: nenyax_runner_run did not return within %d s after the sink stopped the "
                 "batch (deadlock)",
                 name, (int)WATCHDOG_S);
        check_report(0, __FILE__, __LINE__, what, NULL);
    } else {
        snprintf(what, sizeof what, "%s: returned NENYAX_STATUS_CALLBACK promptly", name);
        check_report(WIFEXITED(status) && WEXITSTATUS(status) == 0, __FILE__, __LINE__, what,
                     NULL);
    }
}

int main(void)
{
    scenario("NENYAX_THREAD_SAFE policy callback", policy_scenario, NENYAX_THREAD_SAFE);
    scenario("NENYAX_THREAD_SAFE define_tasks callbacks", env_scenario, NENYAX_THREAD_SAFE);
    scenario("policy callback routed to the calling thread (flags 0)", policy_scenario, 0);
    scenario("define_tasks callbacks routed to the calling thread (flags 0)", env_scenario, 0);
    return finish("test_sink_stop_routed");
}
