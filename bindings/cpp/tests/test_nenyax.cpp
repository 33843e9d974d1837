// Tests of the C++ wrapper (bindings/cpp/include/nenyax.hpp), dependency-free.
//
//   test_nenyax            run every test
//   test_nenyax NAME...    run the named tests (ctest registers one entry per name)
//   test_nenyax --list     print the names
//

#include <nenyax.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.hpp"

namespace {

// Solve "46 + 12" (as in builtin:arithmetic).
long long solve(std::string_view expression) {
  long long a = 0, b = 0;
  char op = 0;
  std::istringstream in{std::string(expression)};
  in >> a >> op >> b;
  switch (op) {
    case '+': return a + b;
    case '-': return a - b;
    default: return a * b;
  }
}

// The action (JSON) that solves an arithmetic observation (JSON).
std::string solve_observation(std::string_view observation_json) {
  const std::string expr = string_field(observation_json, "expression");
  if (expr.empty()) throw std::runtime_error("observation has no expression");
  return "\"<answer>" + std::to_string(solve(expr)) + "</answer>\"";
}

const char* const ARITH = "builtin:arithmetic?size=100";

}  // namespace

// ---------------------------------------------------------------------------------------------
// tests

TEST(version) {
  CHECK(nenyax::version() == NENYAX_VERSION_STRING);
  CHECK(nenyax::version_number() == NENYAX_VERSION_NUMBER);
  CHECK(nenyax::protocol_version() == "0.1");
}

TEST(load_manifest_tasks) {
  auto env = nenyax::Env::load(ARITH);
  CHECK(env);
  const std::string manifest = env.manifest();
  CHECK(string_field(manifest, "id") == ARITH);
  CHECK(string_field(manifest, "name") == "arithmetic");
  CHECK(number_field(manifest, "num_tasks") == 100);
  const std::string two = env.tasks(2);
  CHECK(two.front() == '[' && two.back() == ']');
  CHECK(count(two, "\"prompt\":") == 2);
  CHECK(string_field(two, "id") == "0");
  CHECK(count(env.tasks(), "\"prompt\":") == 100);
  CHECK(count(env.tasks(1000), "\"prompt\":") == 100);
}

TEST(rollout_lambda_policy) {
  auto env = nenyax::Env::load(ARITH);
  const auto caller = std::this_thread::get_id();
  int calls = 0;
  auto policy = nenyax::Policy::action([&](std::string_view obs) {
    CHECK(std::this_thread::get_id() == caller);
    ++calls;
    return solve_observation(obs);
  });
  const std::string traj = env.rollout(policy);
  CHECK(calls == 1);
  CHECK(!failed(traj));
  CHECK(score_of(traj) == 1.0);
  // Options pick the task.
  const std::string t7 = env.rollout(policy, R"({"task": {"id": "7"}, "seed": 3})");
  CHECK(contains(t7, "\"task\":{\"id\":\"7\""));
  CHECK(score_of(t7) == 1.0);
  // A wrong answer is a scored episode, not an error.
  auto wrong = nenyax::Policy::action([](std::string_view) { return std::string("\"no\""); });
  const std::string w = env.rollout(wrong);
  CHECK(!failed(w));
  CHECK(score_of(w) == 0.0);
}

TEST(batch_of_64_all_solved) {
  auto env = nenyax::Env::load(ARITH);
  nenyax::Runner runner(2);
  CHECK(runner.threads() == 2);
  for (bool thread_safe : {false, true}) {
    std::mutex m;
    std::set<std::thread::id> threads;
    auto policy = nenyax::Policy::action(
        [&](std::string_view obs) {
          {
            std::lock_guard<std::mutex> lock(m);
            threads.insert(std::this_thread::get_id());
          }
          return solve_observation(obs);
        },
        thread_safe);
    std::vector<std::size_t> order;
    runner.run(env, policy, R"({"n": 64})", [&](std::size_t i, std::string_view traj) {
      order.push_back(i);
      CHECK_MSG(score_of(traj) == 1.0, traj);
    });
    CHECK(order.size() == 64);
    for (std::size_t i = 0; i < order.size(); ++i) CHECK(order[i] == i);
    if (!thread_safe) {
      // Served on the calling thread only.
      CHECK(threads.size() == 1 && *threads.begin() == std::this_thread::get_id());
    } else {
      CHECK(threads.count(std::this_thread::get_id()) == 0);
    }
    // The collecting overload and the JSON-array one agree.
    const auto all = runner.run(env, policy, R"({"n": 64, "seed": 5})");
    CHECK(all.size() == 64);
    for (const auto& t : all) CHECK(score_of(t) == 1.0);
    const std::string array = runner.run_json(env, policy, R"({"n": 64})");
    CHECK(array.front() == '[' && array.back() == ']');
    CHECK(count(array, "\"judgment\":{\"score\":1.0") == 64);
  }
  // The env's own reference policy (no callback) too.
  const auto ref = runner.run(env, env.reference_policy(), R"({"n": 64})");
  CHECK(ref.size() == 64);
  for (const auto& t : ref) CHECK(score_of(t) == 1.0);
  // And the null policy scores 0.
  for (const auto& t : runner.run(env, env.null_policy(), R"({"n": 8})")) CHECK(score_of(t) == 0.0);
}

