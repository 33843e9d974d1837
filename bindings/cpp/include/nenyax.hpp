// nenyax.hpp: a header-only C++17 RAII wrapper over the C ABI of Nenyax (include/nenyax.h).
// Apache-2.0.
//
// Quick start
//
//     #include <nenyax.hpp>
//
//     auto env = nenyax::Env::load("builtin:arithmetic?size=100");
//     auto policy = nenyax::Policy::action([](std::string_view observation_json) {
//         return std::string("\"<answer>42</answer>\"");   // the action, as JSON
//     });
//     nenyax::Runner runner;                                // one worker per core
//     for (const std::string& trajectory : runner.run(env, policy, R"({"n": 64})")) { ... }
//
// Conventions
//
// - JSON stays JSON. Manifests, tasks, observations, actions, steps, judgments, trajectories,
//   reports and options cross as UTF-8 JSON text (std::string / std::string_view) with the field
//   names of docs/protocol.md. This header depends on nothing but the standard library and
//   nenyax.h: parse with the JSON library of your choice (nlohmann/json, simdjson, RapidJSON,
//   boost::json...). Options are optional: an empty string_view means "defaults".
// - Errors. Every library call that can fail throws nenyax::Error (a std::runtime_error) with
//   the library's message as what() and the stable nenyax_status_t as status(); the C error
//   object is freed before the throw. A failed *episode* is not an error: its trajectory
//   carries the message in "error".
// - Ownership. Env, Policy, Session, Runner, Sandbox, Recording, Server and Learner own one C handle
//   each, through the one RAII template nenyax::Handle<T, Free>; they are move-only, and
//   a moved-from object is empty: safe to destroy or assign to, and any other call on it throws
//   nenyax::Error(NENYAX_STATUS_INVALID_ARGUMENT). Handles may be destroyed in any order (a
//   policy made from an environment outlives it). Strings returned by the library are copied
//   into std::string and the C string is freed at once.
// - Callbacks. The std::function of a callback policy or environment is moved to the heap and
//   owned by the library, which frees it (free_user_data) when the last handle using it goes.
//   A C++ exception never crosses the C boundary: an exception escaping a policy or
//   environment callback fails that episode only, with the exception's what() in the
//   trajectory's "error" ("action callback failed with status 1: <what()>"); an exception
//   escaping a trajectory sink stops the batch and is rethrown, as is, from Runner::run.
//   The std::string_view arguments a callback receives are valid only during the call: copy
//   what you keep.
// - Threads. const member functions may run concurrently on one object (e.g. several threads
//   sharing an Env); a Session needs exclusive access. Callbacks made with thread_safe = false
//   (the default) only ever run on the thread that called Runner::run / Env::check /
//   Env::rollout, one at a time, while the environments step in parallel; with
//   thread_safe = true they run on the library's worker threads, concurrently, so they must be
//   safe for that. A non-thread-safe callback object must not be used by two host threads'
//   batches at the same time.

#ifndef NENYAX_HPP
#define NENYAX_HPP

#include <nenyax.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace nenyax {

// An error reported by the library (or by this wrapper for a misuse, e.g. an empty callback).
class Error : public std::runtime_error {
 public:
  Error(nenyax_status_t status, const std::string& message)
      : std::runtime_error(message), status_(status) {}

  // The stable status code (see nenyax_status_t in nenyax.h).
  nenyax_status_t status() const noexcept { return status_; }
  // The same as status(), under the name other bindings use.
  nenyax_status_t code() const noexcept { return status_; }

 private:
  nenyax_status_t status_;
};

// The name of a status code, e.g. "NENYAX_STATUS_UNKNOWN_SCHEME" (for logs and messages).
inline const char* status_name(nenyax_status_t status) noexcept {
  switch (status) {
    case NENYAX_STATUS_OK: return "NENYAX_STATUS_OK";
    case NENYAX_STATUS_INVALID_ARGUMENT: return "NENYAX_STATUS_INVALID_ARGUMENT";
    case NENYAX_STATUS_INVALID_URI: return "NENYAX_STATUS_INVALID_URI";
    case NENYAX_STATUS_UNKNOWN_SCHEME: return "NENYAX_STATUS_UNKNOWN_SCHEME";
    case NENYAX_STATUS_DRIVER_UNAVAILABLE: return "NENYAX_STATUS_DRIVER_UNAVAILABLE";
    case NENYAX_STATUS_UNKNOWN_TARGET: return "NENYAX_STATUS_UNKNOWN_TARGET";
    case NENYAX_STATUS_UNKNOWN_PARAMETER: return "NENYAX_STATUS_UNKNOWN_PARAMETER";
    case NENYAX_STATUS_INVALID_PARAMETER: return "NENYAX_STATUS_INVALID_PARAMETER";
    case NENYAX_STATUS_UNSUPPORTED: return "NENYAX_STATUS_UNSUPPORTED";
    case NENYAX_STATUS_POLICY_MISMATCH: return "NENYAX_STATUS_POLICY_MISMATCH";
    case NENYAX_STATUS_POLICY: return "NENYAX_STATUS_POLICY";
    case NENYAX_STATUS_INVALID_ACTION: return "NENYAX_STATUS_INVALID_ACTION";
    case NENYAX_STATUS_ENVIRONMENT: return "NENYAX_STATUS_ENVIRONMENT";
    case NENYAX_STATUS_NON_FINITE_SCORE: return "NENYAX_STATUS_NON_FINITE_SCORE";
    case NENYAX_STATUS_JUDGE: return "NENYAX_STATUS_JUDGE";
    case NENYAX_STATUS_DEFINE: return "NENYAX_STATUS_DEFINE";
    case NENYAX_STATUS_ENDPOINT: return "NENYAX_STATUS_ENDPOINT";
    case NENYAX_STATUS_PROTOCOL: return "NENYAX_STATUS_PROTOCOL";
    case NENYAX_STATUS_CONFIG: return "NENYAX_STATUS_CONFIG";
    case NENYAX_STATUS_IO: return "NENYAX_STATUS_IO";
    case NENYAX_STATUS_CALLBACK: return "NENYAX_STATUS_CALLBACK";
    case NENYAX_STATUS_PANIC: return "NENYAX_STATUS_PANIC";
    case NENYAX_STATUS_CUDA_UNAVAILABLE: return "NENYAX_STATUS_CUDA_UNAVAILABLE";
    case NENYAX_STATUS_CUDA: return "NENYAX_STATUS_CUDA";
    case NENYAX_STATUS_CAPACITY: return "NENYAX_STATUS_CAPACITY";
    case NENYAX_STATUS_TRAINING: return "NENYAX_STATUS_TRAINING";
  }
  return "NENYAX_STATUS_<unknown>";
}

