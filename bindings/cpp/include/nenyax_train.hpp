// nenyax_train.hpp: training with Nenyax from C++ (included by nenyax.hpp; include either).
// Apache-2.0.
//
//     // A policy that knows its episode (seed its sampling with episode.sample_seed) and records
//     // what it sampled, so the library can trace it for training.
//     auto policy = nenyax::episode_action_policy(
//         [&](const nenyax::Episode& ep, std::string_view obs, nenyax::Record& rec) {
//           ...; rec.completion_token_ids = {choice}; rec.completion_logprobs = {logp};
//           return std::to_string(choice + 1);   // the action, as JSON
//         }, /*thread_safe=*/true);
//     auto trainer = std::make_shared<MyTrainer>();   // a nenyax::Trainer: logprobs + apply
//     auto learner = nenyax::Learner::create("grpo", &env, &policy, trainer);
//     std::string report = nenyax::train(env, learner, R"({"rounds": 20})");
//
// Threads: Trainer and HostLearner methods run on the thread that called train(), one at a
// time, between rollouts (never while a rollout of the same run is in flight). Per-episode
// policies follow the rules of nenyax.hpp (thread_safe = false: the calling thread only).
// Exceptions thrown by any of them never cross into C: a policy's fails its episode, a
// trainer's or learner's fails its round (NENYAX_STATUS_TRAINING in the report), with what().

#ifndef NENYAX_TRAIN_HPP
#define NENYAX_TRAIN_HPP

#include "nenyax.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nenyax {

// Which episode and call a per-episode policy serves (a copy of nenyax_episode_t; task_id is
// valid only during the call).
struct Episode {
  enum class Phase : std::uint32_t {
    run = NENYAX_PHASE_RUN,      // a plain batch, check or rollout
    train = NENYAX_PHASE_TRAIN,  // a training rollout
    eval = NENYAX_PHASE_EVAL,    // a held-out evaluation
  };
  Phase phase = Phase::run;
  std::uint32_t round = 0, group = 0, member = 0;
  std::uint64_t step = 0;               // this call's index within the episode
  std::optional<std::int64_t> seed;     // the environment seed
  std::string_view task_id;             // empty when the episode plays no listed task
  std::uint64_t sample_seed = 0;        // seed for this call's sampling: fixed per episode and step
};

// What a per-episode policy sampled in one call: its prompt token ids (optional for action
// policies; required for chat calls to be trained on), the sampled token ids and, optionally,
// their log-probabilities (one each). Leave completion_token_ids empty to record nothing.
struct Record {
  std::vector<std::int64_t> prompt_token_ids;
  std::vector<std::int64_t> completion_token_ids;
  std::vector<double> completion_logprobs;

  bool empty() const noexcept { return completion_token_ids.empty(); }

  // The record as the library reads it; throws nenyax::Error for a non-finite log-prob (JSON
  // has no NaN) or a log-prob count that does not match the tokens.
  std::string to_json() const {
    if (!completion_logprobs.empty() && completion_logprobs.size() != completion_token_ids.size())
      throw Error(NENYAX_STATUS_INVALID_ARGUMENT,
                  "Record: completion_logprobs must be empty or one per completion token");
    std::string s;
    auto ints = [&s](const char* key, const std::vector<std::int64_t>& v) {
      s += '"';
      s += key;
      s += "\":[";
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(v[i]);
      }
      s += ']';
    };
    s += '{';
    if (!prompt_token_ids.empty()) {
      ints("prompt_token_ids", prompt_token_ids);
      s += ',';
    }
    ints("completion_token_ids", completion_token_ids);
    if (!completion_logprobs.empty()) {
      s += ",\"completion_logprobs\":[";
      for (std::size_t i = 0; i < completion_logprobs.size(); ++i) {
        const double x = completion_logprobs[i];
        if (!std::isfinite(x))
          throw Error(NENYAX_STATUS_INVALID_ARGUMENT, "Record: a completion log-prob is not finite");
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.17g", i ? "," : "", x);
        s += buf;
      }
      s += ']';
    }
    s += '}';
    return s;
  }
};