TEST(errors_carry_status) {
  CHECK_STATUS(nenyax::Env::load("nope:thing"), NENYAX_STATUS_UNKNOWN_SCHEME);
  CHECK_STATUS(nenyax::Env::load(""), NENYAX_STATUS_INVALID_URI);
  CHECK_STATUS(nenyax::Env::load("no scheme here"), NENYAX_STATUS_INVALID_URI);
  CHECK_STATUS(nenyax::Env::load("builtin:arithmetik"), NENYAX_STATUS_UNKNOWN_TARGET);
  CHECK_STATUS(nenyax::Env::load("builtin:arithmetic?bogus=1"), NENYAX_STATUS_UNKNOWN_PARAMETER);
  CHECK_STATUS(nenyax::Env::load("builtin:arithmetic?size=0"), NENYAX_STATUS_INVALID_PARAMETER);
  CHECK_STATUS(nenyax::check_uri("nope:thing"), NENYAX_STATUS_UNKNOWN_SCHEME);
  try {
    nenyax::Env::load("nope:thing");
  } catch (const std::runtime_error& e) {  // catchable as a std::runtime_error too
    CHECK(contains(e.what(), "nope"));
  }

  auto env = nenyax::Env::load(ARITH);
  auto policy = env.reference_policy();
  nenyax::Runner runner(1);
  CHECK_STATUS(env.rollout(policy, "{not json"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env.rollout(policy, R"({"sede": 1})"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(runner.run(env, policy, R"({"n": -1})"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env.check(R"({"samples": "eight"})"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env.session("42"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env.session("null"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env.with_judge(R"({"type": "fuzzy"})"), NENYAX_STATUS_CONFIG);
  // Malformed JSON is an invalid argument; well-formed JSON of the wrong shape gets the status
  // of what it describes.
  CHECK_STATUS(nenyax::Env::define("{"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(nenyax::Env::define(R"({"name": "x", "bogus": 1})"), NENYAX_STATUS_DEFINE);
  CHECK_STATUS(env.with_judge("{"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(nenyax::Runner(NENYAX_MAX_THREADS + 1), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(nenyax::Policy::endpoint("{}"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(nenyax::Policy::action(nenyax::ActionFn{}), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(nenyax::Policy::chat(nenyax::ChatFn{}), NENYAX_STATUS_INVALID_ARGUMENT);
  // An action that is not JSON-for-this-env is an invalid action in a session.
  auto s = env.session();
  CHECK_STATUS(s.act("not json"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(s.act("42"), NENYAX_STATUS_INVALID_ACTION);
  // The session is still usable after an error.
  CHECK(!s.done());
}

TEST(throwing_policy_fails_only_its_episodes) {
  auto env = nenyax::Env::load(ARITH);
  nenyax::Runner runner(2);
  for (bool thread_safe : {false, true}) {
    auto policy = nenyax::Policy::action(
        [](std::string_view obs) -> std::string {
          const std::string id = string_field(obs, "task_id");
          const int n = std::stoi(id);
          if (n % 3 == 1) throw std::runtime_error("task " + id + " is not for me");
          if (n % 3 == 2) throw 42;  // not a std::exception
          return solve_observation(obs);
        },
        thread_safe);
    const auto trajs = runner.run(env, policy, R"({"n": 64})");
    CHECK(trajs.size() == 64);
    for (std::size_t i = 0; i < trajs.size(); ++i) {
      const std::string& t = trajs[i];
      const std::string error = string_field(t, "error");
      switch (i % 3) {
        case 0:
          CHECK_MSG(!failed(t) && score_of(t) == 1.0, t);
          break;
        case 1:
          CHECK_MSG(contains(error, "task " + std::to_string(i) + " is not for me"), error);
          CHECK_MSG(contains(error, "action callback failed with status 1"), error);
          break;
        default:
          CHECK_MSG(contains(error, "not a std::exception"), error);
      }
    }
  }
  // The same through a single rollout on the calling thread.
  auto boom = nenyax::Policy::action(
      [](std::string_view) -> std::string { throw std::logic_error("boom"); });
  const std::string t = env.rollout(boom);
  CHECK(contains(string_field(t, "error"), "boom"));
  // A policy that returns invalid JSON fails its episode too.
  auto bad = nenyax::Policy::action([](std::string_view) { return std::string("<answer>"); });
  CHECK(contains(string_field(env.rollout(bad), "error"), "invalid JSON"));
}

namespace {
struct SinkStop : std::exception {
  std::size_t at;
  explicit SinkStop(std::size_t i) : at(i) {}
  const char* what() const noexcept override { return "sink stop"; }
};
}  // namespace

TEST(throwing_sink_stops_and_rethrows) {
  auto env = nenyax::Env::load("builtin:arithmetic?size=1000");
  nenyax::Runner runner(2);
  auto reference = env.reference_policy();
  auto safe = nenyax::Policy::action(solve_observation, true);
  auto unsafe = nenyax::Policy::action(solve_observation, false);
  for (const nenyax::Policy* policy : {&reference, &safe, &unsafe}) {
    std::size_t calls = 0;
    bool caught = false;
    try {
      runner.run(env, *policy, R"({"n": 1000})", [&](std::size_t i, std::string_view) {
        ++calls;
        if (i == 5) throw SinkStop(i);
      });
    } catch (const SinkStop& e) {  // the user's own exception type, not nenyax::Error
      caught = true;
      CHECK(e.at == 5);
    }
    CHECK(caught);
    CHECK_MSG(calls == 6, calls);
    // The runner, env and policy are still usable.
    CHECK(runner.run(env, *policy, R"({"n": 3})").size() == 3);
  }
  // A nenyax::Error thrown by a sink is rethrown as is (not remapped to NENYAX_STATUS_CALLBACK).
  CHECK_STATUS(runner.run(env, reference, R"({"n": 4})",
                          [](std::size_t, std::string_view) {
                            throw nenyax::Error(NENYAX_STATUS_IO, "disk full");
                          }),
               NENYAX_STATUS_IO);
}

TEST(sessions) {
  auto env = nenyax::Env::load(ARITH);
  auto s = env.session(R"({"task": {"id": "3"}})");
  CHECK(s);
  const std::string obs = s.observation();
  CHECK(contains(obs, "\"task_id\":\"3\""));
  CHECK(!s.done());
  const std::string step = s.act(solve_observation(obs));
  CHECK(number_field(step, "reward") == 1.0);
  CHECK(s.done());
  CHECK(number_field(s.judgment(), "score") == 1.0);

  // A multi-step one: binary search in builtin:guess.
  auto guess = nenyax::Env::load("builtin:guess?high=1000&max_guesses=20");
  auto g = guess.session(R"({"seed": 11})");
  long long lo = 1, hi = 1000;
  int steps = 0;
  while (!g.done()) {
    CHECK(++steps <= 20);
    const long long mid = (lo + hi) / 2;
    const std::string st = g.act(std::to_string(mid));
    const std::string fb = string_field(st, "feedback");
    if (contains(fb, "Higher")) lo = mid + 1;
    else if (contains(fb, "Lower")) hi = mid - 1;
  }
  CHECK_MSG(number_field(g.judgment(), "score") == 1.0, g.judgment());

  // Moving a session moves the episode.
  nenyax::Session moved = std::move(s);
  CHECK(moved.done());
  CHECK(!s);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
}

TEST(define_from_json) {
  const char* spec = R"({
    "name": "capitals",
    "description": "capital cities",
    "tasks": [
      {"prompt": "Capital of France? Answer in <answer></answer>.", "answer": "Paris"},
      {"prompt": "Capital of Japan? Answer in <answer></answer>.", "answer": "Tokyo"},
      {"prompt": "Capital of Peru? Answer in <answer></answer>.", "answer": "Lima"}
    ],
    "judge": {"type": "exact"}
  })";
  auto env = nenyax::Env::define(spec);
  CHECK(string_field(env.manifest(), "id") == "defined:capitals");
  CHECK(count(env.tasks(), "\"prompt\":") == 3);
  nenyax::Runner runner(2);
  for (const auto& t : runner.run(env, env.reference_policy(), R"({"n": 9})"))
    CHECK_MSG(score_of(t) == 1.0, t);
  // A chat policy from C++ answers it too.
  const std::map<std::string, std::string> capitals{
      {"France", "Paris"}, {"Japan", "Tokyo"}, {"Peru", "Lima"}};
  auto chat = nenyax::Policy::chat([&](std::string_view messages) {
    for (const auto& [country, city] : capitals)
      if (contains(messages, country)) return "<answer>" + city + "</answer>";
    return std::string("?");
  });
  for (const auto& t : runner.run(env, chat, R"({"n": 6})")) CHECK_MSG(score_of(t) == 1.0, t);
  CHECK_STATUS(nenyax::Env::define(R"({"name": "x", "tasks": [{"prompt": "p"}]})"),
               NENYAX_STATUS_DEFINE);  // the exact judge needs "answer"
}

TEST(with_judge) {
  auto env = nenyax::Env::load(ARITH);
  auto judged = env.with_judge(R"({"type": "exact", "extract": "answer_tag"})");
  const std::string t = judged.rollout(env.reference_policy());
  CHECK_MSG(score_of(t) == 1.0, t);
  CHECK(contains(t, "\"judge\":\"exact"));
  // The original is unchanged.
  CHECK(contains(env.rollout(env.reference_policy()), "\"judge\":\"builtin:arithmetic\""));
  // A judge that disagrees: the reply never matches this regex.
  auto strict = env.with_judge(R"({"type": "regex", "pattern": "^never$"})");
  CHECK(score_of(strict.rollout(strict.reference_policy())) == 0.0);
  // The judged env outlives the one it wraps.
  nenyax::Env keep = env.with_judge(R"({"type": "numeric"})");
  env = nenyax::Env();
  CHECK(score_of(keep.rollout(keep.reference_policy())) == 1.0);
}

TEST(check_tiers) {
  // The full suite by URI reaches the top tier.
  const std::string report = nenyax::check_uri("builtin:arithmetic?size=20", R"({"samples": 4})");
  CHECK_MSG(string_field(report, "tier") == "audited", report);
  CHECK(!contains(report, "\"status\":\"fail\""));
  // A handle rebuilds its fresh instances the way it was made, so it reaches the top tier too.
  auto env = nenyax::Env::load("builtin:arithmetic?size=20");
  const std::string local = env.check(R"({"samples": 4, "threads": 2})");
  CHECK_MSG(string_field(local, "tier") == "audited", local);
  CHECK(contains(local, "\"name\":\"reproducible_fresh\",\"tier\":\"trainable\",\"status\":\"pass\""));
  CHECK(!contains(local, "\"status\":\"fail\""));
  // So does a defined env, re-judged or not.
  auto defined = nenyax::Env::define(
      R"({"name": "one", "tasks": [{"prompt": "1+1? <answer></answer>", "answer": "2"}]})");
  CHECK_MSG(string_field(defined.check(), "tier") == "audited", defined.check());
  auto judged = defined.with_judge(R"({"type": "contains"})");
  CHECK_MSG(string_field(judged.check(), "tier") != "none", judged.check());
}

TEST(moved_from_objects_are_safe) {
  auto env = nenyax::Env::load(ARITH);
  auto policy = nenyax::Policy::action(solve_observation);
  nenyax::Runner runner(1);
  auto session = env.session();

  nenyax::Env env2 = std::move(env);
  nenyax::Policy policy2 = std::move(policy);
  nenyax::Runner runner2 = std::move(runner);
  nenyax::Session session2 = std::move(session);
  // NOLINTBEGIN(bugprone-use-after-move): that is the point
  CHECK(!env && !policy && !runner && !session);
  CHECK_STATUS(env.manifest(), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env.rollout(policy2), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env2.rollout(policy), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(runner.run(env2, policy2, R"({"n": 1})"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(session.observation(), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(session.act("1"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK(!session.done());
  CHECK(runner.threads() == 0);
  // The moved-to objects work.
  CHECK(score_of(env2.rollout(policy2)) == 1.0);
  CHECK(runner2.run(env2, policy2, R"({"n": 2})").size() == 2);
  CHECK(!session2.observation().empty());
  // Default-constructed ones are empty too; assigning into a moved-from object works.
  nenyax::Env empty;
  CHECK(!empty);
  env = std::move(env2);
  CHECK(env && !env2);
  policy = nenyax::Policy();
  // NOLINTEND(bugprone-use-after-move)
  // Destroying everything (moved-from or not) at scope end must not crash or double free.
}

TEST(callbacks_are_freed_with_their_last_handle) {
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  {
    auto policy = nenyax::Policy::action([token](std::string_view obs) {
      return solve_observation(obs);
    });
    token.reset();
    CHECK(!watch.expired());  // the policy holds the std::function
    auto env = nenyax::Env::load(ARITH);
    CHECK(score_of(env.rollout(policy)) == 1.0);
  }
  CHECK(watch.expired());  // freed through free_user_data

  // A callback-defined env's reference policy keeps the callbacks alive after the env goes.
  auto token2 = std::make_shared<int>(0);
  std::weak_ptr<int> watch2 = token2;
  nenyax::Policy reference;
  {
    auto env = nenyax::Env::define_tasks(
        "echo", R"([{"prompt": "say hi"}])",
        [token2](std::string_view, std::string_view reply) { return reply == "hi" ? 1.0 : 0.0; },
        [](std::string_view) { return std::string("hi"); });
    reference = env.reference_policy();
    token2.reset();
  }
  CHECK(!watch2.expired());
  reference = nenyax::Policy();
  CHECK(watch2.expired());

  // A failing define_tasks (bad JSON) frees the C++ callbacks: no leak, no double delete.
  auto token3 = std::make_shared<int>(0);
  std::weak_ptr<int> watch3 = token3;
  CHECK_STATUS(nenyax::Env::define_tasks(
                   "bad", "[{", [token3](std::string_view, std::string_view) { return 1.0; }),
               NENYAX_STATUS_INVALID_ARGUMENT);
  token3.reset();
  CHECK(watch3.expired());

  // When the C call fails, the library frees user_data itself (exactly once).
  static int freed = 0;
  freed = 0;
  nenyax_policy_vtable_t bad{NENYAX_POLICY_VTABLE_VERSION + 1, nullptr, nullptr, nullptr, nullptr};
  nenyax_policy_t* out = nullptr;
  nenyax_error_t* e = nenyax_policy_new(&bad, &freed, [](void* p) { ++*static_cast<int*>(p); }, 0,
                                        &out);
  CHECK(nenyax_error_code(e) == NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK(out == nullptr);
  nenyax_error_free(e);
  CHECK(freed == 1);
}

TEST(define_tasks_with_cpp_scorer) {
  const char* tasks = R"([{"prompt": "2+2", "answer": "4"},
                          {"prompt": "3+3", "answer": "6"},
                          {"prompt": "boom", "answer": "x"}])";
  for (bool thread_safe : {false, true}) {
    std::atomic<int> scored{0};
    auto env = nenyax::Env::define_tasks(
        "sums", tasks,
        [&](std::string_view task, std::string_view reply) {
          ++scored;
          if (contains(task, "boom")) throw std::runtime_error("scorer exploded");
          return reply == string_field(task, "answer") ? 1.0 : 0.0;
        },
        [](std::string_view task) { return string_field(task, "answer"); }, thread_safe);
    nenyax::Runner runner(2);
    const auto trajs = runner.run(env, env.reference_policy(), R"({"n": 30})");
    CHECK(trajs.size() == 30);
    CHECK(scored == 30);
    for (std::size_t i = 0; i < trajs.size(); ++i) {
      if (i % 3 == 2) {
        CHECK_MSG(contains(string_field(trajs[i], "error"), "scorer exploded"), trajs[i]);
      } else {
        CHECK_MSG(score_of(trajs[i]) == 1.0, trajs[i]);
      }
    }
    // A throwing sink while callbacks are served on this thread: rethrown, no hang.
    std::size_t calls = 0;
    bool caught = false;
    try {
      runner.run(env, env.reference_policy(), R"({"n": 300})",
                 [&](std::size_t i, std::string_view) {
                   ++calls;
                   if (i == 1) throw SinkStop(i);
                 });
    } catch (const SinkStop&) {
      caught = true;
    }
    CHECK(caught && calls == 2);
    // check on an env with caller-served callbacks completes.
    const std::string report = env.check(R"({"samples": 3})");
    CHECK_MSG(contains(report, "\"tier\":"), report);
  }
}

TEST(define_stateful_counter) {
  // Count to the target: the state is the current count, the action the increment.
  nenyax::StateCallbacks cb;
  cb.reset = [](std::int64_t seed) { return "{\"count\":0,\"target\":" + std::to_string(3 + seed % 3) + "}"; };
  cb.observe = [](std::string_view state) { return std::string(state); };
  cb.step = [](std::string_view state, std::string_view action) {
    const long long c = static_cast<long long>(number_field(state, "count")) + std::stoll(std::string(action));
    const long long target = static_cast<long long>(number_field(state, "target"));
    nenyax::StepResult r;
    r.state = "{\"count\":" + std::to_string(c) + ",\"target\":" + std::to_string(target) + "}";
    r.done = c >= target;
    r.reward = r.done ? 1.0 : 0.0;
    return r;
  };
  auto env = nenyax::Env::define_stateful("counter", cb, 10);
  auto policy = nenyax::Policy::action([](std::string_view) { return std::string("1"); });
  nenyax::Runner runner(2);
  const auto trajs = runner.run(env, policy, R"({"n": 6, "seed": 0})");
  CHECK(trajs.size() == 6);
  for (const auto& t : trajs) {
    CHECK_MSG(!failed(t), t);
    CHECK_MSG(count(t, "\"terminated\":") >= 3, t);
  }
  // Sessions step it from C++ too.
  auto s = env.session(R"({"seed": 1})");
  int steps = 0;
  while (!s.done()) {
    s.act("1");
    ++steps;
  }
  CHECK(steps == 4);
  // An exception in step fails the episode with its message.
  nenyax::StateCallbacks bad = cb;
  bad.step = [](std::string_view, std::string_view) -> nenyax::StepResult {
    throw std::runtime_error("step exploded");
  };
  auto broken = nenyax::Env::define_stateful("broken", bad, 10);
  CHECK(contains(string_field(broken.rollout(policy), "error"), "step exploded"));
  nenyax::StateCallbacks missing;
  CHECK_STATUS(nenyax::Env::define_stateful("x", missing, 1), NENYAX_STATUS_INVALID_ARGUMENT);
}

TEST(endpoint_policy_failure_is_an_episode_error) {
  // Nothing listens on port 9 (discard) here; no retries, short timeout.
  auto policy = nenyax::Policy::endpoint(
      R"({"base_url": "http://127.0.0.1:9/v1", "model": "m", "retries": 0, "timeout_s": 5})");
  auto env = nenyax::Env::load(ARITH);
  const std::string t = env.rollout(policy);
  CHECK_MSG(failed(t), t);
}

TEST(concurrent_batches_share_an_env) {
  auto env = nenyax::Env::load("builtin:arithmetic?size=1000");
  auto policy = nenyax::Policy::action(solve_observation, true);
  std::atomic<int> solved{0};
  std::vector<std::thread> hosts;
  for (int h = 0; h < 3; ++h)
    hosts.emplace_back([&, h] {
      nenyax::Runner runner(1);
      for (const auto& t : runner.run(env, policy, "{\"n\": 100, \"seed\": " + std::to_string(h * 100) + "}"))
        solved += score_of(t) == 1.0;
    });
  for (auto& t : hosts) t.join();
  CHECK(solved == 300);
}

// ---------------------------------------------------------------------------------------------
// regressions of library bugs found while writing these bindings (fixed)

namespace {
int32_t c_act(void*, const char* obs, size_t len, nenyax_reply_t* reply) {
  const std::string a = solve_observation(std::string_view(obs, len));
  nenyax_reply_set(reply, a.data(), a.size());
  return 0;
}
int32_t c_stop_at_first(void*, size_t, const char*, size_t) { return 1; }
}  // namespace

// Regression (fixed in be0c338): nenyax_runner_run never returned when a sink stopped the batch
// while a non-thread-safe callback was in use: the calling thread left its serving loop while
// workers still routed callbacks to it. Raw C API, so no wrapper logic can hide it.
TEST(sink_stop_with_caller_served_policy_returns) {
  auto env = nenyax::Env::load("builtin:arithmetic?size=1000");
  nenyax_policy_vtable_t vt{NENYAX_VTABLE_VERSION, c_act, nullptr, nullptr, nullptr};
  nenyax_policy_t* policy = nullptr;
  nenyax::detail::check(nenyax_policy_new(&vt, nullptr, nullptr, 0, &policy));
  nenyax_runner_t* runner = nullptr;
  nenyax::detail::check(nenyax_runner_new(2, &runner));
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  nenyax_status_t status = NENYAX_STATUS_OK;
  std::thread t([&] {
    const char* opts = R"({"n": 1000})";
    nenyax_error_t* e = nenyax_runner_run(runner, env.get(), policy, opts, std::strlen(opts),
                                          c_stop_at_first, nullptr, nullptr);
    std::lock_guard<std::mutex> lock(m);
    status = nenyax_error_code(e);
    nenyax_error_free(e);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(m);
  const bool returned = cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; });
  if (!returned) {
    std::fprintf(stderr, "nenyax_runner_run did not return within 10 s (deadlock)\n");
    std::fflush(stderr);
    std::_Exit(1);  // the thread is stuck inside the library; cannot join it
  }
  lock.unlock();
  t.join();
  nenyax_runner_free(runner);
  nenyax_policy_free(policy);
  CHECK(status == NENYAX_STATUS_CALLBACK);
}

// Regression (fixed in be0c338): after a sink stopped a batch, workers still ran a whole window
// (64) of further episodes from the tokens already buffered. Every call sleeps 1 ms, so what runs
// after the stop is what was in flight: a few episodes (the calling thread's select! may serve
// some routed callbacks before it takes job 0's trajectory), far from a window.
TEST(sink_stop_stops_running_episodes_promptly) {
  auto env = nenyax::Env::load("builtin:arithmetic?size=1000");
  for (bool thread_safe : {true, false}) {
    std::atomic<int> calls{0};
    auto policy = nenyax::Policy::action(
        [&](std::string_view obs) {
          ++calls;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          return solve_observation(obs);
        },
        thread_safe);
    nenyax::Runner runner(2);
    bool caught = false;
    try {
      runner.run(env, policy, R"({"n": 1000})",
                 [](std::size_t, std::string_view) { throw SinkStop(0); });
    } catch (const SinkStop&) {
      caught = true;
    }
    CHECK(caught);
    CHECK_MSG(calls <= 16, calls << " policy calls for a batch stopped at job 0 (thread_safe="
                                << thread_safe << ")");
  }
}

// Regression (fixed in e02191d): builtin:arithmetic reused the caller's TaskRef as the episode's
// task, so a task given by id alone ({"task": {"id": "42"}}) gave a trajectory whose task had no
// prompt and no metadata, and a re-judged env (exact: compares with metadata.answer) failed the
// correct episode.
TEST(task_by_id_keeps_prompt_and_metadata) {
  auto env = nenyax::Env::load(ARITH);
  auto judged = env.with_judge(R"({"type": "exact"})");
  auto oracle = judged.reference_policy();
  const std::string by_default = judged.rollout(oracle, R"({"seed": 42})");
  CHECK_MSG(score_of(by_default) == 1.0, by_default);
  const std::string by_id = judged.rollout(oracle, R"({"task": {"id": "42"}})");
  CHECK_MSG(contains(by_id, "\"answer\":\"5642\""), "the trajectory's task has no metadata: " << by_id.substr(0, 300));
  CHECK_MSG(score_of(by_id) == 1.0, string_field(by_id, "error"));
}

// ---------------------------------------------------------------------------------------------
// regressions of library bugs found while writing this binding

// Options are JSON objects; serde would also read an array positionally ("[3, 7]" as n = 3,
// seed = 7), so arrays must be refused rather than silently run.
TEST(options_must_be_json_objects) {
  auto env = nenyax::Env::load(ARITH);
  nenyax::Runner runner(1);
  CHECK_STATUS(runner.run(env, env.reference_policy(), "[3, 7]"), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(env.session("[]"), NENYAX_STATUS_INVALID_ARGUMENT);
}

// The calling thread must block, not spin, while a batch runs with nothing routed to it (the
// env's own policies, NENYAX_THREAD_SAFE callbacks, endpoints): a disconnected callback queue
// once made its wait loop busy, burning a core for the whole batch.
TEST(runner_run_does_not_spin_without_caller_callbacks) {
  auto env = nenyax::Env::load(ARITH);
  nenyax::Runner runner(1);
  // Process CPU time / wall time of a batch whose every policy call sleeps 2 ms.
  auto cpu_share = [&](bool thread_safe) {
    auto sleepy = nenyax::Policy::action(
        [](std::string_view obs) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          return solve_observation(obs);
        },
        thread_safe);
    const std::clock_t c0 = std::clock();
    const auto w0 = std::chrono::steady_clock::now();
    CHECK(runner.run(env, sleepy, R"({"n": 100})").size() == 100);
    const double cpu_s = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    std::printf("      thread_safe=%d: process CPU %.3f s over %.3f s wall\n", thread_safe, cpu_s,
                wall_s);
    return cpu_s / wall_s;
  };
  // Control: callbacks served on the calling thread keep the process nearly idle.
  CHECK(cpu_share(false) < 0.25);
  // With nothing routed to it, the calling thread must wait quietly too.
  CHECK(cpu_share(true) < 0.25);
}

// ---------------------------------------------------------------------------------------------
// the areas added with the whole-header wrapper: learners, sandboxes, recordings, servers

namespace {

// One HTTP/1.1 request to `url` + `path` ("http://127.0.0.1:PORT/prefix") with plain sockets;
// the whole response (status line, headers, body).
std::string http(const std::string& url, const std::string& method, const std::string& path,
                 const std::string& body = {}) {
  char host[64] = {0};
  char prefix[256] = {0};
  int port = 0;
  if (std::sscanf(url.c_str(), "http://%63[^:]:%d%255s", host, &port, prefix) < 2)
    throw std::runtime_error("not an http URL: " + url);
  const std::string req = method + " " + prefix + path + " HTTP/1.1\r\nHost: " + host +
                          "\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host, &addr.sin_addr);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot reach " + url);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

bool near(double a, double b, double tol = 1e-9) { return std::fabs(a - b) <= tol; }

}  // namespace

TEST(error_helper_is_public) {
  // nenyax::check is the helper the wrapper uses, for direct calls of the C API.
  nenyax_env_t* raw = nullptr;
  bool thrown = false;
  try {
    nenyax::check(nenyax_env_load("nope:x", 6, &raw));
  } catch (const nenyax::Error& e) {
    thrown = true;
    CHECK(e.code() == NENYAX_STATUS_UNKNOWN_SCHEME && e.code() == e.status());
    CHECK(std::strlen(e.what()) > 0);
  }
  CHECK(thrown && raw == nullptr);
  nenyax::check(nullptr);  // success: no throw
  // The RAII template owns any handle type.
  nenyax::check(nenyax_env_load(ARITH, std::strlen(ARITH), &raw));
  nenyax::Handle<nenyax_env_t, nenyax_env_free> h(raw);
  auto moved = std::move(h);
  CHECK(!h && moved && moved.get() == raw);  // NOLINT(bugprone-use-after-move)
}

TEST(learners_advantages_and_dapo_keep) {
  // RLOO, hand-checked: each reward minus the mean of the others in its group.
  const std::vector<double> rewards{1, 0, 1, 1};
  const std::vector<std::int64_t> groups{0, 0, 1, 1};
  const auto adv = nenyax::advantages(rewards, groups, R"({"estimator": "rloo"})");
  CHECK(adv.size() == 4 && near(adv[0], 1) && near(adv[1], -1) && near(adv[2], 0) &&
        near(adv[3], 0));
  const auto keep = nenyax::dapo_keep(rewards, groups);
  CHECK((keep == std::vector<std::uint8_t>{1, 1, 0, 0}));
  CHECK_STATUS(nenyax::advantages(rewards, std::vector<std::int64_t>{0}),
               NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(nenyax::advantages(rewards, groups, R"({"estimator": "nope"})"),
               NENYAX_STATUS_CONFIG);
  CHECK(contains(nenyax::learner_json(R"({"learner": "dapo"})"), "\"clip_high\""));
}

TEST(export_rows_from_jsonl) {
  // Two attempts at one task scoring 1 and 0: one DPO pair; the JSONL file read back.
  const std::string runs =
      R"({"env_id":"e","mode":"step","task":{"id":"t"},"messages":[{"role":"user","content":"q"},)"
      R"({"role":"assistant","content":"a"}],"judgment":{"score":1.0}})"
      "\n"
      R"({"env_id":"e","mode":"step","task":{"id":"t"},"messages":[{"role":"user","content":"q"},)"
      R"({"role":"assistant","content":"b"}],"judgment":{"score":0.0}})"
      "\n";
  const std::string out = "/tmp/nenyax-cpp-export-" + std::to_string(::getpid()) + ".jsonl";
  const auto summary =
      nenyax::export_jsonl(runs, R"({"rows": "dpo", "out": ")" + out + R"("})");
  CHECK(contains(summary, "\"rows\":1") && contains(summary, "\"trajectories\":2"));
  std::ifstream f(out);
  const std::string line((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(contains(line, R"("chosen":[{"content":"a","role":"assistant"}])"));
  CHECK(contains(line, R"("rejected":[{"content":"b","role":"assistant"}])"));
  std::remove(out.c_str());
  CHECK_STATUS(nenyax::export_file(R"({"input": "/nonexistent.jsonl"})"), NENYAX_STATUS_IO);
  CHECK_STATUS(nenyax::export_jsonl(runs, R"({"rows": "ppo", "out": "x"})"), NENYAX_STATUS_CONFIG);
}

TEST(learners_pg_loss_f64_f32) {
  // Two rows of two tokens, the second token of row 1 masked; ratio 1 (logp == old_logp), so
  // nothing is clipped and the policy term is -mean(A) under every aggregation.
  const std::vector<double> logp{-1.0, -2.0, -0.5, -9.0};
  const std::vector<std::uint8_t> mask{1, 1, 1, 0};
  const std::vector<double> adv{1.0, 1.0};
  nenyax::PgInputs<double> in{logp, logp, {}, {}, mask, adv, 2, 2};
  const auto r = nenyax::pg_loss(in, R"({"learner": "dapo"})");
  CHECK(near(r.stats.tokens, 3) && near(r.stats.rows, 2) && near(r.stats.mean_ratio, 1));
  CHECK(near(r.stats.clip_fraction, 0) && near(r.stats.loss_pg, -1.0));
  CHECK(r.grad_logp.size() == 4 && r.grad_logp[0] < 0 && r.grad_logp[3] == 0.0);
  CHECK(r.grad_entropy.empty());

  const std::vector<float> logp32(logp.begin(), logp.end());
  const std::vector<float> adv32(adv.begin(), adv.end());
  nenyax::PgInputs<float> in32{logp32, logp32, {}, {}, mask, adv32, 2, 2};
  std::vector<float> grad(4);
  const nenyax::PgStats s32 = nenyax::pg_loss<float>(in32, R"({"learner": "dapo"})", grad);
  CHECK(near(s32.loss, r.stats.loss, 1e-6));
  for (std::size_t i = 0; i < 4; ++i) CHECK(near(grad[i], r.grad_logp[i], 1e-6));

  // Wrong lengths are caught before the C call.
  nenyax::PgInputs<double> bad = in;
  bad.mask = nenyax::View<const std::uint8_t>(mask.data(), 3);
  CHECK_STATUS(nenyax::pg_loss(bad, R"({"learner": "dapo"})"), NENYAX_STATUS_INVALID_ARGUMENT);
  // Without a GPU the CUDA entry points say so with their own status.
  try {
    (void)nenyax::cuda_device();
    CHECK(near(nenyax::pg_loss_cuda_host(in32, R"({"learner": "dapo"})", grad).loss,
               r.stats.loss, 1e-5));
  } catch (const nenyax::Error& e) {
    CHECK_MSG(e.code() == NENYAX_STATUS_CUDA_UNAVAILABLE, e.what());
    CHECK_STATUS(nenyax::pg_loss_cuda_host(in32, R"({"learner": "dapo"})", grad),
                 NENYAX_STATUS_CUDA_UNAVAILABLE);
  }
}

TEST(learners_pg_loss_batch) {
#ifdef NENYAX_PG_BATCH_VERSION
  // The batch entry point gives what the per-case functions give, in both precisions.
  const std::vector<double> logp{-1.0, -2.0, -0.5, -9.0}, old{-1.1, -1.9, -0.5, -9.0};
  const std::vector<std::uint8_t> mask{1, 1, 1, 0};
  const std::vector<double> adv{1.0, -0.5};
  nenyax::PgInputs<double> in{logp, old, {}, {}, mask, adv, 2, 2};
  const auto want = nenyax::pg_loss(in, R"({"learner": "dapo"})");
  std::vector<double> grad(4);
  const auto stats = nenyax::pg_loss_batch(nenyax::pg_batch<double>(in, grad), R"({"learner": "dapo"})");
  CHECK(near(stats.loss, want.stats.loss) && near(stats.clip_fraction, want.stats.clip_fraction));
  for (std::size_t i = 0; i < 4; ++i) CHECK(near(grad[i], want.grad_logp[i]));
  const std::vector<float> logp32(logp.begin(), logp.end()), old32(old.begin(), old.end());
  const std::vector<float> adv32(adv.begin(), adv.end());
  nenyax::PgInputs<float> in32{logp32, old32, {}, {}, mask, adv32, 2, 2};
  std::vector<float> grad32(4);
  const auto s32 = nenyax::pg_loss_batch(nenyax::pg_batch<float>(in32, grad32), R"({"learner": "dapo"})");
  CHECK(near(s32.loss, want.stats.loss, 1e-5));
  auto bad = nenyax::pg_batch<double>(in, grad);
  bad.version = 99;
  CHECK_STATUS(nenyax::pg_loss_batch(bad, "{}"), NENYAX_STATUS_INVALID_ARGUMENT);
#else
  std::printf("      (this nenyax.h has no nenyax_pg_batch_t)\n");
#endif
}

TEST(learners_reinforce_pp_and_dpo) {
  // One row, gamma 1: the return of every valid token is the row's reward.
  const std::vector<double> rewards{2.0, 0.0};
  const std::vector<std::uint8_t> mask{1, 1, 1, 0};
  std::vector<double> adv(4), ret(4);
  nenyax::reinforce_pp(rewards, {}, mask, 2, 2, 1.0, adv, ret);
  CHECK(near(ret[0], 2) && near(ret[1], 2) && near(ret[2], 0) && ret[3] == 0.0);
  CHECK(adv[0] > 0 && adv[2] < 0);

  // DPO on one pair with logp == ref_logp: loss log(2), gradient -beta/2 on the chosen row.
  const std::vector<std::int64_t> groups{0, 0};
  const std::vector<double> logp{-1, -1, -1, -1};
  std::vector<double> grad(4);
  const auto d = nenyax::dpo_loss(rewards, groups, logp, logp, mask, 2, 2, 0.1, grad);
  CHECK(d.pairs == 1 && near(d.loss, std::log(2.0)));
  CHECK(near(grad[0], -0.05) && near(grad[2], 0.05) && grad[3] == 0.0);
}

TEST(sandbox_exec_put_get_fork) {
  nenyax::Sandbox sb(R"({"backend": "process"})");
  const std::string r = sb.exec(R"({"argv": ["echo", "hi"]})");
  CHECK_MSG(string_field(r, "stdout") == "hi\\n" || contains(r, "\"stdout\":\"hi\\n\""), r);
  CHECK(number_field(r, "exit_code") == 0.0);
  sb.put("dir/a.txt", "hello");
  CHECK(sb.get("dir/a.txt") == "hello");
  CHECK(contains(sb.list("dir"), "\"name\":\"a.txt\""));
  auto copy = sb.fork();
  CHECK(copy.get("dir/a.txt") == "hello");
  CHECK_STATUS(sb.exec(R"({"argv": []})"), NENYAX_STATUS_ENVIRONMENT);
  nenyax::Sandbox moved = std::move(sb);
  CHECK_STATUS(sb.get("dir/a.txt"), NENYAX_STATUS_INVALID_ARGUMENT);  // NOLINT
}

TEST(recording_round_trip) {
  auto model = nenyax::Policy::chat([](std::string_view) { return std::string("pong"); }, true);
  nenyax::Recording rec(model);
  const std::string url = rec.base_url();
  CHECK_MSG(url.rfind("http://127.0.0.1:", 0) == 0 && contains(url, "/r/"), url);
  const std::string resp = http(url, "POST", "/chat/completions",
                                R"({"model":"m","messages":[{"role":"user","content":"ping"}]})");
  CHECK_MSG(contains(resp, "200 OK") && contains(resp, "\"content\":\"pong\""), resp);
  CHECK(count(rec.calls(true), "\"request\":") == 1);
  CHECK(count(rec.calls(), "\"request\":") == 0);  // drained
}

TEST(server_start_url_health_stop) {
  auto env = nenyax::Env::load(ARITH);
  auto server = nenyax::Server::start(env, R"({"port": 0})");
  const std::string url = server.url();
  CHECK_MSG(url.rfind("http://127.0.0.1:", 0) == 0, url);
  const std::string resp = http(url, "GET", "/health");
  CHECK_MSG(contains(resp, " 200 "), resp);
  server.stop();
  CHECK(!server);
  bool refused = false;
  try {
    http(url, "GET", "/health");
  } catch (const std::runtime_error&) {
    refused = true;
  }
  CHECK(refused);
}

// ---------------------------------------------------------------------------------------------

int main(int argc, char** argv) { return run_tests(argc, argv); }