// Library version ("0.1.0"), a static string.
inline std::string_view version() noexcept { return nenyax_version(); }

// Library version as MAJOR*1000000 + MINOR*1000 + PATCH; compare with NENYAX_VERSION_NUMBER.
inline std::uint32_t version_number() noexcept { return nenyax_version_number(); }

// Contract version ("0.1").
inline std::string_view protocol_version() noexcept { return nenyax_protocol_version(); }

// An observation (JSON) -> action (JSON) callback.
using ActionFn = std::function<std::string(std::string_view observation_json)>;
// A conversation (JSON array of OpenAI-shaped messages) -> reply text (plain, not JSON).
using ChatFn = std::function<std::string(std::string_view messages_json)>;
// Receives each trajectory (JSON) of a batch, in job order, on the calling thread.
using TrajectoryFn = std::function<void(std::size_t index, std::string_view trajectory_json)>;
// Scores a reply (plain text) for a task row (JSON object); must return a finite number.
using ScoreFn = std::function<double(std::string_view task_json, std::string_view reply)>;
// The reply an oracle gives for a task row (plain text); throw when there is none.
using ReferenceFn = std::function<std::string(std::string_view task_json)>;

// What a stateful environment's step returns.
struct StepResult {
  std::string state;   // the next state (JSON)
  double reward = 0.0;
  bool done = false;   // the episode ended
};

// The callbacks of a multi-turn environment over a JSON state (see Env::define_stateful).
struct StateCallbacks {
  // seed -> initial state (JSON).
  std::function<std::string(std::int64_t seed)> reset;
  // state (JSON) -> what the policy sees (JSON; a JSON string becomes text).
  std::function<std::string(std::string_view state_json)> observe;
  // state, action (JSON) -> next state, reward, done.
  std::function<StepResult(std::string_view state_json, std::string_view action_json)> step;
};

// Unique ownership of one C handle, freed with `Free` (the header's nenyax_X_free); move-only.
// A moved-from or default-constructed Handle is empty (NULL), which every free accepts.
template <class T, void (*Free)(T*)>
class Handle {
 public:
  Handle() noexcept = default;
  explicit Handle(T* p) noexcept : p_(p) {}
  Handle(Handle&& other) noexcept : p_(std::exchange(other.p_, nullptr)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) reset(std::exchange(other.p_, nullptr));
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  T* get() const noexcept { return p_; }
  // Give up ownership without freeing.
  T* release() noexcept { return std::exchange(p_, nullptr); }
  // Free the current handle (if any) and own `p`.
  void reset(T* p = nullptr) noexcept {
    T* old = std::exchange(p_, p);
    if (old != nullptr) Free(old);
  }
  explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
};

// Throw a C error as nenyax::Error (freeing it first); NULL is success. For direct calls of the
// C API: `nenyax::check(nenyax_env_load(uri, len, &out));`.
inline void check(nenyax_error_t* raw) {
  if (raw == nullptr) return;
  Handle<nenyax_error_t, nenyax_error_free> e(raw);
  std::size_t len = 0;
  const char* msg = nenyax_error_message(e.get(), &len);
  const nenyax_status_t status = nenyax_error_code(e.get());
  std::string text(msg, len);
  e.reset();
  throw Error(status, text);
}

namespace detail {

using ::nenyax::check;

// An out-parameter string, freed when the guard goes (also when copying it throws).
struct StringOut {
  nenyax_string_t s{nullptr, 0};
  StringOut() = default;
  StringOut(const StringOut&) = delete;
  StringOut& operator=(const StringOut&) = delete;
  ~StringOut() { nenyax_string_free(&s); }
  std::string take() {
    std::string out = s.ptr ? std::string(s.ptr, s.len) : std::string();
    nenyax_string_free(&s);
    return out;
  }
};

// Call a function `f(nenyax_string_t *out)` returning an error; the string, copied.
template <typename F>
std::string string_call(F&& f) {
  StringOut out;
  check(f(&out.s));
  return out.take();
}

inline const char* data_or_null(std::string_view s) noexcept {
  return s.empty() ? nullptr : s.data();
}

inline void reply_message(nenyax_reply_t* reply, const char* message) noexcept {
  if (message == nullptr) message = "";
  nenyax_reply_set(reply, message, std::char_traits<char>::length(message));
}

inline bool reply_text(nenyax_reply_t* reply, const std::string& text) noexcept {
  return nenyax_reply_set(reply, text.data(), text.size());
}

// Run `body` (which writes a reply); map a C++ exception to a failed callback with its what().
template <typename Body>
std::int32_t guarded(nenyax_reply_t* reply, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    reply_message(reply, e.what());
  } catch (...) {
    reply_message(reply, "a C++ callback threw an exception that is not a std::exception");
  }
  return 1;
}

template <typename T>
void delete_user_data(void* p) noexcept {
  delete static_cast<T*>(p);
}

inline std::int32_t act_trampoline(void* user_data, const char* observation, std::size_t len,
                                   nenyax_reply_t* reply) noexcept {
  return guarded(reply, [&]() -> std::int32_t {
    const auto& fn = *static_cast<const ActionFn*>(user_data);
    return reply_text(reply, fn(std::string_view(observation, len))) ? 0 : 2;
  });
}

inline std::int32_t chat_trampoline(void* user_data, const char* messages, std::size_t len,
                                    nenyax_reply_t* reply) noexcept {
  return guarded(reply, [&]() -> std::int32_t {
    const auto& fn = *static_cast<const ChatFn*>(user_data);
    return reply_text(reply, fn(std::string_view(messages, len))) ? 0 : 2;
  });
}

struct TaskCallbacks {
  ScoreFn score;
  ReferenceFn reference;
};

