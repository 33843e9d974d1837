/* The recording model server through the header:
 * - a recording answered by a C chat callback, called over HTTP from C;
 * - an endpoint made from a provider preset ({"provider": "vllm"} with NENYAX_VLLM_BASE_URL
 *   pointing at that recording), itself put behind a second recording, which proxies to it;
 * - a Verifiers environment (rollout mode) driven by a C chat callback that is not thread-safe:
 *   the environment calls the model from the server's threads, the callback still runs on this
 *   one, and the trajectory carries the recorded call; the same with a chat_episode callback,
 *   whose recorded token ids reach the call's record through the server.
 * The Verifiers part needs NENYAX_VERIFIERS_031_PYTHON (scripts/test.sh sets it). */

#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#ifndef NENYAX_TEST_ROOT
#define NENYAX_TEST_ROOT "."
#endif

static pthread_t main_thread;
static int off_thread_calls;

/* Answers "What is A op B?" with the number; "pong" to anything else. */
static int32_t chat_answer(void *user_data, const char *messages, size_t len,
                           nenyax_reply_t *reply)
{
    const char *q = find_bytes(messages, len, "What is ");
    long a = 0, b = 0;
    char op = 0, out[64];
    int n;
    int *calls = user_data;
    (*calls)++;
    if (!pthread_equal(pthread_self(), main_thread)) {
        off_thread_calls++;
    }
    if (q == NULL || sscanf(q, "What is %ld %c %ld", &a, &op, &b) != 3) {
        return nenyax_reply_set(reply, S("pong")) ? 0 : 1;
    }
    n = snprintf(out, sizeof out, "%ld", op == '+' ? a + b : op == '-' ? a - b : a * b);
    return nenyax_reply_set(reply, out, (size_t)n) ? 0 : 1;
}

/* chat_answer, told its episode, recording made-up token ids (the step, and the reply). */
static int32_t chat_answer_episode(void *user_data, const nenyax_episode_t *episode,
                                   const char *messages, size_t len, nenyax_reply_t *reply,
                                   nenyax_reply_t *record)
{
    char rec[128];
    int n = snprintf(rec, sizeof rec,
                     "{\"prompt_token_ids\":[7,%d],\"completion_token_ids\":[9],"
                     "\"completion_logprobs\":[-0.25]}",
                     (int)episode->step);
    nenyax_reply_set(record, rec, (size_t)n);
    return chat_answer(user_data, messages, len, reply);
}

/* POST a chat completion to `base_url` with plain sockets; the reply body into `buf`. */
static int post_chat(const char *base_url, const char *content, char *buf, size_t cap)
{
    char host[64], path[256], req[1024], body[512];
    int port = 0, fd, n, total = 0;
    struct sockaddr_in addr;
    if (sscanf(base_url, "http://%63[^:]:%d%255s", host, &port, path) != 3) {
        return -1;
    }
    snprintf(body, sizeof body,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", content);
    n = snprintf(req, sizeof req,
                 "POST %s/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                 "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                 path, host, strlen(body), body);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &addr.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        write(fd, req, (size_t)n) != n) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    while (total < (int)cap - 1 && (n = (int)read(fd, buf + total, cap - 1 - (size_t)total)) > 0) {
        total += n;
    }
    buf[total] = '\0';
    close(fd);
    return total;
}

