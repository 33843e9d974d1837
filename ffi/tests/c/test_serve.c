/* The OpenEnv server through the header: serve builtin:arithmetic on a free port, play a whole
 * episode over plain HTTP with an opt-in session (reset with {"session": true}, step with the
 * session id), read the judgment from the final step's metadata, and stop the server. Also:
 * a rollout-mode refusal, bad options, and NULL handles. */

#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

/* POST `body` to `path` on http://127.0.0.1:port; the whole response into buf. */
static int http(int port, const char *method, const char *path, const char *body, char *buf,
                size_t cap)
{
    char req[2048];
    struct sockaddr_in addr;
    int fd, n, total = 0;
    n = snprintf(req, sizeof req,
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                 method, path, strlen(body), body);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
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
    nenyax_env_t *env = NULL;
    nenyax_server_t *server = NULL, *never = NULL;
    nenyax_string_t url = {NULL, 0};
    char resp[8192], body[256], sid[80], expr[64];
    const char *b;
    long a = 0, c = 0;
    char op = 0;
    int port;

    printf("serve builtin:arithmetic on a free port\n");
    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=10"), &env));
    REQUIRE_OK(nenyax_serve_start(env, S("{\"port\": 0, \"max_sessions\": 4}"), &server));
    REQUIRE_OK(nenyax_server_url(server, &url));
    printf("        %s\n", url.ptr);
    REQUIRE(strncmp(url.ptr, "http://127.0.0.1:", 17) == 0);
    port = atoi(url.ptr + 17);
    REQUIRE(port > 0);

    CHECK(http(port, "GET", "/health", "", resp, sizeof resp) > 0);
    CHECK(strstr(resp, "200 OK") != NULL && strstr(resp, "\"healthy\"") != NULL);

    printf("a whole episode over HTTP with an opt-in session\n");
    REQUIRE(http(port, "POST", "/reset", "{\"seed\": 2, \"session\": true}", resp, sizeof resp) > 0);
    b = strstr(resp, "\r\n\r\n");
    REQUIRE(b != NULL);
    b += 4;
    REQUIRE(json_string(b, strlen(b), "session_id", sid, sizeof sid) > 0);
    REQUIRE(json_string(b, strlen(b), "expression", expr, sizeof expr) > 0);
    REQUIRE(sscanf(expr, "%ld %c %ld", &a, &op, &c) == 3);
    snprintf(body, sizeof body, "{\"action\": {\"value\": \"<answer>%ld</answer>\"}, \"session_id\": \"%s\"}",
             op == '+' ? a + c : op == '-' ? a - c : a * c, sid);
    REQUIRE(http(port, "POST", "/step", body, resp, sizeof resp) > 0);
    CHECK(strstr(resp, "\"done\":true") != NULL);
    CHECK(strstr(resp, "\"nenyax_judgment\"") != NULL);
    CHECK(strstr(resp, "\"passed\":true") != NULL);
    /* The episode is over: its session is gone. */
    CHECK(http(port, "POST", "/step", body, resp, sizeof resp) > 0 && strstr(resp, " 404 ") != NULL);

    printf("bad options and NULLs are errors, not crashes\n");
    CHECK_STATUS(nenyax_serve_start(env, S("{\"prot\": 1}"), &never), NENYAX_STATUS_CONFIG);
    CHECK_STATUS(nenyax_serve_start(env, S("[1]"), &never), NENYAX_STATUS_CONFIG);
    CHECK_STATUS(nenyax_serve_start(NULL, NULL, 0, &never), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(nenyax_server_url(NULL, &url), NENYAX_STATUS_INVALID_ARGUMENT);
    CHECK(never == NULL);

    nenyax_server_stop(server);
    nenyax_server_stop(NULL);
    CHECK(http(port, "GET", "/health", "", resp, sizeof resp) <= 0);
    nenyax_string_free(&url);
    nenyax_env_free(env);
    return finish("test_serve");
}