inline std::int32_t score_trampoline(void* user_data, const char* task, std::size_t task_len,
                                     const char* reply_text_, std::size_t reply_len,
                                     double* score_out, nenyax_reply_t* error) noexcept {
  return guarded(error, [&]() -> std::int32_t {
    const auto& cb = *static_cast<const TaskCallbacks*>(user_data);
    *score_out = cb.score(std::string_view(task, task_len),
                          std::string_view(reply_text_, reply_len));
    return 0;
  });
}

inline std::int32_t reference_trampoline(void* user_data, const char* task, std::size_t len,
                                         nenyax_reply_t* reply) noexcept {
  return guarded(reply, [&]() -> std::int32_t {
    const auto& cb = *static_cast<const TaskCallbacks*>(user_data);
    return reply_text(reply, cb.reference(std::string_view(task, len))) ? 0 : 2;
  });
}

inline std::int32_t reset_trampoline(void* user_data, std::int64_t seed,
                                     nenyax_reply_t* state_out) noexcept {
  return guarded(state_out, [&]() -> std::int32_t {
    const auto& cb = *static_cast<const StateCallbacks*>(user_data);
    return reply_text(state_out, cb.reset(seed)) ? 0 : 2;
  });
}

inline std::int32_t observe_trampoline(void* user_data, const char* state, std::size_t len,
                                       nenyax_reply_t* observation_out) noexcept {
  return guarded(observation_out, [&]() -> std::int32_t {
    const auto& cb = *static_cast<const StateCallbacks*>(user_data);
    return reply_text(observation_out, cb.observe(std::string_view(state, len))) ? 0 : 2;
  });
}

inline std::int32_t step_trampoline(void* user_data, const char* state, std::size_t state_len,
                                    const char* action, std::size_t action_len,
                                    nenyax_reply_t* state_out, double* reward_out,
                                    bool* done_out) noexcept {
  return guarded(state_out, [&]() -> std::int32_t {
    const auto& cb = *static_cast<const StateCallbacks*>(user_data);
    StepResult r = cb.step(std::string_view(state, state_len),
                           std::string_view(action, action_len));
    if (!reply_text(state_out, r.state)) return 2;
    *reward_out = r.reward;
    *done_out = r.done;
    return 0;
  });
}

struct SinkContext {
  const TrajectoryFn* fn;
  std::exception_ptr error;
};

inline std::int32_t sink_trampoline(void* user_data, std::size_t index, const char* json,
                                    std::size_t len) noexcept {
  auto* ctx = static_cast<SinkContext*>(user_data);
  if (ctx->error) return 1;
  try {
    (*ctx->fn)(index, std::string_view(json, len));
    return 0;
  } catch (...) {
    ctx->error = std::current_exception();
  }
  return 1;  // stops the batch; Runner::run rethrows ctx->error
}

[[noreturn]] inline void empty_callback(const char* what) {
  throw Error(NENYAX_STATUS_INVALID_ARGUMENT, std::string(what) + " is an empty std::function");
}

}  // namespace detail

// A policy: a C++ callback (action or chat), an OpenAI-compatible endpoint, or an environment's
// own reference / null policy (Env::reference_policy, Env::null_policy).
class Policy {
 public:
  Policy() = default;  // empty

  // A policy from an observation (JSON) -> action (JSON) function. The action must be JSON:
  // return "\"<answer>4</answer>\"" for the text <answer>4</answer>, "42" for the number 42.
  static Policy action(ActionFn fn, bool thread_safe = false) {
    if (!fn) detail::empty_callback("Policy::action's function");
    nenyax_policy_vtable_t vt{NENYAX_VTABLE_VERSION, &detail::act_trampoline, nullptr, nullptr,
                              nullptr};
    return make(vt, new ActionFn(std::move(fn)), &detail::delete_user_data<ActionFn>,
                thread_safe);
  }

  // A chat policy from a messages (JSON array) -> reply text (plain UTF-8) function.
  static Policy chat(ChatFn fn, bool thread_safe = false) {
    if (!fn) detail::empty_callback("Policy::chat's function");
    nenyax_policy_vtable_t vt{NENYAX_VTABLE_VERSION, nullptr, &detail::chat_trampoline, nullptr,
                              nullptr};
    return make(vt, new ChatFn(std::move(fn)), &detail::delete_user_data<ChatFn>, thread_safe);
  }

  // An OpenAI-compatible endpoint: {"base_url", "model", "api_key_env", "timeout_s", "retries",
  // "backoff_s", "params"}.
  static Policy endpoint(std::string_view options_json) {
    nenyax_policy_t* out = nullptr;
    detail::check(nenyax_policy_endpoint(options_json.data(), options_json.size(), &out));
    return adopt(out);
  }

  // Take ownership of a raw handle (e.g. from a C API call).
  static Policy adopt(nenyax_policy_t* handle) noexcept {
    Policy p;
    p.h_.reset(handle);
    return p;
  }

  Policy(Policy&&) noexcept = default;
  Policy& operator=(Policy&&) noexcept = default;
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  const nenyax_policy_t* get() const noexcept { return h_.get(); }
  nenyax_policy_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  static Policy make(const nenyax_policy_vtable_t& vt, void* user_data, nenyax_free_fn free_fn,
                     bool thread_safe) {
    nenyax_policy_t* out = nullptr;
    // From this call on the library owns user_data and frees it, also when the call fails.
    detail::check(nenyax_policy_new(&vt, user_data, free_fn,
                                    thread_safe ? NENYAX_THREAD_SAFE : 0u, &out));
    return adopt(out);
  }

  Handle<nenyax_policy_t, nenyax_policy_free> h_;
};

// A live step-mode episode (Env::session). Not thread-safe: use from one thread at a time.
class Session {
 public:
  Session() = default;  // empty

  static Session adopt(nenyax_session_t* handle) noexcept {
    Session s;
    s.h_.reset(handle);
    return s;
  }

  Session(Session&&) noexcept = default;
  Session& operator=(Session&&) noexcept = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The current observation (JSON).
  std::string observation() const {
    return detail::string_call(
        [&](nenyax_string_t* out) { return nenyax_session_observation(h_.get(), out); });
  }