// Observation (JSON) -> action (JSON), told its episode, filling `record` with what it sampled.
using EpisodeActionFn =
    std::function<std::string(const Episode& episode, std::string_view observation_json,
                              Record& record)>;
// Conversation (JSON messages) -> reply text, told its episode, filling `record`.
using EpisodeChatFn = std::function<std::string(const Episode& episode,
                                                std::string_view messages_json, Record& record)>;

// Traced sequences a Trainer scores and learns from: rows x width positions, row-major (a view
// of nenyax_trace_batch_t, valid only during the callback).
class TraceBatch {
 public:
  explicit TraceBatch(const nenyax_trace_batch_t& b) noexcept : b_(b) {}

  std::size_t rows() const noexcept { return b_.rows; }
  std::size_t width() const noexcept { return b_.width; }
  // Index of (row, position) in the row-major arrays.
  std::size_t at(std::size_t row, std::size_t t) const noexcept { return row * b_.width + t; }
  std::int64_t token(std::size_t row, std::size_t t) const noexcept { return b_.tokens[at(row, t)]; }
  // Whether the policy sampled this token (the loss counts it).
  bool sampled(std::size_t row, std::size_t t) const noexcept { return b_.mask[at(row, t)] != 0; }
  // The sampler's log-prob of the token (NaN where unknown or not sampled).
  double sampled_logp(std::size_t row, std::size_t t) const noexcept {
    return b_.sampled_logp[at(row, t)];
  }
  // Where the token's conditioning context begins in its row.
  std::size_t context_start(std::size_t row, std::size_t t) const noexcept {
    return static_cast<std::size_t>(b_.context_start[at(row, t)]);
  }
  // The row's length before padding.
  std::size_t length(std::size_t row) const noexcept {
    return static_cast<std::size_t>(b_.lengths[row]);
  }
  // [{"trajectory", "group", "member", "reward", "segments": [...]}] (see nenyax.h).
  std::string_view rows_json() const noexcept { return {b_.rows_json, b_.rows_json_len}; }
  const nenyax_trace_batch_t& raw() const noexcept { return b_; }

 private:
  const nenyax_trace_batch_t& b_;
};

// A model whose weights a weight learner (grpo, dapo, rloo, rft, dpo, ...) trains. Its methods
// run on the thread that called train(), between rollouts. Throw to fail the round.
class Trainer {
 public:
  virtual ~Trainer() = default;
  // log p(token | tokens[context_start .. t]) for every sampled position into
  // logp_out[batch.at(r, t)] (other positions are not read); with `reference`, under the frozen
  // reference weights (for KL penalties and DPO; throw if there are none).
  virtual void logprobs(const TraceBatch& batch, bool reference, double* logp_out) = 0;
  // Backpropagate grad_logp (dLoss/dlogp, rows x width, 0 off the sampled tokens) and take one
  // optimiser step that lowers the loss.
  virtual void apply(const TraceBatch& batch, const double* grad_logp) = 0;
  // Whether snapshot() / restore() work, so a harmful update can be reverted (gating).
  virtual bool can_snapshot() const { return false; }
  // Save the weights and optimiser state in one slot.
  virtual void snapshot() {}
  // Go back to the last snapshot.
  virtual void restore() {}
};

// A whole learner written in C++ (the learner contract). Throw to fail the round.
class HostLearner {
 public:
  virtual ~HostLearner() = default;
  // Learn from one round's groups (JSON [{"index", "task", "seed", "trajectories"}]); return
  // {"metrics": {name: number}} or an empty string.
  virtual std::string update(std::string_view groups_json) = 0;
  virtual bool can_snapshot() const { return false; }
  virtual void snapshot() {}
  virtual void restore() {}
};

