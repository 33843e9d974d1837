// Tests of the C++ training wrapper (bindings/cpp/include/nenyax_train.hpp): per-episode
// policies, a C++ Trainer and HostLearner driven by nenyax::train, and its errors.
//
//   test_nenyax_train [NAME...] | --list

#include <nenyax.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "harness.hpp"

namespace {

const char* const GUESS = "builtin:guess?high=16&max_guesses=4&size=64";

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Guess uniformly within the observation's bounds, from the episode's sample seed; record the
// prompt (100 + low, 200 + high) and the guess (guess - 1) with its log-prob.
std::string guess(const nenyax::Episode& ep, std::string_view obs, nenyax::Record& rec) {
  const long low = static_cast<long>(number_field(obs, "low"));
  const long high = static_cast<long>(number_field(obs, "high"));
  if (low < 1 || high < low) throw std::runtime_error("no bounds in the observation");
  const long n = high - low + 1;
  const long g = low + static_cast<long>(mix(ep.sample_seed) % static_cast<std::uint64_t>(n));
  rec.prompt_token_ids = {100 + low, 200 + high};
  rec.completion_token_ids = {g - 1};
  rec.completion_logprobs = {-std::log(static_cast<double>(n))};
  return std::to_string(g);
}

// The uniform-in-bounds policy's exact log-probs; counts what it is asked.
class UniformTrainer : public nenyax::Trainer {
 public:
  int logprobs_calls = 0, reference_calls = 0, applies = 0, snapshots = 0, restores = 0;
  int bad = 0;
  int throw_after_applies = -1;

  void logprobs(const nenyax::TraceBatch& b, bool reference, double* out) override {
    ++logprobs_calls;
    reference_calls += reference;
    if (throw_after_applies >= 0 && applies >= throw_after_applies)
      throw std::runtime_error("simulated CUDA out of memory");
    for (std::size_t r = 0; r < b.rows(); ++r) {
      for (std::size_t t = 0; t < b.width(); ++t) {
        if (!b.sampled(r, t)) continue;
        const std::size_t c = b.context_start(r, t);
        const long low = static_cast<long>(b.token(r, c)) - 100;
        const long high = static_cast<long>(b.token(r, c + 1)) - 200;
        if (c + 2 != t || low < 1 || high < low) ++bad;
        out[b.at(r, t)] = -std::log(static_cast<double>(high - low + 1));
        if (std::fabs(out[b.at(r, t)] - b.sampled_logp(r, t)) > 1e-12) ++bad;
      }
    }
    // The policy records its prompt tokens, so the observation is not repeated in rows_json.
    if (contains(b.rows_json(), "\"observation\":")) ++bad;
  }
  void apply(const nenyax::TraceBatch& b, const double* grad) override {
    ++applies;
    for (std::size_t k = 0; k < b.rows() * b.width(); ++k)
      if (!std::isfinite(grad[k]) || (!b.raw().mask[k] && grad[k] != 0.0)) ++bad;
  }
  bool can_snapshot() const override { return true; }
  void snapshot() override { ++snapshots; }
  void restore() override { ++restores; }
};

}  // namespace

TEST(episode_policy_sees_its_episode_and_records) {
  auto env = nenyax::Env::load(GUESS);
  std::mutex m;
  nenyax::Episode seen;
  std::string task;
  auto policy = nenyax::episode_action_policy(
      [&](const nenyax::Episode& ep, std::string_view obs, nenyax::Record& rec) {
        std::lock_guard<std::mutex> lock(m);
        seen = ep;
        task = std::string(ep.task_id);
        return guess(ep, obs, rec);
      });
  const std::string t = env.rollout(
      policy, R"({"task":{"id":"7"},"seed":5,"context":{"phase":"eval","round":3,"member":2}})");
  CHECK(!failed(t));
  CHECK(seen.phase == nenyax::Episode::Phase::eval && seen.round == 3 && seen.member == 2);
  CHECK(seen.seed && *seen.seed == 5 && task == "7");
  CHECK(contains(t, "\"prompt_token_ids\":[101,216]"));
  // The same episode twice: the same draws (steps and calls; timings differ).
  auto draws = [](const std::string& t) {
    const auto from = t.find("\"steps\":");
    return t.substr(from, t.find("\"judgment\":") - from);
  };
  const std::string a = env.rollout(policy, R"({"seed":9})");
  const std::string b = env.rollout(policy, R"({"seed":9})");
  const std::string c = env.rollout(policy, R"({"seed":10})");
  CHECK(draws(a) == draws(b) && draws(a) != draws(c));
}

TEST(train_with_a_cpp_trainer) {
  auto env = nenyax::Env::load(GUESS);
  std::atomic<int> off_thread{0};
  const auto home = std::this_thread::get_id();
  auto policy = nenyax::episode_action_policy(
      [&](const nenyax::Episode& ep, std::string_view obs, nenyax::Record& rec) {
        off_thread += std::this_thread::get_id() != home;
        return guess(ep, obs, rec);
      });
  auto trainer = std::make_shared<UniformTrainer>();
  auto learner = nenyax::Learner::create("grpo", &env, &policy, trainer);
  const std::string report = nenyax::train(
      env, learner, R"({"rounds":2,"group_size":4,"batch":3,"eval_tasks":4,"concurrency":2})");
  CHECK_MSG(count(report, "\"outcome\":\"failed\"") == 0, report);
  CHECK(trainer->applies == 2 && trainer->reference_calls == 2 && trainer->bad == 0);
  CHECK(trainer->snapshots == 2);
  CHECK(off_thread == 0);  // not thread-safe: the calling thread only
  CHECK(contains(report, "\"text\":\"train builtin:guess"));
}