  // Apply an action (JSON, e.g. "\"<answer>4</answer>\"" or "42"); the Step (JSON).
  std::string act(std::string_view action_json) {
    return detail::string_call([&](nenyax_string_t* out) {
      return nenyax_session_act(h_.get(), action_json.data(), action_json.size(), out);
    });
  }

  // True once the episode terminated or was truncated (false for an empty session).
  bool done() const noexcept { return nenyax_session_done(h_.get()); }

  // The episode's Judgment so far (JSON).
  std::string judgment() const {
    return detail::string_call(
        [&](nenyax_string_t* out) { return nenyax_session_judgment(h_.get(), out); });
  }

  nenyax_session_t* get() const noexcept { return h_.get(); }
  nenyax_session_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  Handle<nenyax_session_t, nenyax_session_free> h_;
};

// A loaded or defined environment. const member functions may run concurrently.
class Env {
 public:
  Env() = default;  // empty

  // Load by URI, e.g. "builtin:arithmetic?size=100".
  static Env load(std::string_view uri) {
    nenyax_env_t* out = nullptr;
    detail::check(nenyax_env_load(uri.data(), uri.size(), &out));
    return adopt(out);
  }

  // Define from a JSON spec: {"name", "description", "tasks": [{...}] or "tasks_file",
  // "judge": {"type": "exact", ...}} (a tasks_file is read relative to the working directory).
  static Env define(std::string_view spec_json) {
    nenyax_env_t* out = nullptr;
    detail::check(nenyax_env_define(spec_json.data(), spec_json.size(), &out));
    return adopt(out);
  }

  // A one-turn environment over task rows (a JSON array of objects with a string "prompt"),
  // scored by `score(task_json, reply)`; `reference` (optional) gives the oracle's reply.
  static Env define_tasks(std::string_view name, std::string_view tasks_json, ScoreFn score,
                          ReferenceFn reference = {}, bool thread_safe = false) {
    if (!score) detail::empty_callback("Env::define_tasks's score function");
    const bool has_reference = static_cast<bool>(reference);
    nenyax_task_vtable_t vt{NENYAX_VTABLE_VERSION, &detail::score_trampoline,
                            has_reference ? &detail::reference_trampoline : nullptr};
    auto* user_data = new detail::TaskCallbacks{std::move(score), std::move(reference)};
    nenyax_env_t* out = nullptr;
    detail::check(nenyax_env_define_tasks(
        name.data(), name.size(), tasks_json.data(), tasks_json.size(), &vt, user_data,
        &detail::delete_user_data<detail::TaskCallbacks>, thread_safe ? NENYAX_THREAD_SAFE : 0u,
        &out));
    return adopt(out);
  }

  // A multi-turn environment over a JSON state; episodes end when step says done or after
  // `max_steps` steps.
  static Env define_stateful(std::string_view name, StateCallbacks callbacks,
                             std::size_t max_steps, bool thread_safe = false) {
    if (!callbacks.reset || !callbacks.observe || !callbacks.step)
      detail::empty_callback("one of Env::define_stateful's reset, observe and step");
    nenyax_state_vtable_t vt{NENYAX_VTABLE_VERSION, &detail::reset_trampoline,
                             &detail::observe_trampoline, &detail::step_trampoline};
    auto* user_data = new StateCallbacks(std::move(callbacks));
    nenyax_env_t* out = nullptr;
    detail::check(nenyax_env_define_stateful(
        name.data(), name.size(), &vt, user_data, &detail::delete_user_data<StateCallbacks>,
        thread_safe ? NENYAX_THREAD_SAFE : 0u, max_steps, &out));
    return adopt(out);
  }

  // Take ownership of a raw handle (e.g. from a C API call).
  static Env adopt(nenyax_env_t* handle) noexcept {
    Env e;
    e.h_.reset(handle);
    return e;
  }

  Env(Env&&) noexcept = default;
  Env& operator=(Env&&) noexcept = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  // The manifest (JSON).
  std::string manifest() const {
    return detail::string_call(
        [&](nenyax_string_t* out) { return nenyax_env_manifest(h_.get(), out); });
  }

  // Up to `limit` tasks (0: all) as a JSON array of TaskRef.
  std::string tasks(std::size_t limit = 0) const {
    return detail::string_call(
        [&](nenyax_string_t* out) { return nenyax_env_tasks(h_.get(), limit, out); });
  }

  // The environment's reference (oracle) policy; throws NENYAX_STATUS_UNSUPPORTED without one.
  Policy reference_policy() const {
    nenyax_policy_t* out = nullptr;
    detail::check(nenyax_env_reference_policy(h_.get(), &out));
    return Policy::adopt(out);
  }

  // The environment's null policy; throws NENYAX_STATUS_UNSUPPORTED without one.
  Policy null_policy() const {
    nenyax_policy_t* out = nullptr;
    detail::check(nenyax_env_null_policy(h_.get(), &out));
    return Policy::adopt(out);
  }

  // A new environment re-judged by a judge spec, e.g. {"type":"exact","extract":"answer_tag"}.
  Env with_judge(std::string_view judge_json) const {
    nenyax_env_t* out = nullptr;
    detail::check(nenyax_env_with_judge(h_.get(), judge_json.data(), judge_json.size(), &out));
    return adopt(out);
  }

  // One episode on the calling thread; the Trajectory (JSON). Options: {"task": TaskRef,
  // "seed": int, "max_steps": int}. A failed episode is returned, with its "error".
  std::string rollout(const Policy& policy, std::string_view options_json = {}) const {
    return detail::string_call([&](nenyax_string_t* out) {
      return nenyax_env_rollout(h_.get(), policy.get(), detail::data_or_null(options_json),
                                options_json.size(), out);
    });
  }

  // Conformance on this environment; the report (JSON {env_id, mode, tier, checks}). Options:
  // {"samples": 8, "threads": 2}. Fresh instances for the reproducibility check are rebuilt the
  // way this handle was made (URI, spec or callbacks).
  std::string check(std::string_view options_json = {}) const {
    return detail::string_call([&](nenyax_string_t* out) {
      return nenyax_env_check(h_.get(), detail::data_or_null(options_json), options_json.size(),
                              out);
    });
  }

