// example_trainer: the shape of a C++ training loop over Nenyax.
//
// Loads builtin:arithmetic, rolls out a batch of 64 episodes in parallel with a C++ lambda
// policy that solves the arithmetic from the observation JSON, prints each score and the mean,
// then runs the conformance check and prints the tier.
//
// JSON stays text in the wrapper; a real program would parse it with its JSON library of choice
// (nlohmann/json, simdjson, ...). This example picks out the two fields it needs by hand to stay
// dependency-free.

#include <nenyax.hpp>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

namespace {

// The string value of the first "key":"..." in `json` (enough for this example).
std::string string_field(std::string_view json, std::string_view key) {
  const std::string pat = "\"" + std::string(key) + "\":\"";
  const auto pos = json.find(pat);
  if (pos == std::string_view::npos) return {};
  const auto end = json.find('"', pos + pat.size());
  return std::string(json.substr(pos + pat.size(), end - pos - pat.size()));
}

// The number after the first "key": in `json`.
double number_field(std::string_view json, std::string_view key) {
  const std::string pat = "\"" + std::string(key) + "\":";
  const auto pos = json.find(pat);
  if (pos == std::string_view::npos) return 0.0;
  return std::strtod(std::string(json.substr(pos + pat.size(), 32)).c_str(), nullptr);
}

}  // namespace

int main() {
  try {
    std::printf("nenyax %s (protocol %s)\n", std::string(nenyax::version()).c_str(),
                std::string(nenyax::protocol_version()).c_str());
    const char* uri = "builtin:arithmetic?size=1000";
    auto env = nenyax::Env::load(uri);
    std::printf("loaded %s: %s\n", uri, string_field(env.manifest(), "description").c_str());

    // The policy: observation JSON -> action JSON. The observation's data carries the
    // expression ("46 + 12"); the action is the reply text, as a JSON string. It is a pure
    // function, so it may run on the runner's worker threads in parallel (thread_safe = true).
    auto policy = nenyax::Policy::action(
        [](std::string_view observation_json) {
          std::istringstream in(string_field(observation_json, "expression"));
          long long a = 0, b = 0;
          char op = 0;
          if (!(in >> a >> op >> b)) throw std::runtime_error("no expression in the observation");
          const long long r = op == '+' ? a + b : op == '-' ? a - b : a * b;
          return "\"<answer>" + std::to_string(r) + "</answer>\"";
        },
        /*thread_safe=*/true);

    nenyax::Runner runner;  // one worker per core
    double total = 0.0;
    std::size_t n = 0, failed = 0;
    runner.run(env, policy, R"({"n": 64, "seed": 0})",
               [&](std::size_t i, std::string_view trajectory) {
                 // "judgment":{"score":...}: the first "score" of a trajectory.
                 const double score = number_field(trajectory, "score");
                 const std::string error = string_field(trajectory, "error");
                 if (!error.empty()) ++failed;
                 std::printf("episode %2zu  task %-4s  score %.1f%s%s\n", i,
                             string_field(trajectory, "task_id").c_str(), score,
                             error.empty() ? "" : "  error: ", error.c_str());
                 total += score;
                 ++n;
               });
    std::printf("mean score over %zu episodes: %.3f (%zu failed)\n", n, total / n, failed);

    // Conformance: the tiers are connectable < evaluable < trainable < audited.
    const std::string report = env.check(R"({"samples": 8})");
    const std::string tier = string_field(report, "tier");
    std::printf("conformance tier: %s\n", tier.c_str());
    return n == 64 && failed == 0 && total == 64.0 && tier == "audited" ? 0 : 1;
  } catch (const nenyax::Error& e) {
    std::fprintf(stderr, "nenyax error %s: %s\n", nenyax::status_name(e.status()), e.what());
    return 1;
  }
}