namespace detail {

inline Episode episode_of(const nenyax_episode_t& e) noexcept {
  Episode ep;
  ep.phase = static_cast<Episode::Phase>(e.phase);
  ep.round = e.round;
  ep.group = e.group;
  ep.member = e.member;
  ep.step = e.step;
  if (e.has_seed) ep.seed = e.seed;
  if (e.task_id != nullptr) ep.task_id = std::string_view(e.task_id, e.task_id_len);
  ep.sample_seed = e.sample_seed;
  return ep;
}

template <class Fn>
std::int32_t episode_trampoline(void* user_data, const nenyax_episode_t* episode,
                                const char* input, std::size_t len, nenyax_reply_t* reply,
                                nenyax_reply_t* record) noexcept {
  return guarded(reply, [&]() -> std::int32_t {
    const auto& fn = *static_cast<const Fn*>(user_data);
    Record rec;
    const std::string out = fn(episode_of(*episode), std::string_view(input, len), rec);
    if (!rec.empty() && !reply_text(record, rec.to_json())) return 2;
    return reply_text(reply, out) ? 0 : 2;
  });
}

template <class T>
T& owner(void* user_data) noexcept {
  return **static_cast<std::shared_ptr<T>*>(user_data);
}

template <class T>
void delete_shared(void* p) noexcept {
  delete static_cast<std::shared_ptr<T>*>(p);
}

inline std::int32_t trainer_logprobs(void* user_data, const nenyax_trace_batch_t* batch,
                                     bool reference, double* out, nenyax_reply_t* error) noexcept {
  return guarded(error, [&]() -> std::int32_t {
    owner<Trainer>(user_data).logprobs(TraceBatch(*batch), reference, out);
    return 0;
  });
}

inline std::int32_t trainer_apply(void* user_data, const nenyax_trace_batch_t* batch,
                                  const double* grad, nenyax_reply_t* error) noexcept {
  return guarded(error, [&]() -> std::int32_t {
    owner<Trainer>(user_data).apply(TraceBatch(*batch), grad);
    return 0;
  });
}

template <class T>
std::int32_t snapshot_trampoline(void* user_data, nenyax_reply_t* error) noexcept {
  return guarded(error, [&]() -> std::int32_t {
    owner<T>(user_data).snapshot();
    return 0;
  });
}

template <class T>
std::int32_t restore_trampoline(void* user_data, nenyax_reply_t* error) noexcept {
  return guarded(error, [&]() -> std::int32_t {
    owner<T>(user_data).restore();
    return 0;
  });
}

inline std::int32_t learner_update(void* user_data, const char* groups, std::size_t len,
                                   nenyax_reply_t* report) noexcept {
  return guarded(report, [&]() -> std::int32_t {
    const std::string r = owner<HostLearner>(user_data).update(std::string_view(groups, len));
    if (!r.empty() && !reply_text(report, r)) return 2;
    return 0;
  });
}

template <class Fn>
Policy episode_policy(Fn fn, bool chat, bool thread_safe) {
  nenyax_policy_vtable_t vt{NENYAX_POLICY_VTABLE_VERSION, nullptr, nullptr, nullptr, nullptr};
  if (chat) {
    vt.chat_episode = &episode_trampoline<Fn>;
  } else {
    vt.act_episode = &episode_trampoline<Fn>;
  }
  nenyax_policy_t* out = nullptr;
  // From this call on the library owns the function and frees it, also when the call fails.
  check(nenyax_policy_new(&vt, new Fn(std::move(fn)), &delete_user_data<Fn>,
                          thread_safe ? NENYAX_THREAD_SAFE : 0u, &out));
  return Policy::adopt(out);
}

}  // namespace detail

// A policy from a per-episode action function (see EpisodeActionFn): it gets the episode and
// call it serves, so it samples reproducibly whatever the threads, and records what it sampled
// so its episodes are training-ready. An exception fails that episode only.
inline Policy episode_action_policy(EpisodeActionFn fn, bool thread_safe = false) {
  if (!fn) detail::empty_callback("episode_action_policy's function");
  return detail::episode_policy(std::move(fn), false, thread_safe);
}

// A chat policy from a per-episode chat function (see EpisodeChatFn); record the prompt and
// completion token ids for its calls to be trained on.
inline Policy episode_chat_policy(EpisodeChatFn fn, bool thread_safe = false) {
  if (!fn) detail::empty_callback("episode_chat_policy's function");
  return detail::episode_policy(std::move(fn), true, thread_safe);
}

// A learner (nenyax_learner_t): a named one or a HostLearner. Move-only; one train() at a time.
class Learner {
 public:
  Learner() = default;  // empty