  // Open a step-mode session. Options: {"task": TaskRef, "seed": int}.
  Session session(std::string_view options_json = {}) const {
    nenyax_session_t* out = nullptr;
    detail::check(nenyax_session_open(h_.get(), detail::data_or_null(options_json),
                                      options_json.size(), &out));
    return Session::adopt(out);
  }

  const nenyax_env_t* get() const noexcept { return h_.get(); }
  nenyax_env_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  Handle<nenyax_env_t, nenyax_env_free> h_;
};

// Load `uri` and run the full conformance suite (fresh instances included); the report (JSON).
inline std::string check_uri(std::string_view uri, std::string_view options_json = {}) {
  return detail::string_call([&](nenyax_string_t* out) {
    return nenyax_check_uri(uri.data(), uri.size(), detail::data_or_null(options_json),
                            options_json.size(), out);
  });
}

// A pool of worker threads for batches of rollouts.
class Runner {
 public:
  // `threads` workers (0: one per core, or $NENYAX_NUM_THREADS; at most NENYAX_MAX_THREADS).
  explicit Runner(std::size_t threads = 0) {
    nenyax_runner_t* out = nullptr;
    detail::check(nenyax_runner_new(threads, &out));
    h_.reset(out);
  }

  Runner(Runner&&) noexcept = default;
  Runner& operator=(Runner&&) noexcept = default;
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Number of worker threads (0 for a moved-from runner).
  std::size_t threads() const noexcept { return nenyax_runner_threads(h_.get()); }

  // Run a batch; each trajectory (JSON) goes to `on_trajectory` in job order, on this thread.
  // Options: {"n": 10, "seed": 0, "max_steps": int, "tasks": [TaskRef]}.
  //
  // An exception from `on_trajectory` stops the batch (episodes already running finish and are
  // dropped; no further trajectory is delivered) and is rethrown here, unchanged, once
  // nenyax_runner_run has returned.
  void run(const Env& env, const Policy& policy, std::string_view options_json,
           const TrajectoryFn& on_trajectory) const {
    if (!on_trajectory) detail::empty_callback("Runner::run's on_trajectory");
    detail::SinkContext ctx{&on_trajectory, nullptr};
    nenyax_error_t* raw = nenyax_runner_run(h_.get(), env.get(), policy.get(),
                                            detail::data_or_null(options_json),
                                            options_json.size(), &detail::sink_trampoline,
                                            &ctx, nullptr);
    if (ctx.error) {
      nenyax_error_free(raw);
      std::rethrow_exception(ctx.error);
    }
    detail::check(raw);
  }

  // Run a batch and collect the trajectories (JSON, one string each) in job order.
  std::vector<std::string> run(const Env& env, const Policy& policy,
                               std::string_view options_json = {}) const {
    std::vector<std::string> out;
    run(env, policy, options_json,
        [&out](std::size_t, std::string_view json) { out.emplace_back(json); });
    return out;
  }

  // Run a batch; all trajectories as one JSON array.
  std::string run_json(const Env& env, const Policy& policy,
                       std::string_view options_json = {}) const {
    return detail::string_call([&](nenyax_string_t* out) {
      return nenyax_runner_run(h_.get(), env.get(), policy.get(),
                               detail::data_or_null(options_json), options_json.size(), nullptr,
                               nullptr, out);
    });
  }

  const nenyax_runner_t* get() const noexcept { return h_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  Handle<nenyax_runner_t, nenyax_runner_free> h_;
};

// ---------------------------------------------------------------------------------------------
// Sandboxes, recordings, servers

// A sandbox (process or jail backend) for running untrusted commands. Commands may run from one
// thread at a time per sandbox.
class Sandbox {
 public:
  // Options (JSON, may be empty): {"backend": "process"|"jail"|"container", "cpu_s", "memory_bytes",
  // "open_files", "processes", "file_size_bytes", "wall_s", "output_bytes", "network",
  // "workdir", "root", "env": {..}, "extra_dirs": [..]}.
  explicit Sandbox(std::string_view options_json = {}) {
    nenyax_sandbox_t* out = nullptr;
    check(nenyax_sandbox_new(detail::data_or_null(options_json), options_json.size(), &out));
    h_.reset(out);
  }

  // Take ownership of a raw handle (e.g. from a C API call).
  static Sandbox adopt(nenyax_sandbox_t* handle) noexcept { return Sandbox(handle, 0); }

  // Run a command: {"argv": [..]} or {"shell": "..."}, plus optional "cwd", "env", "stdin",
  // "timeout_s"; the result (JSON: exit_code, signal, stdout, stderr, dropped_bytes,
  // duration_s, killed). A command that fails or is killed is not an error.
  std::string exec(std::string_view exec_json) const {
    return detail::string_call([&](nenyax_string_t* out) {
      return nenyax_sandbox_exec(h_.get(), exec_json.data(), exec_json.size(), out);
    });
  }

  // Write `data` to `path` (parents created) with Unix mode `mode`.
  void put(std::string_view path, std::string_view data, std::uint32_t mode = 0644) const {
    check(nenyax_sandbox_put(h_.get(), path.data(), path.size(),
                             reinterpret_cast<const std::uint8_t*>(data.data()), data.size(),
                             mode));
  }

  // The bytes of a sandbox file.
  std::string get(std::string_view path) const {
    return detail::string_call([&](nenyax_string_t* out) {
      return nenyax_sandbox_get(h_.get(), path.data(), path.size(), out);
    });
  }

  // A directory listing as JSON: [{"name", "dir", "size"}], sorted by name.
  std::string list(std::string_view path = ".") const {
    return detail::string_call([&](nenyax_string_t* out) {
      return nenyax_sandbox_list(h_.get(), path.data(), path.size(), out);
    });
  }

  // A new sandbox with the same configuration and a copy of this one's files.
  Sandbox fork() const {
    nenyax_sandbox_t* out = nullptr;
    check(nenyax_sandbox_fork(h_.get(), &out));
    return adopt(out);
  }

  const nenyax_sandbox_t* get() const noexcept { return h_.get(); }
  nenyax_sandbox_t* release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  Sandbox(nenyax_sandbox_t* handle, int) noexcept : h_(handle) {}
  Handle<nenyax_sandbox_t, nenyax_sandbox_free> h_;
};

// A recording: an OpenAI base URL of its own on the process's model server, answered by a chat
// policy, whose calls are kept (for a host that runs its own agent loop). Destroying it ends it.
class Recording {
 public:
  Recording() = default;  // empty

