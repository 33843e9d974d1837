/* Telemetry through the C ABI: a "telemetry" list in the options of nenyax_runner_run and
 * nenyax_train. A wrong entry is a typed configuration error naming the known sinks; a working
 * one sends the batch's episodes and the training's rounds to the OTLP endpoint in
 * NENYAX_TEST_OTLP_ENDPOINT (ffi/tests/c_programs.rs starts a decoding receiver and reads back
 * what arrived); without it the endpoint is a closed port, and the calls must still succeed:
 * telemetry never fails a batch. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

int main(void)
{
    nenyax_env_t *arith = NULL, *guess = NULL;
    nenyax_policy_t *oracle = NULL;
    nenyax_runner_t *runner = NULL;
    nenyax_learner_t *learner = NULL;
    nenyax_string_t s = {NULL, 0};
    const char *endpoint = getenv("NENYAX_TEST_OTLP_ENDPOINT");
    char run_opts[512], train_opts[512];

    if (endpoint == NULL) {
        endpoint = "http://127.0.0.1:9"; /* discard: nothing listens there */
    }
    snprintf(run_opts, sizeof run_opts,
             "{\"n\": 5, \"seed\": 40, \"telemetry\": [{\"name\": \"otel\", \"endpoint\": \"%s\"}]}",
             endpoint);
    snprintf(train_opts, sizeof train_opts,
             "{\"rounds\": 2, \"group_size\": 2, \"batch\": 2, \"eval_tasks\": 2, \"telemetry\": "
             "[{\"name\": \"otel\", \"endpoint\": \"%s\", \"service_name\": \"c-train\"}]}",
             endpoint);

    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=10"), &arith));
    REQUIRE_OK(nenyax_env_reference_policy(arith, &oracle));
    REQUIRE_OK(nenyax_runner_new(1, &runner));

    printf("a wrong telemetry entry is a configuration error\n");
    CHECK_STATUS_MSG(nenyax_runner_run(runner, arith, oracle,
                                       S("{\"n\": 1, \"telemetry\": [{\"name\": \"zipkin\"}]}"),
                                       NULL, NULL, &s),
                     NENYAX_STATUS_CONFIG, "known: otel, mlflow, wandb");
    CHECK_STATUS_MSG(nenyax_runner_run(runner, arith, oracle,
                                       S("{\"n\": 1, \"telemetry\": {\"name\": \"otel\"}}"), NULL,
                                       NULL, &s),
                     NENYAX_STATUS_CONFIG, "must be a list");
    CHECK_STATUS_MSG(nenyax_runner_run(runner, arith, oracle,
                                       S("{\"n\": 1, \"telemetry\": [{\"name\": \"otel\", "
                                         "\"protocol\": \"grpc\"}]}"),
                                       NULL, NULL, &s),
                     NENYAX_STATUS_CONFIG, "http/protobuf");

    printf("a batch with telemetry\n");
    REQUIRE_OK(nenyax_runner_run(runner, arith, oracle, run_opts, strlen(run_opts), NULL, NULL, &s));
    CHECK(count_bytes(s.ptr, s.len, "\"env_id\"") == 5);
    nenyax_string_free(&s);

    printf("training with telemetry\n");
    REQUIRE_OK(nenyax_env_load(S("builtin:guess?high=16&max_guesses=4&size=64"), &guess));
    REQUIRE_OK(nenyax_learner_new(S("{\"use\":\"reinforce\",\"trainer\":{\"lr\":0.05}}"), guess,
                                  NULL, NULL, NULL, NULL, &learner));
    REQUIRE_OK(nenyax_train(guess, learner, train_opts, strlen(train_opts), &s));
    CHECK(count_bytes(s.ptr, s.len, "\"outcome\":\"failed\"") == 0);
    nenyax_string_free(&s);

    nenyax_learner_free(learner);
    nenyax_runner_free(runner);
    nenyax_policy_free(oracle);
    nenyax_env_free(arith);
    nenyax_env_free(guess);
    return finish("test_telemetry");
}