  // A named learner from a config ("grpo" or {"use": "grpo", ...knobs}). Weight learners train
  // `trainer` (whose sampling policy is `policy`), or, with no trainer, the built-in softmax
  // policy sized from `env`; "incontext" improves the chat `policy`. The library shares
  // ownership of the trainer (the caller may keep its shared_ptr to read the weights).
  static Learner create(std::string_view config, const Env* env = nullptr,
                        const Policy* policy = nullptr, std::shared_ptr<Trainer> trainer = {}) {
    nenyax_learner_t* out = nullptr;
    if (!trainer) {
      check(nenyax_learner_new(config.data(), config.size(), env ? env->get() : nullptr,
                               policy ? policy->get() : nullptr, nullptr, nullptr, nullptr, &out));
      return adopt(out);
    }
    const bool snap = trainer->can_snapshot();
    nenyax_trainer_vtable_t vt{NENYAX_TRAINER_VTABLE_VERSION, &detail::trainer_logprobs,
                               &detail::trainer_apply,
                               snap ? &detail::snapshot_trampoline<Trainer> : nullptr,
                               snap ? &detail::restore_trampoline<Trainer> : nullptr};
    // From this call on the library owns the shared_ptr copy, also when the call fails.
    check(nenyax_learner_new(config.data(), config.size(), env ? env->get() : nullptr,
                             policy ? policy->get() : nullptr, &vt,
                             new std::shared_ptr<Trainer>(std::move(trainer)),
                             &detail::delete_shared<Trainer>, &out));
    return adopt(out);
  }

  // A learner written in C++, named `name` in reports, rolling out with `policy`.
  static Learner custom(std::string_view name, std::shared_ptr<HostLearner> learner,
                        const Policy& policy) {
    if (!learner) throw Error(NENYAX_STATUS_INVALID_ARGUMENT, "Learner::custom: learner is null");
    const bool snap = learner->can_snapshot();
    nenyax_learner_vtable_t vt{NENYAX_LEARNER_VTABLE_VERSION, &detail::learner_update,
                               snap ? &detail::snapshot_trampoline<HostLearner> : nullptr,
                               snap ? &detail::restore_trampoline<HostLearner> : nullptr};
    nenyax_learner_t* out = nullptr;
    check(nenyax_learner_custom(name.data(), name.size(), &vt,
                                new std::shared_ptr<HostLearner>(std::move(learner)),
                                &detail::delete_shared<HostLearner>, policy.get(), &out));
    return adopt(out);
  }

  // Take ownership of a raw handle (e.g. from a C API call).
  static Learner adopt(nenyax_learner_t* handle) noexcept {
    Learner l;
    l.h_.reset(handle);
    return l;
  }

  Learner(Learner&&) noexcept = default;
  Learner& operator=(Learner&&) noexcept = default;
  Learner(const Learner&) = delete;
  Learner& operator=(const Learner&) = delete;

  nenyax_learner_t* get() const noexcept { return h_.get(); }
  nenyax_learner_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  Handle<nenyax_learner_t, nenyax_learner_free> h_;
};

// Train `learner` on `env`; the report (JSON, with "text" for people and "overhead_fraction").
// Options: {"rounds", "group_size", "batch", "eval_tasks", "eval_repeats", "seed",
// "concurrency", "gate", ...} (see docs/c-api.md). A failed round is in the report, not thrown.
inline std::string train(const Env& env, Learner& learner, std::string_view options_json = {}) {
  return detail::string_call([&](nenyax_string_t* out) {
    return nenyax_train(env.get(), learner.get(), detail::data_or_null(options_json),
                        options_json.size(), out);
  });
}

// A run config file (TOML) read and checked as `nenyax train --config` does, normalised to JSON
// {"file", "env": {"uri", "judge"}, "model", "learner", "train", "output"}; `overrides_json`
// (may be empty) sets dotted keys first, e.g. {"train.gate": false}. Errors name file and line.
inline std::string config_load(std::string_view path, std::string_view overrides_json = {}) {
  return detail::string_call([&](nenyax_string_t* out) {
    return nenyax_config_load(path.data(), path.size(), detail::data_or_null(overrides_json),
                              overrides_json.size(), out);
  });
}

}  // namespace nenyax

#endif  // NENYAX_TRAIN_HPP