  // A recording answered by `policy` (a chat policy made with thread_safe = true, or an
  // endpoint): the server calls it from its own threads.
  explicit Recording(const Policy& policy) {
    nenyax_recording_t* out = nullptr;
    check(nenyax_recording_new(policy.get(), &out));
    h_.reset(out);
  }

  // The OpenAI base URL (`http://127.0.0.1:<port>/r/<id>/v1`).
  std::string base_url() const {
    return detail::string_call(
        [&](nenyax_string_t* out) { return nenyax_recording_base_url(h_.get(), out); });
  }

  // The calls made so far (JSON array of ModelCall); with `drain` they are removed.
  std::string calls(bool drain = false) const {
    return detail::string_call(
        [&](nenyax_string_t* out) { return nenyax_recording_calls(h_.get(), drain ? 1 : 0, out); });
  }

  const nenyax_recording_t* get() const noexcept { return h_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  Handle<nenyax_recording_t, nenyax_recording_free> h_;
};

// An OpenEnv server for one step-mode environment (what `nenyax serve` runs), on background
// threads; destroying it (or stop()) closes every connection and session.
class Server {
 public:
  Server() = default;  // empty

  // Options (JSON, may be empty): {"host", "port" (0: any free port), "max_sessions",
  // "idle_timeout_s", "max_message_bytes", "max_connections", "ping_interval_s"}. A
  // callback-defined environment needs thread_safe = true.
  static Server start(const Env& env, std::string_view options_json = {}) {
    nenyax_server_t* out = nullptr;
    check(nenyax_serve_start(env.get(), detail::data_or_null(options_json), options_json.size(),
                             &out));
    Server s;
    s.h_.reset(out);
    return s;
  }

  // The base URL, e.g. `http://127.0.0.1:8000` (OpenEnv clients append /ws).
  std::string url() const {
    return detail::string_call(
        [&](nenyax_string_t* out) { return nenyax_server_url(h_.get(), out); });
  }

  // Stop now (the destructor does the same).
  void stop() noexcept { h_.reset(); }

  const nenyax_server_t* get() const noexcept { return h_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(h_); }