int main(void)
{
    nenyax_policy_vtable_t vt = {NENYAX_VTABLE_VERSION, NULL, chat_answer, NULL, NULL};
    nenyax_policy_t *model = NULL, *preset = NULL, *unsafe_model = NULL;
    nenyax_recording_t *rec = NULL, *proxy = NULL;
    nenyax_string_t url = {NULL, 0}, proxy_url = {NULL, 0}, calls = {NULL, 0}, t = {NULL, 0};
    int model_calls = 0, unsafe_calls = 0;
    char resp[4096], opts[512];
    const char *vpy = getenv("NENYAX_VERIFIERS_031_PYTHON");
    main_thread = pthread_self();

    printf("a recording answered by a C callback, called over HTTP\n");
    REQUIRE_OK(nenyax_policy_new(&vt, &model_calls, NULL, NENYAX_THREAD_SAFE, &model));
    REQUIRE_OK(nenyax_recording_new(model, &rec));
    REQUIRE_OK(nenyax_recording_base_url(rec, &url));
    printf("        %s\n", url.ptr);
    CHECK(strncmp(url.ptr, "http://127.0.0.1:", 17) == 0 && strstr(url.ptr, "/r/") != NULL);
    CHECK(post_chat(url.ptr, "What is 6 * 7?", resp, sizeof resp) > 0);
    CHECK(strstr(resp, "200 OK") != NULL && strstr(resp, "\"content\":\"42\"") != NULL);
    REQUIRE_OK(nenyax_recording_calls(rec, 0, &calls));
    CHECK(count_bytes(calls.ptr, calls.len, "\"request\":") == 1);
    CHECK(find_bytes(calls.ptr, calls.len, "What is 6 * 7?") != NULL);
    nenyax_string_free(&calls);

    printf("an endpoint from a provider preset, behind a second recording that proxies to it\n");
    setenv("NENYAX_VLLM_BASE_URL", url.ptr, 1);
    REQUIRE_OK(nenyax_policy_endpoint(S("{\"provider\": \"vllm\", \"model\": \"m\"}"), &preset));
    REQUIRE_OK(nenyax_recording_new(preset, &proxy));
    REQUIRE_OK(nenyax_recording_base_url(proxy, &proxy_url));
    CHECK(post_chat(proxy_url.ptr, "What is 100 - 1?", resp, sizeof resp) > 0);
    CHECK(strstr(resp, "\"content\":\"99\"") != NULL);
    REQUIRE_OK(nenyax_recording_calls(proxy, 1, &calls));
    CHECK(count_bytes(calls.ptr, calls.len, "\"request\":") == 1);
    nenyax_string_free(&calls);
    REQUIRE_OK(nenyax_recording_calls(proxy, 1, &calls));
    CHECK(strcmp(calls.ptr, "[]") == 0); /* drained */
    nenyax_string_free(&calls);
    REQUIRE_OK(nenyax_recording_calls(rec, 0, &calls));
    CHECK(count_bytes(calls.ptr, calls.len, "\"request\":") == 2); /* both reached the callback */
    nenyax_string_free(&calls);
    CHECK(model_calls == 2);

    printf("an action policy cannot answer a recording\n");
    {
        nenyax_recording_t *bad = NULL;
        nenyax_policy_t *action = NULL;
        nenyax_env_t *env = NULL;
        REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=2"), &env));
        REQUIRE_OK(nenyax_env_reference_policy(env, &action));
        CHECK_STATUS_MSG(nenyax_recording_new(action, &bad), NENYAX_STATUS_INVALID_ARGUMENT,
                         "chat policy");
        CHECK(bad == NULL);
        nenyax_policy_free(action);
        nenyax_env_free(env);
    }

    printf("a Verifiers environment driven by a callback that is not thread-safe\n");
    if (vpy == NULL) {
        check_report(0, __FILE__, __LINE__,
                     "NENYAX_VERIFIERS_031_PYTHON is set (run scripts/test.sh)", NULL);
    } else {
        nenyax_env_t *env = NULL;
        snprintf(opts, sizeof opts,
                 "verifiers:nx-arith-v0?path=%s/tests/verifiers_envs&python=%s&workers=1",
                 NENYAX_TEST_ROOT, vpy);
        REQUIRE_OK(nenyax_env_load(opts, strlen(opts), &env));
        REQUIRE_OK(nenyax_policy_new(&vt, &unsafe_calls, NULL, 0, &unsafe_model));
        off_thread_calls = 0;
        REQUIRE_OK(nenyax_env_rollout(env, unsafe_model, S("{\"task\": {\"id\": \"1\"}}"), &t));
        printf("        score %.1f, error %s\n", trajectory_score(t.ptr, t.len),
               json_is_null(t.ptr, t.len, "error") ? "null" : "set");
        CHECK(trajectory_score(t.ptr, t.len) == 1.0);
        CHECK(find_bytes(t.ptr, t.len, "\"model_calls\":[{\"request\":") != NULL);
        CHECK(unsafe_calls == 1);
        CHECK(off_thread_calls == 0);
        nenyax_string_free(&t);

        printf("... and by a chat_episode callback: its record reaches the recorded call\n");
        {
            nenyax_policy_vtable_t ev = {NENYAX_POLICY_VTABLE_VERSION, NULL, NULL, NULL,
                                         chat_answer_episode};
            nenyax_policy_t *episode_model = NULL;
            int episode_calls = 0;
            REQUIRE_OK(nenyax_policy_new(&ev, &episode_calls, NULL, 0, &episode_model));
            REQUIRE_OK(nenyax_env_rollout(env, episode_model, S("{\"task\": {\"id\": \"1\"}}"),
                                          &t));
            CHECK(trajectory_score(t.ptr, t.len) == 1.0);
            CHECK(episode_calls == 1 && off_thread_calls == 0);
            CHECK(find_bytes(t.ptr, t.len, "\"prompt_token_ids\":[7,0]") != NULL);
            CHECK(find_bytes(t.ptr, t.len, "\"completion_logprobs\":[-0.25]") != NULL);
            nenyax_string_free(&t);
            nenyax_policy_free(episode_model);
        }
        nenyax_env_free(env);
    }

    nenyax_string_free(&proxy_url);
    nenyax_string_free(&url);
    nenyax_recording_free(proxy);
    nenyax_recording_free(rec);
    nenyax_recording_free(NULL);
    nenyax_policy_free(unsafe_model);
    nenyax_policy_free(preset);
    nenyax_policy_free(model);
    return finish("test_recording");
}
