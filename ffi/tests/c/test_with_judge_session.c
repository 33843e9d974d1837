/* nenyax_env_with_judge: "A new environment whose episodes are re-judged by the judge a JSON
 * spec describes". A session is an episode of that environment, so nenyax_session_judgment must
 * agree with the judgment a rollout of the same task and action gets. */

#include "common.h"

int main(void)
{
    nenyax_env_t *env = NULL, *judged = NULL;
    nenyax_policy_t *reference = NULL;
    nenyax_session_t *session = NULL;
    nenyax_string_t traj = {NULL, 0}, step = {NULL, 0}, judgment = {NULL, 0};
    char action[128], judge[128] = "", expected_judge[128] = "";
    const char *a, *j;
    double rollout_score, session_score;

    REQUIRE_OK(nenyax_env_load(S("builtin:arithmetic?size=5"), &env));
    REQUIRE_OK(nenyax_env_reference_policy(env, &reference));
    /* "whole": the whole reply must equal the answer, so "<answer>58</answer>" scores 0 */
    REQUIRE_OK(nenyax_env_with_judge(env, S("{\"type\": \"exact\", \"extract\": \"whole\"}"),
                                     &judged));

    printf("a rollout (seed 0) on the judged environment\n");
    REQUIRE_OK(nenyax_env_rollout(judged, reference, S("{\"seed\": 0}"), &traj));
    rollout_score = trajectory_score(traj.ptr, traj.len);
    j = json_value(traj.ptr, traj.len, "judgment");
    REQUIRE(j != NULL);
    json_string(j, (size_t)(traj.ptr + traj.len - j), "judge", expected_judge,
                sizeof expected_judge);
    /* the action the reference policy took */
    a = json_value(traj.ptr, traj.len, "steps");
    REQUIRE(a != NULL);
    REQUIRE(json_string(a, (size_t)(traj.ptr + traj.len - a), "action", action + 1,
                        sizeof action - 2) > 0);
    printf("        action %s: score %g by %s\n", action + 1, rollout_score, expected_judge);
    CHECK(rollout_score == 0.0);

    printf("the same seed and action in a session on the judged environment\n");
    REQUIRE_OK(nenyax_session_open(judged, S("{\"seed\": 0}"), &session));
    action[0] = '"';
    strcat(action, "\"");
    REQUIRE_OK(nenyax_session_act(session, action, strlen(action), &step));
    REQUIRE_OK(nenyax_session_judgment(session, &judgment));
    session_score = json_number(judgment.ptr, judgment.len, "score");
    json_string(judgment.ptr, judgment.len, "judge", judge, sizeof judge);
    printf("        session judgment: score %g by %s\n", session_score, judge);
    CHECK(session_score == rollout_score);
    CHECK(strcmp(judge, expected_judge) == 0);

    nenyax_string_free(&traj);
    nenyax_string_free(&step);
    nenyax_string_free(&judgment);
    nenyax_session_free(session);
    nenyax_policy_free(reference);
    nenyax_env_free(judged);
    nenyax_env_free(env);
    return finish("test_with_judge_session");
}