 private:
  Handle<nenyax_server_t, nenyax_server_stop> h_;
};

// ---------------------------------------------------------------------------------------------
// Learners

// A pointer and a length (C++17 has no std::span): built from a pointer and a size, or from any
// contiguous container with data() and size() (std::vector, std::array, std::string).
template <class T>
class View {
 public:
  View() noexcept = default;
  View(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  template <class C, class = std::enable_if_t<std::is_convertible_v<
                         decltype(std::declval<C&>().data()), T*>>>
  View(C&& c) noexcept : data_(c.data()), size_(c.size()) {}  // NOLINT: implicit on purpose

  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// What a policy-loss call returns besides the gradients (nenyax_pg_stats_t).
using PgStats = nenyax_pg_stats_t;

// The host inputs of a policy loss over rows x width tokens (row-major). ref_logp is needed with
// a KL term and entropy with an entropy bonus (leave them empty otherwise); advantages holds one
// value per row or one per token.
template <class T>
struct PgInputs {
  View<const T> logp;
  View<const T> old_logp;
  View<const T> ref_logp;
  View<const T> entropy;
  View<const std::uint8_t> mask;
  View<const T> advantages;
  std::size_t rows = 0;
  std::size_t width = 0;
};

// The same on the GPU: device pointers (NULL where not needed) in the device's primary context.
template <class T>
struct PgDeviceInputs {
  const T* logp = nullptr;
  const T* old_logp = nullptr;
  const T* ref_logp = nullptr;
  const T* entropy = nullptr;
  const std::uint8_t* mask = nullptr;
  const T* advantages = nullptr;
  std::size_t advantages_len = 0;  // rows, or rows * width (0: one per row)
  std::size_t rows = 0;
  std::size_t width = 0;
};

// A loss with its gradients, for the overloads that allocate them.
template <class T>
struct PgResult {
  PgStats stats{};
  std::vector<T> grad_logp;     // rows * width
  std::vector<T> grad_entropy;  // rows * width when the inputs have entropy, else empty
};

namespace detail {

[[noreturn]] inline void bad_size(const char* what, std::size_t got, std::size_t want) {
  throw Error(NENYAX_STATUS_INVALID_ARGUMENT, std::string(what) + " has " + std::to_string(got) +
                                                  " values, expected " + std::to_string(want));
}

// The C entry points take bare pointers: lengths are checked here, before the call.
template <class V>
void need(const char* what, const V& v, std::size_t want, bool optional = false) {
  if (optional && v.empty()) return;
  if (v.size() != want) bad_size(what, v.size(), want);
}

template <class T>
void check_inputs(const PgInputs<T>& in) {
  const std::size_t n = in.rows * in.width;
  need("logp", in.logp, n);
  need("old_logp", in.old_logp, n);
  need("ref_logp", in.ref_logp, n, true);
  need("entropy", in.entropy, n, true);
  need("mask", in.mask, n);
  if (in.advantages.size() != in.rows && in.advantages.size() != n)
    bad_size("advantages", in.advantages.size(), in.rows);
}

template <class T>
T* ptr_or_null(View<T> v) noexcept {
  return v.empty() ? nullptr : v.data();
}

}  // namespace detail

// Advantages of n sequences (one reward and group id each). Options: {"estimator": "grpo_verl" |
// "grpo_trl" | "grpo" | "dr_grpo" | "rloo" | "reinforce", "eps", "singleton", "std_scope"}.
inline void advantages(View<const double> rewards, View<const std::int64_t> group_ids,
                       View<double> out, std::string_view options_json = {}) {
  detail::need("group_ids", group_ids, rewards.size());
  detail::need("out", out, rewards.size());
  check(nenyax_advantages(rewards.data(), group_ids.data(), rewards.size(),
                          detail::data_or_null(options_json), options_json.size(), out.data()));
}

// The same, returning a new vector.
inline std::vector<double> advantages(View<const double> rewards,
                                      View<const std::int64_t> group_ids,
                                      std::string_view options_json = {}) {
  std::vector<double> out(rewards.size());
  advantages(rewards, group_ids, View<double>(out), options_json);
  return out;
}

// DAPO's dynamic-sampling filter: 1 for the rows to keep, 0 for rows whose group has all-equal
// rewards.
inline std::vector<std::uint8_t> dapo_keep(View<const double> rewards,
                                           View<const std::int64_t> group_ids) {
  detail::need("group_ids", group_ids, rewards.size());
  std::vector<std::uint8_t> keep(rewards.size());
  check(nenyax_dapo_keep(rewards.data(), group_ids.data(), rewards.size(), keep.data()));
  return keep;
}

// A policy-gradient loss on the CPU (f64 or f32) into caller buffers (rows * width each;
// grad_entropy may be empty). Config: the JSON of docs/c-api.md or {"learner": "dapo"}.
template <class T>
PgStats pg_loss(const PgInputs<T>& in, std::string_view config_json, View<T> grad_logp,
                View<T> grad_entropy = {}) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>, "f64 or f32");
  detail::check_inputs(in);
  detail::need("grad_logp", grad_logp, in.rows * in.width);
  detail::need("grad_entropy", grad_entropy, in.rows * in.width, true);
  PgStats stats{};
  auto call = [&](auto fn) {
    check(fn(in.logp.data(), in.old_logp.data(), detail::ptr_or_null(in.ref_logp),
             detail::ptr_or_null(in.entropy), in.mask.data(), in.advantages.data(),
             in.advantages.size(), in.rows, in.width, config_json.data(), config_json.size(),
             grad_logp.data(), detail::ptr_or_null(grad_entropy), &stats));
  };
  if constexpr (std::is_same_v<T, double>) {
    call(&nenyax_pg_loss);
  } else {
    call(&nenyax_pg_loss_f32);
  }
  return stats;
}

// The same, allocating the gradients.
template <class T>
PgResult<T> pg_loss(const PgInputs<T>& in, std::string_view config_json) {
  PgResult<T> r;
  r.grad_logp.resize(in.rows * in.width);
  if (!in.entropy.empty()) r.grad_entropy.resize(in.rows * in.width);
  r.stats = pg_loss<T>(in, config_json, View<T>(r.grad_logp), View<T>(r.grad_entropy));
  return r;
}

// The fused GPU loss from host memory (f32): copies in, runs, copies back, synchronises.
// Throws NENYAX_STATUS_CUDA_UNAVAILABLE without a usable GPU.
inline PgStats pg_loss_cuda_host(const PgInputs<float>& in, std::string_view config_json,
                                 View<float> grad_logp, View<float> grad_entropy = {}) {
  detail::check_inputs(in);
  detail::need("grad_logp", grad_logp, in.rows * in.width);
  detail::need("grad_entropy", grad_entropy, in.rows * in.width, true);
  PgStats stats{};
  check(nenyax_pg_loss_cuda_host_f32(
      in.logp.data(), in.old_logp.data(), detail::ptr_or_null(in.ref_logp),
      detail::ptr_or_null(in.entropy), in.mask.data(), in.advantages.data(), in.advantages.size(),
      in.rows, in.width, config_json.data(), config_json.size(), grad_logp.data(),
      detail::ptr_or_null(grad_entropy), &stats));
  return stats;
}

// The fused loss on the GPU over device pointers (f32 or f64), queued on `stream` (a CUstream /
// cudaStream_t; nullptr: the default stream) without synchronising. `stats_device` receives
// NENYAX_PG_STATS_LEN doubles in device memory (the last one: NENYAX_PG_BAD_* bits).
template <class T>
void pg_loss_cuda(const PgDeviceInputs<T>& in, std::string_view config_json, T* grad_logp,
                  T* grad_entropy, double* stats_device, void* stream = nullptr) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>, "f64 or f32");
  auto call = [&](auto fn) {
    check(fn(in.logp, in.old_logp, in.ref_logp, in.entropy, in.mask, in.advantages,
             in.advantages_len, in.rows, in.width, config_json.data(), config_json.size(),
             grad_logp, grad_entropy, stats_device, stream));
  };
  if constexpr (std::is_same_v<T, double>) {
    call(&nenyax_pg_loss_cuda_f64);
  } else {
    call(&nenyax_pg_loss_cuda_f32);
  }
}

#ifdef NENYAX_PG_BATCH_VERSION
// One policy-gradient loss entry point over a nenyax_pg_batch_t (headers from the batch struct
// on; the five per-case functions above stay as they are). `Device` picks where it runs.
enum class Device : std::uint32_t { cpu = NENYAX_DEVICE_CPU, cuda = NENYAX_DEVICE_CUDA };

// A host batch over PgInputs<T> and caller gradient buffers (lengths checked first).
template <class T>
nenyax_pg_batch_t pg_batch(const PgInputs<T>& in, View<T> grad_logp, View<T> grad_entropy = {},
                           Device device = Device::cpu) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>, "f64 or f32");
  detail::check_inputs(in);
  detail::need("grad_logp", grad_logp, in.rows * in.width);
  detail::need("grad_entropy", grad_entropy, in.rows * in.width, true);
  nenyax_pg_batch_t b{};
  b.version = NENYAX_PG_BATCH_VERSION;
  b.dtype = std::is_same_v<T, double> ? NENYAX_DTYPE_F64 : NENYAX_DTYPE_F32;
  b.memory = NENYAX_MEMORY_HOST;
  b.device = static_cast<std::uint32_t>(device);
  b.logp = in.logp.data();
  b.old_logp = in.old_logp.data();
  b.ref_logp = detail::ptr_or_null(in.ref_logp);
  b.entropy = detail::ptr_or_null(in.entropy);
  b.mask = in.mask.data();
  b.advantages = in.advantages.data();
  b.advantages_len = in.advantages.size();
  b.rows = in.rows;
  b.width = in.width;
  b.grad_logp = grad_logp.data();
  b.grad_entropy = detail::ptr_or_null(grad_entropy);
  return b;
}