TEST(trainer_exception_fails_its_round) {
  auto env = nenyax::Env::load(GUESS);
  auto policy = nenyax::episode_action_policy(guess, true);
  auto trainer = std::make_shared<UniformTrainer>();
  trainer->throw_after_applies = 2;  // round 1 applies twice (2 epochs), round 2 throws
  auto learner = nenyax::Learner::create(R"({"use":"grpo","epochs":2})", &env, &policy, trainer);
  const std::string report = nenyax::train(
      env, learner, R"({"rounds":2,"group_size":4,"batch":3,"eval_tasks":4})");
  CHECK_MSG(contains(report, "\"outcome\":\"kept\",\"round\":1,"), report);
  CHECK(contains(report, "\"outcome\":\"failed\",\"round\":2,"));
  CHECK(contains(report, "TrainingError: ") && contains(report, "simulated CUDA out of memory"));
  CHECK(trainer->restores >= 1);
}

TEST(host_learner_gets_groups_and_reports_metrics) {
  struct Recorder : nenyax::HostLearner {
    int updates = 0, snapshots = 0;
    std::size_t trajectories = 0;
    std::string update(std::string_view groups) override {
      ++updates;
      trajectories += count(groups, "\"env_id\":");
      return R"({"metrics":{"seen":)" + std::to_string(count(groups, "\"env_id\":")) + "}}";
    }
    bool can_snapshot() const override { return true; }
    void snapshot() override { ++snapshots; }
  };
  auto env = nenyax::Env::load(GUESS);
  auto policy = env.reference_policy();
  auto recorder = std::make_shared<Recorder>();
  auto learner = nenyax::Learner::custom("recorder", recorder, policy);
  const std::string report =
      nenyax::train(env, learner, R"({"rounds":2,"group_size":2,"batch":3,"eval_tasks":4})");
  CHECK(recorder->updates == 2 && recorder->trajectories == 12 && recorder->snapshots == 2);
  CHECK_MSG(contains(report, "\"seen\":6.0"), report);
}

TEST(builtin_learner_and_training_errors) {
  auto env = nenyax::Env::load(GUESS);
  auto learner = nenyax::Learner::create("reinforce", &env);
  const std::string report =
      nenyax::train(env, learner, R"({"rounds":1,"group_size":2,"batch":2,"eval_tasks":2})");
  CHECK(contains(report, "softmax-linear") && !contains(report, "\"outcome\":\"failed\""));
  CHECK_STATUS(nenyax::Learner::create("grpoo", &env), NENYAX_STATUS_CONFIG);
  CHECK_STATUS(nenyax::train(env, learner, R"({"group_size":0})"), NENYAX_STATUS_CONFIG);
  nenyax::Learner empty;
  CHECK_STATUS(nenyax::train(env, empty), NENYAX_STATUS_INVALID_ARGUMENT);
  auto policy = nenyax::episode_action_policy(guess);
  CHECK_STATUS(nenyax::Learner::create("grpo", &env, &policy), NENYAX_STATUS_INVALID_ARGUMENT);
  nenyax::Record bad;
  bad.completion_token_ids = {1};
  bad.completion_logprobs = {std::nan("")};
  CHECK_STATUS(bad.to_json(), NENYAX_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(nenyax::episode_action_policy(nullptr), NENYAX_STATUS_INVALID_ARGUMENT);
}

TEST(episode_chat_policy_records_tokens) {
  auto env = nenyax::Env::load(GUESS);
  auto policy = nenyax::episode_chat_policy(
      [](const nenyax::Episode& ep, std::string_view messages, nenyax::Record& rec) {
        rec.prompt_token_ids = {static_cast<std::int64_t>(count(messages, "\"role\":"))};
        rec.completion_token_ids = {static_cast<std::int64_t>(ep.step)};
        return std::to_string(1 + ep.sample_seed % 16);
      });
  const std::string t = env.rollout(policy, R"({"seed":4})");
  CHECK_MSG(!failed(t), t);
  CHECK(contains(t, "\"completion_token_ids\":[0]"));
  CHECK(contains(t, "\"prompt_token_ids\":[1]"));
}

TEST(config_load_reads_checks_and_overrides) {
  const std::string path = "/tmp/nenyax-cpp-config-" + std::to_string(::getpid()) + ".toml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    CHECK(f != nullptr);
    std::fputs("[env]\nuri = \"builtin:guess\"\n[learner]\nuse = \"grpo\"\nclip_hi = 0.3\n", f);
    std::fclose(f);
  }
  // A typo names the file, its line and the knob it meant.
  CHECK_STATUS(nenyax::config_load(path), NENYAX_STATUS_CONFIG);
  try {
    nenyax::config_load(path);
  } catch (const nenyax::Error& e) {
    CHECK_MSG(std::string(e.what()).find(":5:") != std::string::npos, e.what());
    CHECK_MSG(std::string(e.what()).find("clip_high") != std::string::npos, e.what());
  }
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    CHECK(f != nullptr);
    std::fputs("[env]\nuri = \"builtin:guess\"\n[learner]\nuse = \"grpo\"\n", f);
    std::fclose(f);
  }
  const std::string run = nenyax::config_load(path, R"({"train.rounds": 3})");
  CHECK_MSG(contains(run, "\"uri\":\"builtin:guess\"") && contains(run, "\"use\":\"grpo\""), run);
  CHECK_MSG(contains(run, "\"rounds\":3"), run);
  std::remove(path.c_str());
}

int main(int argc, char** argv) { return run_tests(argc, argv); }