// A device batch (CUDA memory) over PgDeviceInputs<T>, queued on `stream` without synchronising.
template <class T>
nenyax_pg_batch_t pg_batch(const PgDeviceInputs<T>& in, T* grad_logp, T* grad_entropy,
                           double* stats_device, void* stream = nullptr) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float>, "f64 or f32");
  nenyax_pg_batch_t b{};
  b.version = NENYAX_PG_BATCH_VERSION;
  b.dtype = std::is_same_v<T, double> ? NENYAX_DTYPE_F64 : NENYAX_DTYPE_F32;
  b.memory = NENYAX_MEMORY_CUDA;
  b.device = NENYAX_DEVICE_CUDA;
  b.logp = in.logp;
  b.old_logp = in.old_logp;
  b.ref_logp = in.ref_logp;
  b.entropy = in.entropy;
  b.mask = in.mask;
  b.advantages = in.advantages;
  b.advantages_len = in.advantages_len;
  b.rows = in.rows;
  b.width = in.width;
  b.grad_logp = grad_logp;
  b.grad_entropy = grad_entropy;
  b.stats_device = stats_device;
  b.stream = stream;
  return b;
}

// The loss over a batch; host memory returns its stats (device memory writes stats_device and
// returns zeros).
inline PgStats pg_loss_batch(const nenyax_pg_batch_t& batch, std::string_view config_json) {
  PgStats stats{};
  check(nenyax_pg_loss_batch(&batch, config_json.data(), config_json.size(), &stats));
  return stats;
}
#endif  // NENYAX_PG_BATCH_VERSION

// The GPU the CUDA entry points use (JSON {"ordinal", "name", "compute_capability"}); throws
// NENYAX_STATUS_CUDA_UNAVAILABLE, saying why, when there is none.
inline std::string cuda_device() {
  return detail::string_call([](nenyax_string_t* out) { return nenyax_cuda_device(out); });
}

// The full JSON of a named learner with any overrides applied, e.g. {"learner": "dapo"}.
inline std::string learner_json(std::string_view config_json) {
  return detail::string_call([&](nenyax_string_t* out) {
    return nenyax_learner_json(config_json.data(), config_json.size(), out);
  });
}

// Register a plugin this process implements (docs/plugins-abi.md), e.g. a judge that
// {"type": "plugin", "use": "<name>"} then picks; the descriptor and vtable are copied, and
// user_data must stay valid for the life of the process.
inline void plugin_register(const nenyax_plugin_t& plugin) {
  detail::check(nenyax_plugin_register(&plugin));
}

// Load a plugin library (a shared library exporting nenyax_plugin_entry) and register its plugins.
inline void plugin_load(std::string_view path) {
  detail::check(nenyax_plugin_load(path.data(), path.size()));
}

// The plugins loaded or registered so far: JSON [{"kind", "name", "version", "source"}].
inline std::string plugins_json() {
  return detail::string_call([](nenyax_string_t* out) { return nenyax_plugins_json(out); });
}

// Hold a plugin to its kind's conformance checks (nenyax plugin-check): the JSON report when it
// conforms; throws nenyax::Error (status CONFIG, the failed checks in its message) when not.
inline std::string plugin_check(std::string_view kind, std::string_view name) {
  return detail::string_call([&](nenyax_string_t* out) {
    return nenyax_plugin_check(kind.data(), kind.size(), name.data(), name.size(), out);
  });
}

// Export trajectories (JSONL text) as training rows; options as nenyax_export's ("to", "rows",
// "min_score", "out" required). Returns the summary JSON ({"rows", "trajectories", ...}).
inline std::string export_jsonl(std::string_view jsonl, std::string_view options_json) {
  return detail::string_call([&](nenyax_string_t* out) {
    return nenyax_export(jsonl.data(), jsonl.size(), options_json.data(), options_json.size(),
                         out);
  });
}

// Export the JSONL file named by the option "input"; returns the summary JSON.
inline std::string export_file(std::string_view options_json) {
  return detail::string_call([&](nenyax_string_t* out) {
    return nenyax_export(nullptr, 0, options_json.data(), options_json.size(), out);
  });
}

// REINFORCE++ token advantages (rows x width) into `advantages_out`, and the discounted returns
// into `returns_out` (may be empty). With group_ids (one per row; may be empty) the group mean
// is subtracted before whitening.
inline void reinforce_pp(View<const double> rewards, View<const std::int64_t> group_ids,
                         View<const std::uint8_t> mask, std::size_t rows, std::size_t width,
                         double gamma, View<double> advantages_out, View<double> returns_out = {}) {
  detail::need("rewards", rewards, rows);
  detail::need("group_ids", group_ids, rows, true);
  detail::need("mask", mask, rows * width);
  detail::need("advantages_out", advantages_out, rows * width);
  detail::need("returns_out", returns_out, rows * width, true);
  check(nenyax_reinforce_pp(rewards.data(), detail::ptr_or_null(group_ids), mask.data(), rows,
                            width, gamma, advantages_out.data(), detail::ptr_or_null(returns_out)));
}

// What dpo_loss returns besides the gradient.
struct DpoResult {
  double loss = 0.0;
  std::size_t pairs = 0;  // best-vs-worst pairs found
};

// DPO (sigmoid) on each group's best-vs-worst pair; dL/dlogp into grad_logp (rows x width, 0 for
// rows in no pair). Sequence log-probs are sums over valid tokens.
inline DpoResult dpo_loss(View<const double> rewards, View<const std::int64_t> group_ids,
                          View<const double> logp, View<const double> ref_logp,
                          View<const std::uint8_t> mask, std::size_t rows, std::size_t width,
                          double beta, View<double> grad_logp) {
  detail::need("rewards", rewards, rows);
  detail::need("group_ids", group_ids, rows);
  detail::need("logp", logp, rows * width);
  detail::need("ref_logp", ref_logp, rows * width);
  detail::need("mask", mask, rows * width);
  detail::need("grad_logp", grad_logp, rows * width);
  DpoResult r;
  check(nenyax_dpo_loss(rewards.data(), group_ids.data(), logp.data(), ref_logp.data(),
                        mask.data(), rows, width, beta, &r.loss, grad_logp.data(), &r.pairs));
  return r;
}

}  // namespace nenyax

// Training (Learner, Trainer, train, per-episode policies) lives in its own header.
#include "nenyax_train.hpp"

#endif  // NENYAX_HPP
