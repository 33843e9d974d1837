"""
    Nenyax

Julia binding of Nenyax, one contract for every RL environment, over the C ABI of libnenyax
(`include/nenyax.h`). Contract data (manifests, tasks, trajectories, reports) and options
cross as JSON text: parse it with the JSON package of your choice (JSON3.jl, JSON.jl).

    using Nenyax
    env = Nenyax.load("builtin:arithmetic")
    policy = Nenyax.action_policy(obs_json -> "\\"<answer>42</answer>\\"")   # action as JSON
    trajectories = run(Nenyax.Runner(), env, policy; n = 64)              # Vector{String}
    close(policy); close(env)

The library is `ENV["NENYAX_LIB"]` (a path to libnenyax.so) or, by default, `libnenyax` found
by the system loader (LD_LIBRARY_PATH). The name is read when the package is compiled: set
`NENYAX_LIB` before the first `using Nenyax`, or re-precompile after changing it.
"""
module Nenyax

export Env, Policy, Runner, Session, Sandbox, Recording, Server, Learner, NenyaxError

const libnenyax = get(ENV, "NENYAX_LIB", "libnenyax")

# The #defines of nenyax.h (ffi/tests/bindings.rs checks each value against the header).
# THREAD_SAFE is not used: Julia callbacks are never registered thread-safe (see action_policy).
const VTABLE_VERSION = UInt32(1)
const HEADER_VERSION = "0.1.0"
const HEADER_VERSION_MAJOR = 0
const HEADER_VERSION_MINOR = 1
const HEADER_VERSION_PATCH = 0
const HEADER_VERSION_NUMBER = UInt32(1000)   # MAJOR*1000000 + MINOR*1000 + PATCH
const THREAD_SAFE = UInt32(1)
const MAX_THREADS = 1024
const PG_STATS_LEN = 10                      # f64 values a CUDA loss writes to stats_device
const PG_BAD_LOGP = 1                        # bits of the last stats value: a NaN in ...
const PG_BAD_OLD_LOGP = 2
const PG_BAD_REF_LOGP = 4
const PG_BAD_ENTROPY = 8
const PG_BAD_ADVANTAGES = 16
# Library plugins (docs/plugins-abi.md): the descriptor's, judge and learner vtables' versions, and the
# flag of plugins whose callbacks may run concurrently.
const PLUGIN_ABI_VERSION = UInt32(1)
const JUDGE_VTABLE_VERSION = UInt32(1)
const LEARNER_PLUGIN_VTABLE_VERSION = UInt32(1)
const TELEMETRY_VTABLE_VERSION = UInt32(1)
const HUB_VTABLE_VERSION = UInt32(1)
const DRIVER_VTABLE_VERSION = UInt32(1)
const SANDBOX_VTABLE_VERSION = UInt32(1)
# A sandbox plugin's isolation level (nenyax_sandbox_vtable_t.level).
const ISOLATION_PROCESS = UInt32(1)
const ISOLATION_JAIL = UInt32(2)
const ISOLATION_CONTAINER = UInt32(3)
const ISOLATION_MICROVM = UInt32(4)
const PLUGIN_THREAD_SAFE = UInt32(1)
# nenyax_pg_batch_t (pg_loss_batch; in headers from the batch struct on).
const PG_BATCH_VERSION = UInt32(1)
const DTYPE_F32 = UInt32(1)
const DTYPE_F64 = UInt32(2)
const MEMORY_HOST = UInt32(0)
const MEMORY_CUDA = UInt32(1)
const DEVICE_CPU = UInt32(0)
const DEVICE_CUDA = UInt32(1)

# nenyax_status_t: stable values, never renumbered.
const STATUS_OK = Int32(0)
const STATUS_INVALID_ARGUMENT = Int32(1)
const STATUS_INVALID_URI = Int32(2)
const STATUS_UNKNOWN_SCHEME = Int32(3)
const STATUS_DRIVER_UNAVAILABLE = Int32(4)
const STATUS_UNKNOWN_TARGET = Int32(5)
const STATUS_UNKNOWN_PARAMETER = Int32(6)
const STATUS_INVALID_PARAMETER = Int32(7)
const STATUS_UNSUPPORTED = Int32(8)
const STATUS_POLICY_MISMATCH = Int32(9)
const STATUS_POLICY = Int32(10)
const STATUS_INVALID_ACTION = Int32(11)
const STATUS_ENVIRONMENT = Int32(12)
const STATUS_NON_FINITE_SCORE = Int32(13)
const STATUS_JUDGE = Int32(14)
const STATUS_DEFINE = Int32(15)
const STATUS_ENDPOINT = Int32(16)
const STATUS_PROTOCOL = Int32(17)
const STATUS_CONFIG = Int32(18)
const STATUS_IO = Int32(19)
const STATUS_CALLBACK = Int32(20)
const STATUS_PANIC = Int32(21)
const STATUS_CUDA_UNAVAILABLE = Int32(22)
const STATUS_CUDA = Int32(23)
const STATUS_CAPACITY = Int32(24)
const STATUS_TRAINING = Int32(25)

const STATUS_NAMES = ("OK", "InvalidArgument", "InvalidURI", "UnknownScheme",
    "DriverUnavailable", "UnknownTarget", "UnknownParameter", "InvalidParameter",
    "Unsupported", "PolicyMismatch", "Policy", "InvalidAction", "Environment",
    "NonFiniteScore", "Judge", "Define", "Endpoint", "Protocol", "Config", "IO", "Callback",
    "Panic", "CudaUnavailable", "Cuda", "Capacity", "Training")

status_name(s::Integer) = 0 <= s < length(STATUS_NAMES) ? STATUS_NAMES[s+1] : "Status($s)"

# ---------------------------------------------------------------------------------------------
# errors

"""
    NenyaxError(status, message)

A failure reported by the library: `status` is one of the `STATUS_*` constants (mirroring
`nenyax_status_t`), `message` the library's text ("UnknownParameter: ...").
"""
struct NenyaxError <: Exception
    status::Int32
    message::String
end

Base.showerror(io::IO, e::NenyaxError) =
    print(io, "NenyaxError(", status_name(e.status), "): ", e.message)

# Throw a returned nenyax_error_t * as a NenyaxError, freeing the C object first.
function check_error(err::Ptr{Cvoid})
    err == C_NULL && return nothing
    status = ccall((:nenyax_error_code, libnenyax), Int32, (Ptr{Cvoid},), err)
    len = Ref{Csize_t}(0)
    msg = ccall((:nenyax_error_message, libnenyax), Ptr{UInt8}, (Ptr{Cvoid}, Ref{Csize_t}),
        err, len)
    text = unsafe_string(msg, len[])
    ccall((:nenyax_error_free, libnenyax), Cvoid, (Ptr{Cvoid},), err)
    throw(NenyaxError(status, text))
end

"""
    @check ccall(...)

Run a library call that returns `nenyax_error_t *` and throw a `NenyaxError` when it fails.
"""
macro check(ex)
    return :(check_error($(esc(ex))))
end

closed_error(what) = NenyaxError(STATUS_INVALID_ARGUMENT, "use of a closed $what")

# ---------------------------------------------------------------------------------------------
# strings

# nenyax_string_t
struct NenyaxString
    ptr::Ptr{UInt8}
    len::Csize_t
end

# Call f(out::Ref{NenyaxString}) (which returns an error pointer); copy and free the string.
function string_call(f)
    out = Ref(NenyaxString(Ptr{UInt8}(C_NULL), 0))
    @check f(out)
    s = out[]
    text = s.ptr == C_NULL ? "" : unsafe_string(s.ptr, s.len)
    ccall((:nenyax_string_free, libnenyax), Cvoid, (Ref{NenyaxString},), out)
    return text
end

# Optional JSON options: an empty string passes NULL (the defaults). The caller keeps `s`
# alive across the call with GC.@preserve.
optptr(s::String) = isempty(s) ? Ptr{UInt8}(C_NULL) : pointer(s)

version() = unsafe_string(ccall((:nenyax_version, libnenyax), Ptr{UInt8}, ()))
version_number() = ccall((:nenyax_version_number, libnenyax), UInt32, ())
protocol_version() = unsafe_string(ccall((:nenyax_protocol_version, libnenyax), Ptr{UInt8}, ()))

# ---------------------------------------------------------------------------------------------
# handles: each owns one C handle; close is idempotent, a finalizer is the safety net.

"""
    Env

A loaded environment (`load`, `define`, `with_judge`). Free it with `close(env)`.
"""
mutable struct Env
    ptr::Ptr{Cvoid}
    # For Julia-defined environments (define_tasks, define_stateful): the Ref holding the
    # functions, whose address is the callbacks' user_data (as for Policy's root).
    root::Any
    function Env(ptr::Ptr{Cvoid}, root = nothing)
        obj = new(ptr, root)
        finalizer(close, obj)
        return obj
    end
end

"""
    Policy

A policy: a Julia function (`action_policy`, `chat_policy`), an endpoint (`endpoint_policy`),
or an environment's own (`reference_policy`, `null_policy`). Free it with `close(policy)`.
"""
mutable struct Policy
    ptr::Ptr{Cvoid}
    # For Julia policies: the Ref holding the Julia function. Its address is the callback's
    # user_data, so it must stay alive (and unmoved; Julia's GC does not move objects) as long
    # as the C policy exists. Keeping it in this field does that; nothing else owns it.
    root::Any
    function Policy(ptr::Ptr{Cvoid}, root = nothing)
        obj = new(ptr, root)
        finalizer(close, obj)
        return obj
    end
end

"""
    Runner(threads = 0)

A pool of `threads` worker threads (0: one per core, or `NENYAX_NUM_THREADS`) for batches.
"""
mutable struct Runner
    ptr::Ptr{Cvoid}
    function Runner(threads::Integer = 0)
        threads >= 0 || throw(NenyaxError(STATUS_INVALID_ARGUMENT, "threads must be >= 0"))
        out = Ref{Ptr{Cvoid}}(C_NULL)
        @check ccall((:nenyax_runner_new, libnenyax), Ptr{Cvoid}, (Csize_t, Ref{Ptr{Cvoid}}),
            threads, out)
        obj = new(out[])
        finalizer(close, obj)
        return obj
    end
end

function Base.close(env::Env)
    if env.ptr != C_NULL
        ccall((:nenyax_env_free, libnenyax), Cvoid, (Ptr{Cvoid},), env.ptr)
        env.ptr = C_NULL
        env.root = nothing
    end
    return nothing
end

function Base.close(policy::Policy)
    if policy.ptr != C_NULL
        ccall((:nenyax_policy_free, libnenyax), Cvoid, (Ptr{Cvoid},), policy.ptr)
        policy.ptr = C_NULL
        policy.root = nothing
    end
    return nothing
end

function Base.close(runner::Runner)
    if runner.ptr != C_NULL
        ccall((:nenyax_runner_free, libnenyax), Cvoid, (Ptr{Cvoid},), runner.ptr)
        runner.ptr = C_NULL
    end
    return nothing
end

handle(x::Env) = x.ptr == C_NULL ? throw(closed_error("Env")) : x.ptr
handle(x::Policy) = x.ptr == C_NULL ? throw(closed_error("Policy")) : x.ptr
handle(x::Runner) = x.ptr == C_NULL ? throw(closed_error("Runner")) : x.ptr

threads(runner::Runner) =
    GC.@preserve runner Int(ccall((:nenyax_runner_threads, libnenyax), Csize_t, (Ptr{Cvoid},),
        runner.ptr))

# ---------------------------------------------------------------------------------------------
# environments

"""
    load(uri) -> Env

Load an environment by URI, e.g. `"builtin:arithmetic?size=100"`.
"""
function load(uri::AbstractString)
    u = String(uri)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @check ccall((:nenyax_env_load, libnenyax), Ptr{Cvoid}, (Ptr{UInt8}, Csize_t, Ref{Ptr{Cvoid}}),
        u, sizeof(u), out)
    return Env(out[])
end

"""
    define(spec_json) -> Env

Define an environment from a JSON spec (`name`, `description`, `tasks` or `tasks_file`,
`judge`), e.g. `{"name": "caps", "tasks": [{"prompt": "Capital of Kenya?", "answer": "Nairobi"}]}`.
"""
function define(spec_json::AbstractString)
    s = String(spec_json)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @check ccall((:nenyax_env_define, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t, Ref{Ptr{Cvoid}}), s, sizeof(s), out)
    return Env(out[])
end

"The manifest, as JSON."
function manifest(env::Env)
    GC.@preserve env begin
        string_call(out -> ccall((:nenyax_env_manifest, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ref{NenyaxString}), handle(env), out))
    end
end

"Up to `limit` tasks (0: all), as a JSON array of TaskRef."
function tasks(env::Env; limit::Integer = 0)
    GC.@preserve env begin
        string_call(out -> ccall((:nenyax_env_tasks, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Csize_t, Ref{NenyaxString}), handle(env), limit, out))
    end
end

function env_policy(env::Env, fn::Symbol)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve env begin
        if fn === :reference
            @check ccall((:nenyax_env_reference_policy, libnenyax), Ptr{Cvoid},
                (Ptr{Cvoid}, Ref{Ptr{Cvoid}}), handle(env), out)
        else
            @check ccall((:nenyax_env_null_policy, libnenyax), Ptr{Cvoid},
                (Ptr{Cvoid}, Ref{Ptr{Cvoid}}), handle(env), out)
        end
    end
    return Policy(out[], env.root)   # a Julia-defined env's reference policy uses its callbacks
end

"The environment's reference (oracle) policy; `STATUS_UNSUPPORTED` when it has none."
reference_policy(env::Env) = env_policy(env, :reference)

"The environment's null policy; `STATUS_UNSUPPORTED` when it has none."
null_policy(env::Env) = env_policy(env, :null)

"""
    with_judge(env, judge_json) -> Env

A new environment whose episodes are re-judged by the judge the JSON spec describes, e.g.
`{"type": "numeric", "extract": "last_number"}`; `env` is unchanged.
"""
function with_judge(env::Env, judge_json::AbstractString)
    j = String(judge_json)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve env begin
        @check ccall((:nenyax_env_with_judge, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{Ptr{Cvoid}}), handle(env), j, sizeof(j), out)
    end
    return Env(out[], env.root)
end

"""
    rollout(env, policy; options = "") -> String

Play one episode on the calling thread; the Trajectory as JSON. Options (JSON):
`{"task": TaskRef, "seed": int, "max_steps": int}`. A failed episode is not an exception: the
trajectory carries it in `"error"`.
"""
function rollout(env::Env, policy::Policy; options::AbstractString = "")
    o = String(options)
    GC.@preserve env policy o begin
        string_call(out -> ccall((:nenyax_env_rollout, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{NenyaxString}),
            handle(env), handle(policy), optptr(o), sizeof(o), out))
    end
end

"""
    check(env; options = "") -> String

Conformance report (JSON `{env_id, mode, tier, checks}`) of a loaded environment. Options:
`{"samples": 8, "threads": 2}`. The fresh instance `reproducible_fresh` needs is rebuilt the
way the handle was made, so the tier matches `check_uri`'s.
"""
function check(env::Env; options::AbstractString = "")
    o = String(options)
    GC.@preserve env o begin
        string_call(out -> ccall((:nenyax_env_check, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{NenyaxString}),
            handle(env), optptr(o), sizeof(o), out))
    end
end

"Load `uri` and run the full conformance suite; the report as JSON."
function check_uri(uri::AbstractString; options::AbstractString = "")
    u, o = String(uri), String(options)
    GC.@preserve u o begin
        string_call(out -> ccall((:nenyax_check_uri, libnenyax), Ptr{Cvoid},
            (Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ref{NenyaxString}),
            u, sizeof(u), optptr(o), sizeof(o), out))
    end
end

# ---------------------------------------------------------------------------------------------
# policies from Julia functions

# nenyax_policy_vtable_t: {uint32_t version; act; chat} (Julia lays it out as C does).
struct PolicyVtable
    version::UInt32
    act::Ptr{Cvoid}
    chat::Ptr{Cvoid}
end

# reply_set(reply, text): copy a Julia string into a callback's reply slot.
reply_set(reply::Ptr{Cvoid}, s::String) =
    ccall((:nenyax_reply_set, libnenyax), Bool, (Ptr{Cvoid}, Ptr{UInt8}, Csize_t),
        reply, s, sizeof(s))

# The trampolines: C calls them with the Ref holding the Julia function as user_data. An
# exception never unwinds into C: it becomes the callback's error message (non-zero return),
# which fails that episode only.
function act_trampoline(user_data::Ptr{Cvoid}, obs::Ptr{UInt8}, len::Csize_t,
        reply::Ptr{Cvoid})::Int32
    try
        f = (unsafe_pointer_to_objref(user_data)::Base.RefValue{Any})[]
        reply_set(reply, String(f(unsafe_string(obs, len))))
        return Int32(0)
    catch err
        reply_set(reply, sprint(showerror, err))
        return Int32(1)
    end
end

function chat_trampoline(user_data::Ptr{Cvoid}, messages::Ptr{UInt8}, len::Csize_t,
        reply::Ptr{Cvoid})::Int32
    try
        f = (unsafe_pointer_to_objref(user_data)::Base.RefValue{Any})[]
        reply_set(reply, String(f(unsafe_string(messages, len))))
        return Int32(0)
    catch err
        reply_set(reply, sprint(showerror, err))
        return Int32(1)
    end
end

# The batch sink: user_data is the Vector{String} being filled.
function sink_trampoline(user_data::Ptr{Cvoid}, index::Csize_t, json::Ptr{UInt8},
        len::Csize_t)::Int32
    try
        push!(unsafe_pointer_to_objref(user_data)::Vector{String}, unsafe_string(json, len))
        return Int32(0)
    catch
        return Int32(1)
    end
end

# C function pointers, made at load time (@cfunction pointers do not survive precompilation).
const ACT_FN = Ref{Ptr{Cvoid}}(C_NULL)
const CHAT_FN = Ref{Ptr{Cvoid}}(C_NULL)
const SINK_FN = Ref{Ptr{Cvoid}}(C_NULL)

function __init__()
    ACT_FN[] = @cfunction(act_trampoline, Int32, (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}))
    CHAT_FN[] = @cfunction(chat_trampoline, Int32, (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}))
    SINK_FN[] = @cfunction(sink_trampoline, Int32, (Ptr{Cvoid}, Csize_t, Ptr{UInt8}, Csize_t))
    init_env_callbacks()
    init_train_callbacks()
    # 0.x: a new minor version may change the ABI, so MAJOR.MINOR must match.
    if version_number() ÷ 1000 != HEADER_VERSION_NUMBER ÷ 1000
        error("Nenyax.jl speaks the C ABI $HEADER_VERSION but $libnenyax is $(version())")
    end
    return nothing
end

function host_policy(f, chat::Bool)
    root = Ref{Any}(f)   # a mutable box: its address is stable while it is alive
    vt = Ref(PolicyVtable(VTABLE_VERSION, chat ? C_NULL : ACT_FN[], chat ? CHAT_FN[] : C_NULL))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    # free_user_data is NULL: Julia's GC owns `root`, which lives in the Policy's `root`
    # field until close(policy) frees the C policy. A no-op @cfunction would do the same
    # nothing, but the library may call free_user_data on whichever thread drops the last
    # handle; NULL guarantees no Julia code ever runs there. flags is 0 (not
    # NENYAX_THREAD_SAFE): the library then calls `f` only on the thread that called into it
    # (rollout, run, check), so Julia code is never entered from a foreign thread.
    GC.@preserve root begin
        @check ccall((:nenyax_policy_new, libnenyax), Ptr{Cvoid},
            (Ref{PolicyVtable}, Ptr{Cvoid}, Ptr{Cvoid}, UInt32, Ref{Ptr{Cvoid}}),
            vt, pointer_from_objref(root), C_NULL, UInt32(0), out)
    end
    return Policy(out[], root)
end

"""
    action_policy(f) -> Policy

A policy from a Julia function `f(observation_json::String) -> action_json::String`, e.g.
`obs -> "\\"<answer>4</answer>\\""`. An exception thrown by `f` fails that episode only, with
its message in the trajectory's `"error"`.

`f` runs only on the thread (and task) that called `rollout`/`run`/`check`, one call at a
time, while the environments step in parallel on the runner's threads. Keep it free of
yields (`sleep`, `wait`, channel or network I/O): it runs inside a ccall.
"""
action_policy(f) = host_policy(f, false)

"""
    chat_policy(f) -> Policy

A chat policy from `f(messages_json::String) -> reply_text::String` (plain text, not JSON).
"""
chat_policy(f) = host_policy(f, true)

"""
    endpoint_policy(spec_json) -> Policy

An OpenAI-compatible endpoint: `{"base_url", "model", "api_key_env", "timeout_s", "retries",
"backoff_s", "params"}`.
"""
function endpoint_policy(spec_json::AbstractString)
    s = String(spec_json)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @check ccall((:nenyax_policy_endpoint, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t, Ref{Ptr{Cvoid}}), s, sizeof(s), out)
    return Policy(out[])
end

# ---------------------------------------------------------------------------------------------
# batches

"""
    run(runner, env, policy; n = 10, seed = 0, options = "") -> Vector{String}

Play a batch in parallel; every Trajectory as JSON, in job order. `options` (JSON
`{"n", "seed", "max_steps", "tasks"}`) replaces `n` and `seed` when given.
"""
function Base.run(runner::Runner, env::Env, policy::Policy; n::Integer = 10,
        seed::Integer = 0, options::AbstractString = "")
    o = isempty(options) ? "{\"n\":$(Int(n)),\"seed\":$(Int(seed))}" : String(options)
    trajectories = String[]
    GC.@preserve runner env policy o trajectories begin
        @check ccall((:nenyax_runner_run, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}, Ptr{Cvoid},
                Ptr{NenyaxString}),
            handle(runner), handle(env), handle(policy), o, sizeof(o), SINK_FN[],
            pointer_from_objref(trajectories), C_NULL)
    end
    return trajectories
end

# ---------------------------------------------------------------------------------------------
# sessions

"""
    Session

A live step-mode episode (`session(env)`); use it from one task at a time. Free it with
`close(session)`.
"""
mutable struct Session
    ptr::Ptr{Cvoid}
    root::Any   # the callbacks of a Julia-defined environment, kept alive while the session is
    function Session(ptr::Ptr{Cvoid}, root = nothing)
        obj = new(ptr, root)
        finalizer(close, obj)
        return obj
    end
end

function Base.close(s::Session)
    if s.ptr != C_NULL
        ccall((:nenyax_session_free, libnenyax), Cvoid, (Ptr{Cvoid},), s.ptr)
        s.ptr = C_NULL
        s.root = nothing
    end
    return nothing
end
handle(x::Session) = x.ptr == C_NULL ? throw(closed_error("Session")) : x.ptr

"""
    session(env; options = "") -> Session

Open a step-mode episode. Options (JSON): `{"task": TaskRef, "seed": int}`. Rollout- and
task-mode environments give `STATUS_UNSUPPORTED`.
"""
function session(env::Env; options::AbstractString = "")
    o = String(options)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve env o begin
        @check ccall((:nenyax_session_open, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{Ptr{Cvoid}}), handle(env), optptr(o), sizeof(o), out)
    end
    return Session(out[], env.root)
end

"The current observation, as JSON."
observation(s::Session) = GC.@preserve s string_call(out -> ccall((:nenyax_session_observation,
    libnenyax), Ptr{Cvoid}, (Ptr{Cvoid}, Ref{NenyaxString}), handle(s), out))

"Apply an action (JSON, e.g. `\"\\\"<answer>4</answer>\\\"\"`); the Step as JSON."
function act(s::Session, action_json::AbstractString)
    a = String(action_json)
    GC.@preserve s a string_call(out -> ccall((:nenyax_session_act, libnenyax), Ptr{Cvoid},
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{NenyaxString}), handle(s), a, sizeof(a), out))
end

"Whether the episode terminated or was truncated (true once closed)."
done(s::Session) = s.ptr == C_NULL ||
    GC.@preserve s ccall((:nenyax_session_done, libnenyax), Bool, (Ptr{Cvoid},), s.ptr)

"The episode's Judgment so far, as JSON."
judgment(s::Session) = GC.@preserve s string_call(out -> ccall((:nenyax_session_judgment,
    libnenyax), Ptr{Cvoid}, (Ptr{Cvoid}, Ref{NenyaxString}), handle(s), out))

# ---------------------------------------------------------------------------------------------
# environments from Julia functions (registered without NENYAX_THREAD_SAFE, like policies: the
# library calls them only on the thread that called rollout/run/check/act)

# nenyax_task_vtable_t and nenyax_state_vtable_t.
struct TaskVtable
    version::UInt32
    score::Ptr{Cvoid}
    reference::Ptr{Cvoid}
end

struct StateVtable
    version::UInt32
    reset::Ptr{Cvoid}
    observe::Ptr{Cvoid}
    step::Ptr{Cvoid}
end

# Run `body` for a callback; an exception becomes its error message in `reply` (non-zero).
function guarded(body, reply::Ptr{Cvoid})::Int32
    try
        return body()
    catch err
        reply_set(reply, sprint(showerror, err))
        return Int32(1)
    end
end

callbacks(user_data::Ptr{Cvoid}) = (unsafe_pointer_to_objref(user_data)::Base.RefValue{Any})[]

score_trampoline(ud::Ptr{Cvoid}, task::Ptr{UInt8}, tlen::Csize_t, reply::Ptr{UInt8},
        rlen::Csize_t, score_out::Ptr{Float64}, err::Ptr{Cvoid})::Int32 = guarded(err) do
    s = Float64(callbacks(ud).score(unsafe_string(task, tlen), unsafe_string(reply, rlen)))
    unsafe_store!(score_out, s)
    Int32(0)
end

reference_trampoline(ud::Ptr{Cvoid}, task::Ptr{UInt8}, len::Csize_t,
        reply::Ptr{Cvoid})::Int32 = guarded(reply) do
    reply_set(reply, String(callbacks(ud).reference(unsafe_string(task, len)))) ? Int32(0) : Int32(2)
end

reset_trampoline(ud::Ptr{Cvoid}, seed::Int64, state::Ptr{Cvoid})::Int32 = guarded(state) do
    reply_set(state, String(callbacks(ud).reset(seed))) ? Int32(0) : Int32(2)
end

observe_trampoline(ud::Ptr{Cvoid}, state::Ptr{UInt8}, len::Csize_t,
        obs::Ptr{Cvoid})::Int32 = guarded(obs) do
    reply_set(obs, String(callbacks(ud).observe(unsafe_string(state, len)))) ? Int32(0) : Int32(2)
end

step_trampoline(ud::Ptr{Cvoid}, state::Ptr{UInt8}, slen::Csize_t, action::Ptr{UInt8},
        alen::Csize_t, next::Ptr{Cvoid}, reward::Ptr{Float64}, done::Ptr{Bool})::Int32 =
    guarded(next) do
        s, r, d = callbacks(ud).step(unsafe_string(state, slen), unsafe_string(action, alen))
        reply_set(next, String(s)) || return Int32(2)
        unsafe_store!(reward, Float64(r))
        unsafe_store!(done, Bool(d))
        Int32(0)
    end

const SCORE_FN = Ref{Ptr{Cvoid}}(C_NULL)
const REFERENCE_FN = Ref{Ptr{Cvoid}}(C_NULL)
const RESET_FN = Ref{Ptr{Cvoid}}(C_NULL)
const OBSERVE_FN = Ref{Ptr{Cvoid}}(C_NULL)
const STEP_FN = Ref{Ptr{Cvoid}}(C_NULL)

function init_env_callbacks()
    SCORE_FN[] = @cfunction(score_trampoline, Int32,
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Float64}, Ptr{Cvoid}))
    REFERENCE_FN[] = @cfunction(reference_trampoline, Int32,
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}))
    RESET_FN[] = @cfunction(reset_trampoline, Int32, (Ptr{Cvoid}, Int64, Ptr{Cvoid}))
    OBSERVE_FN[] = @cfunction(observe_trampoline, Int32,
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}))
    STEP_FN[] = @cfunction(step_trampoline, Int32,
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Cvoid}, Ptr{Float64}, Ptr{Bool}))
    return nothing
end

"""
    define_tasks(name, tasks_json; score, reference = nothing) -> Env

A one-turn environment over task rows (a JSON array of objects with a string `"prompt"`),
scored by `score(task_json, reply) -> Float64`; `reference(task_json) -> String` (optional)
is the oracle's reply. An exception fails that episode only.
"""
function define_tasks(name::AbstractString, tasks_json::AbstractString; score,
        reference = nothing)
    n, t = String(name), String(tasks_json)
    root = Ref{Any}((score = score, reference = reference))
    vt = Ref(TaskVtable(VTABLE_VERSION, SCORE_FN[], reference === nothing ? C_NULL : REFERENCE_FN[]))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve n t root begin
        @check ccall((:nenyax_env_define_tasks, libnenyax), Ptr{Cvoid},
            (Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ref{TaskVtable}, Ptr{Cvoid}, Ptr{Cvoid},
                UInt32, Ref{Ptr{Cvoid}}),
            n, sizeof(n), t, sizeof(t), vt, pointer_from_objref(root), C_NULL, UInt32(0), out)
    end
    return Env(out[], root)
end

"""
    define_stateful(name; reset, observe, step, max_steps) -> Env

A multi-turn environment over a JSON state: `reset(seed) -> state_json`,
`observe(state_json) -> observation_json`, `step(state_json, action_json) -> (state_json,
reward, done)`; episodes end when `step` says done or after `max_steps` steps.
"""
function define_stateful(name::AbstractString; reset, observe, step, max_steps::Integer)
    n = String(name)
    root = Ref{Any}((reset = reset, observe = observe, step = step))
    vt = Ref(StateVtable(VTABLE_VERSION, RESET_FN[], OBSERVE_FN[], STEP_FN[]))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve n root begin
        @check ccall((:nenyax_env_define_stateful, libnenyax), Ptr{Cvoid},
            (Ptr{UInt8}, Csize_t, Ref{StateVtable}, Ptr{Cvoid}, Ptr{Cvoid}, UInt32, Csize_t,
                Ref{Ptr{Cvoid}}),
            n, sizeof(n), vt, pointer_from_objref(root), C_NULL, UInt32(0), max_steps, out)
    end
    return Env(out[], root)
end

# ---------------------------------------------------------------------------------------------
# sandboxes, recordings, servers

"""
    Sandbox(options = "")

A sandbox (options JSON: `{"backend": "process"|"jail"|"container", "cpu_s", "memory_bytes", "wall_s",
"network", "env", ...}`); `exec`, `write_file`, `read_file`, `list_dir`, `fork`, `close`
(named so as not to shadow `Base.get`).
"""
mutable struct Sandbox
    ptr::Ptr{Cvoid}
    function Sandbox(ptr::Ptr{Cvoid})
        obj = new(ptr)
        finalizer(close, obj)
        return obj
    end
end

function Sandbox(options::AbstractString = "")
    o = String(options)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve o begin
        @check ccall((:nenyax_sandbox_new, libnenyax), Ptr{Cvoid},
            (Ptr{UInt8}, Csize_t, Ref{Ptr{Cvoid}}), optptr(o), sizeof(o), out)
    end
    return Sandbox(out[])
end

function Base.close(s::Sandbox)
    if s.ptr != C_NULL
        ccall((:nenyax_sandbox_free, libnenyax), Cvoid, (Ptr{Cvoid},), s.ptr)
        s.ptr = C_NULL
    end
    return nothing
end
handle(x::Sandbox) = x.ptr == C_NULL ? throw(closed_error("Sandbox")) : x.ptr

"Run a command (`{\"argv\": [..]}` or `{\"shell\": \"...\"}`, ...); the result as JSON."
function exec(s::Sandbox, exec_json::AbstractString)
    e = String(exec_json)
    GC.@preserve s e string_call(out -> ccall((:nenyax_sandbox_exec, libnenyax), Ptr{Cvoid},
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{NenyaxString}), handle(s), e, sizeof(e), out))
end

"Write `data` to `path` in the sandbox (parents created) with Unix mode `mode`."
function write_file(s::Sandbox, path::AbstractString, data::Vector{UInt8}; mode::Integer = 0o644)
    p = String(path)
    GC.@preserve s p data begin
        @check ccall((:nenyax_sandbox_put, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, UInt32),
            handle(s), p, sizeof(p), data, length(data), mode)
    end
    return nothing
end
write_file(s::Sandbox, path::AbstractString, data::AbstractString; mode::Integer = 0o644) =
    write_file(s, path, Vector{UInt8}(codeunits(String(data))); mode = mode)

"The contents of a sandbox file (a String of its bytes)."
function read_file(s::Sandbox, path::AbstractString)
    p = String(path)
    GC.@preserve s p string_call(out -> ccall((:nenyax_sandbox_get, libnenyax), Ptr{Cvoid},
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{NenyaxString}), handle(s), p, sizeof(p), out))
end

"A sandbox directory as JSON `[{\"name\", \"dir\", \"size\"}]`."
function list_dir(s::Sandbox, path::AbstractString = ".")
    p = String(path)
    GC.@preserve s p string_call(out -> ccall((:nenyax_sandbox_list, libnenyax), Ptr{Cvoid},
        (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{NenyaxString}), handle(s), p, sizeof(p), out))
end

"A new sandbox with the same configuration and a copy of the files."
function fork(s::Sandbox)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve s begin
        @check ccall((:nenyax_sandbox_fork, libnenyax), Ptr{Cvoid}, (Ptr{Cvoid}, Ref{Ptr{Cvoid}}),
            handle(s), out)
    end
    return Sandbox(out[])
end

"""
    Recording(policy)

A recording on the model server answered by `policy`. The server calls it from its own
threads, so from Julia only an `endpoint_policy` fits (Julia policies are not thread-safe).
"""
mutable struct Recording
    ptr::Ptr{Cvoid}
    policy::Policy
    function Recording(policy::Policy)
        out = Ref{Ptr{Cvoid}}(C_NULL)
        GC.@preserve policy begin
            @check ccall((:nenyax_recording_new, libnenyax), Ptr{Cvoid},
                (Ptr{Cvoid}, Ref{Ptr{Cvoid}}), handle(policy), out)
        end
        obj = new(out[], policy)
        finalizer(close, obj)
        return obj
    end
end

function Base.close(r::Recording)
    if r.ptr != C_NULL
        ccall((:nenyax_recording_free, libnenyax), Cvoid, (Ptr{Cvoid},), r.ptr)
        r.ptr = C_NULL
    end
    return nothing
end
handle(x::Recording) = x.ptr == C_NULL ? throw(closed_error("Recording")) : x.ptr

"The recording's OpenAI base URL."
base_url(r::Recording) = GC.@preserve r string_call(out -> ccall((:nenyax_recording_base_url,
    libnenyax), Ptr{Cvoid}, (Ptr{Cvoid}, Ref{NenyaxString}), handle(r), out))

"The calls so far (JSON array of ModelCall); `drain = true` removes them."
calls(r::Recording; drain::Bool = false) = GC.@preserve r string_call(out -> ccall(
    (:nenyax_recording_calls, libnenyax), Ptr{Cvoid}, (Ptr{Cvoid}, Int32, Ref{NenyaxString}),
    handle(r), Int32(drain), out))

"A running OpenEnv server (`serve`); `close(server)` stops it."
mutable struct Server
    ptr::Ptr{Cvoid}
    function Server(ptr::Ptr{Cvoid})
        obj = new(ptr)
        finalizer(close, obj)
        return obj
    end
end

"""
    serve(env; options = "") -> Server

Serve a step-mode environment as an OpenEnv server (options JSON: `{"host", "port" (0: any
free port), "max_sessions", ...}`); `url(server)`, `close(server)` stops it. The server calls
the environment from its own threads, so a Julia-defined environment cannot be served.
"""
function serve(env::Env; options::AbstractString = "")
    o = String(options)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve env o begin
        @check ccall((:nenyax_serve_start, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{Ptr{Cvoid}}), handle(env), optptr(o), sizeof(o), out)
    end
    return Server(out[])
end

function Base.close(s::Server)
    if s.ptr != C_NULL
        ccall((:nenyax_server_stop, libnenyax), Cvoid, (Ptr{Cvoid},), s.ptr)
        s.ptr = C_NULL
    end
    return nothing
end
handle(x::Server) = x.ptr == C_NULL ? throw(closed_error("Server")) : x.ptr

"The server's base URL, e.g. `http://127.0.0.1:8000`."
url(s::Server) = GC.@preserve s string_call(out -> ccall((:nenyax_server_url, libnenyax),
    Ptr{Cvoid}, (Ptr{Cvoid}, Ref{NenyaxString}), handle(s), out))

# ---------------------------------------------------------------------------------------------
# learners: host buffers are Arrays in the C layout, rows x width row-major, i.e. a Julia
# Matrix of size (width, rows) or a Vector of rows*width values.

"nenyax_pg_stats_t: what a policy-loss call returns besides the gradients."
struct PgStats
    loss::Float64
    loss_pg::Float64
    kl::Float64
    entropy::Float64
    clip_fraction::Float64
    approx_kl::Float64
    mean_ratio::Float64
    tokens::Float64
    rows::Float64
end

function need_len(what, a, n; optional = false)
    (optional && (a === nothing || isempty(a))) && return nothing
    length(a) == n || throw(NenyaxError(STATUS_INVALID_ARGUMENT,
        "$what has $(length(a)) values, expected $n"))
    return nothing
end

ptr_or_null(::Type{T}, a) where {T} = a === nothing || isempty(a) ? Ptr{T}(C_NULL) : pointer(a)

"""
    advantages(rewards::Vector{Float64}, group_ids::Vector{Int64}; options = "") -> Vector{Float64}

One advantage per sequence; options JSON `{"estimator": "grpo_verl" | "rloo" | ..., "eps",
"singleton", "std_scope"}`.
"""
function advantages(rewards::Vector{Float64}, group_ids::Vector{Int64}; options::AbstractString = "")
    need_len("group_ids", group_ids, length(rewards))
    o = String(options)
    out = Vector{Float64}(undef, length(rewards))
    GC.@preserve rewards group_ids o out begin
        @check ccall((:nenyax_advantages, libnenyax), Ptr{Cvoid},
            (Ptr{Float64}, Ptr{Int64}, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Float64}),
            rewards, group_ids, length(rewards), optptr(o), sizeof(o), out)
    end
    return out
end

"DAPO's dynamic-sampling filter: `false` for rows whose group has all-equal rewards."
function dapo_keep(rewards::Vector{Float64}, group_ids::Vector{Int64})
    need_len("group_ids", group_ids, length(rewards))
    keep = Vector{UInt8}(undef, length(rewards))
    GC.@preserve rewards group_ids keep begin
        @check ccall((:nenyax_dapo_keep, libnenyax), Ptr{Cvoid},
            (Ptr{Float64}, Ptr{Int64}, Csize_t, Ptr{UInt8}), rewards, group_ids, length(rewards), keep)
    end
    return keep .!= 0
end

"""
    pg_loss(logp, old_logp, mask, advantages; rows, width, config, ref_logp = nothing,
            entropy = nothing, cuda_host = false) -> (stats::PgStats, grad_logp, grad_entropy)

A policy-gradient loss over `Array{Float64}` or `Array{Float32}` buffers (`mask::Array{UInt8}`).
`cuda_host = true` (Float32 only) runs the fused GPU kernel from host memory.
"""
function pg_loss(logp::Array{T}, old_logp::Array{T}, mask::Array{UInt8}, advantages::Array{T};
        rows::Integer, width::Integer, config::AbstractString, ref_logp = nothing,
        entropy = nothing, cuda_host::Bool = false) where {T <: Union{Float32, Float64}}
    n = rows * width
    need_len("logp", logp, n); need_len("old_logp", old_logp, n); need_len("mask", mask, n)
    need_len("ref_logp", ref_logp, n; optional = true)
    need_len("entropy", entropy, n; optional = true)
    length(advantages) in (rows, n) || need_len("advantages", advantages, rows)
    c = String(config)
    grad = zeros(T, n)
    grad_entropy = entropy === nothing ? T[] : zeros(T, n)
    stats = Ref{PgStats}()
    ref, ent, ge = ptr_or_null(T, ref_logp), ptr_or_null(T, entropy), ptr_or_null(T, grad_entropy)
    GC.@preserve logp old_logp ref_logp entropy mask advantages c grad grad_entropy begin
        err = if T === Float64
            cuda_host && throw(NenyaxError(STATUS_INVALID_ARGUMENT, "cuda_host needs Float32"))
            ccall((:nenyax_pg_loss, libnenyax), Ptr{Cvoid},
                (Ptr{Float64}, Ptr{Float64}, Ptr{Float64}, Ptr{Float64}, Ptr{UInt8}, Ptr{Float64},
                    Csize_t, Csize_t, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Float64}, Ptr{Float64},
                    Ref{PgStats}),
                logp, old_logp, ref, ent, mask, advantages, length(advantages), rows, width, c,
                sizeof(c), grad, ge, stats)
        elseif cuda_host
            ccall((:nenyax_pg_loss_cuda_host_f32, libnenyax), Ptr{Cvoid},
                (Ptr{Float32}, Ptr{Float32}, Ptr{Float32}, Ptr{Float32}, Ptr{UInt8}, Ptr{Float32},
                    Csize_t, Csize_t, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Float32}, Ptr{Float32},
                    Ref{PgStats}),
                logp, old_logp, ref, ent, mask, advantages, length(advantages), rows, width, c,
                sizeof(c), grad, ge, stats)
        else
            ccall((:nenyax_pg_loss_f32, libnenyax), Ptr{Cvoid},
                (Ptr{Float32}, Ptr{Float32}, Ptr{Float32}, Ptr{Float32}, Ptr{UInt8}, Ptr{Float32},
                    Csize_t, Csize_t, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Float32}, Ptr{Float32},
                    Ref{PgStats}),
                logp, old_logp, ref, ent, mask, advantages, length(advantages), rows, width, c,
                sizeof(c), grad, ge, stats)
        end
        check_error(err)
    end
    return (stats[], grad, grad_entropy)
end

"""
    pg_loss_cuda(T, logp, old_logp, ref_logp, entropy, mask, advantages, advantages_len, rows,
                 width, config, grad_logp, grad_entropy, stats_device, stream)

The fused GPU loss over device pointers (`Ptr{T}` for `T` Float32 or Float64, `C_NULL` where
not needed; `mask::Ptr{UInt8}`, `stats_device::Ptr{Float64}` of `PG_STATS_LEN` values),
queued on `stream` (`C_NULL`: the default stream) without synchronising.
"""
function pg_loss_cuda(::Type{T}, logp, old_logp, ref_logp, entropy, mask, advantages,
        advantages_len::Integer, rows::Integer, width::Integer, config::AbstractString,
        grad_logp, grad_entropy, stats_device, stream) where {T <: Union{Float32, Float64}}
    c = String(config)
    GC.@preserve c begin
        err = if T === Float64
            ccall((:nenyax_pg_loss_cuda_f64, libnenyax), Ptr{Cvoid},
                (Ptr{Float64}, Ptr{Float64}, Ptr{Float64}, Ptr{Float64}, Ptr{UInt8}, Ptr{Float64},
                    Csize_t, Csize_t, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Float64}, Ptr{Float64},
                    Ptr{Float64}, Ptr{Cvoid}),
                logp, old_logp, ref_logp, entropy, mask, advantages, advantages_len, rows, width,
                c, sizeof(c), grad_logp, grad_entropy, stats_device, stream)
        else
            ccall((:nenyax_pg_loss_cuda_f32, libnenyax), Ptr{Cvoid},
                (Ptr{Float32}, Ptr{Float32}, Ptr{Float32}, Ptr{Float32}, Ptr{UInt8}, Ptr{Float32},
                    Csize_t, Csize_t, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Float32}, Ptr{Float32},
                    Ptr{Float64}, Ptr{Cvoid}),
                logp, old_logp, ref_logp, entropy, mask, advantages, advantages_len, rows, width,
                c, sizeof(c), grad_logp, grad_entropy, stats_device, stream)
        end
        check_error(err)
    end
    return nothing
end

"""
    reinforce_pp(rewards, mask; rows, width, gamma, group_ids = nothing) -> (advantages, returns)

REINFORCE++ token advantages and discounted returns (rows x width); one reward per row.
"""
function reinforce_pp(rewards::Vector{Float64}, mask::Array{UInt8}; rows::Integer,
        width::Integer, gamma::Real, group_ids = nothing)
    need_len("rewards", rewards, rows); need_len("mask", mask, rows * width)
    need_len("group_ids", group_ids, rows; optional = true)
    adv, ret = zeros(Float64, rows * width), zeros(Float64, rows * width)
    g = ptr_or_null(Int64, group_ids)
    GC.@preserve rewards group_ids mask adv ret begin
        @check ccall((:nenyax_reinforce_pp, libnenyax), Ptr{Cvoid},
            (Ptr{Float64}, Ptr{Int64}, Ptr{UInt8}, Csize_t, Csize_t, Float64, Ptr{Float64},
                Ptr{Float64}),
            rewards, g, mask, rows, width, gamma, adv, ret)
    end
    return (adv, ret)
end

"""
    dpo_loss(rewards, group_ids, logp, ref_logp, mask; rows, width, beta) -> (loss, grad_logp, pairs)

DPO (sigmoid) on each group's best-vs-worst pair.
"""
function dpo_loss(rewards::Vector{Float64}, group_ids::Vector{Int64}, logp::Array{Float64},
        ref_logp::Array{Float64}, mask::Array{UInt8}; rows::Integer, width::Integer, beta::Real)
    n = rows * width
    need_len("rewards", rewards, rows); need_len("group_ids", group_ids, rows)
    need_len("logp", logp, n); need_len("ref_logp", ref_logp, n); need_len("mask", mask, n)
    loss, pairs, grad = Ref{Float64}(0), Ref{Csize_t}(0), zeros(Float64, n)
    GC.@preserve rewards group_ids logp ref_logp mask grad begin
        @check ccall((:nenyax_dpo_loss, libnenyax), Ptr{Cvoid},
            (Ptr{Float64}, Ptr{Int64}, Ptr{Float64}, Ptr{Float64}, Ptr{UInt8}, Csize_t, Csize_t,
                Float64, Ref{Float64}, Ptr{Float64}, Ref{Csize_t}),
            rewards, group_ids, logp, ref_logp, mask, rows, width, beta, loss, grad, pairs)
    end
    return (loss[], grad, Int(pairs[]))
end

"nenyax_pg_batch_t: one batch of a policy-gradient loss (see `pg_loss_batch`)."
struct PgBatch
    version::UInt32
    dtype::UInt32
    memory::UInt32
    device::UInt32
    logp::Ptr{Cvoid}
    old_logp::Ptr{Cvoid}
    ref_logp::Ptr{Cvoid}
    entropy::Ptr{Cvoid}
    mask::Ptr{UInt8}
    advantages::Ptr{Cvoid}
    advantages_len::Csize_t
    rows::Csize_t
    width::Csize_t
    grad_logp::Ptr{Cvoid}
    grad_entropy::Ptr{Cvoid}
    stats_device::Ptr{Float64}
    stream::Ptr{Cvoid}
end

"""
    pg_loss_batch(logp, old_logp, mask, advantages; rows, width, config, ref_logp = nothing,
                  entropy = nothing, device = DEVICE_CPU) -> (stats::PgStats, grad_logp, grad_entropy)

`pg_loss` through the one batch entry point `nenyax_pg_loss_batch` (host memory; `device =
DEVICE_CUDA` runs it on the GPU, copying in and back).
"""
function pg_loss_batch(logp::Array{T}, old_logp::Array{T}, mask::Array{UInt8}, advantages::Array{T};
        rows::Integer, width::Integer, config::AbstractString, ref_logp = nothing,
        entropy = nothing, device::Integer = DEVICE_CPU) where {T <: Union{Float32, Float64}}
    n = rows * width
    need_len("logp", logp, n); need_len("old_logp", old_logp, n); need_len("mask", mask, n)
    need_len("ref_logp", ref_logp, n; optional = true)
    need_len("entropy", entropy, n; optional = true)
    length(advantages) in (rows, n) || need_len("advantages", advantages, rows)
    c = String(config)
    grad = zeros(T, n)
    grad_entropy = entropy === nothing ? T[] : zeros(T, n)
    stats = Ref{PgStats}()
    GC.@preserve logp old_logp ref_logp entropy mask advantages c grad grad_entropy begin
        batch = Ref(PgBatch(PG_BATCH_VERSION, T === Float64 ? DTYPE_F64 : DTYPE_F32, MEMORY_HOST,
            UInt32(device), pointer(logp), pointer(old_logp), ptr_or_null(T, ref_logp),
            ptr_or_null(T, entropy), pointer(mask), pointer(advantages), length(advantages),
            rows, width, pointer(grad), ptr_or_null(T, grad_entropy), C_NULL, C_NULL))
        @check ccall((:nenyax_pg_loss_batch, libnenyax), Ptr{Cvoid},
            (Ref{PgBatch}, Ptr{UInt8}, Csize_t, Ref{PgStats}), batch, c, sizeof(c), stats)
    end
    return (stats[], grad, grad_entropy)
end

"The GPU the CUDA entry points use (JSON); `STATUS_CUDA_UNAVAILABLE` says why there is none."
cuda_device() = string_call(out -> ccall((:nenyax_cuda_device, libnenyax), Ptr{Cvoid},
    (Ref{NenyaxString},), out))

"The full JSON of a named learner with overrides applied, e.g. `{\"learner\": \"dapo\"}`."
function learner_json(config::AbstractString)
    c = String(config)
    GC.@preserve c string_call(out -> ccall((:nenyax_learner_json, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t, Ref{NenyaxString}), c, sizeof(c), out))
end

"""
    plugin_load(path)

Load a plugin library (a shared library exporting `nenyax_plugin_entry`) and register the
plugins it lists, e.g. a judge that `{"type": "plugin", "use": "<name>"}` then picks.
"""
function plugin_load(path::AbstractString)
    c = String(path)
    GC.@preserve c @check ccall((:nenyax_plugin_load, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t), c, sizeof(c))
    return nothing
end

"""
    plugin_register(descriptor::Ptr{Cvoid})

Register a plugin implemented in C in this process: `descriptor` points to a `nenyax_plugin_t`
(copied; its `user_data` must stay valid). Its callbacks run on library worker threads, so they
must not be Julia functions.
"""
function plugin_register(descriptor::Ptr{Cvoid})
    @check ccall((:nenyax_plugin_register, libnenyax), Ptr{Cvoid}, (Ptr{Cvoid},), descriptor)
    return nothing
end

"""
    plugin_check(kind, name) -> String

Hold a plugin to its kind's conformance checks (`nenyax plugin-check`): the JSON report when it
conforms; a `NenyaxError` (status CONFIG) naming every failed check when not.
"""
function plugin_check(kind::AbstractString, name::AbstractString)
    k, n = String(kind), String(name)
    GC.@preserve k n string_call(out -> ccall((:nenyax_plugin_check, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ref{NenyaxString}), k, sizeof(k), n, sizeof(n), out))
end

"The plugins loaded or registered so far, as JSON `[{kind, name, version, source}]`."
plugins_json() = string_call(out -> ccall((:nenyax_plugins_json, libnenyax), Ptr{Cvoid},
    (Ref{NenyaxString},), out))

"""
    export_jsonl(jsonl, options) -> String

Turn trajectories (JSONL text) into training rows; `options` is nenyax_export's JSON
(`"to"`: jsonl, parquet or hf; `"rows"`: raw, sft, dpo or tokens; `"min_score"`; `"out"`,
required). Returns the summary JSON (`rows`, `trajectories`, `skipped`, `out`, `pushed`).
"""
function export_jsonl(jsonl::AbstractString, options::AbstractString)
    j, o = String(jsonl), String(options)
    GC.@preserve j o string_call(out -> ccall((:nenyax_export, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ref{NenyaxString}),
        pointer(j), sizeof(j), o, sizeof(o), out))
end

"Export the JSONL file named by the option `\"input\"`; returns the summary JSON."
function export_file(options::AbstractString)
    o = String(options)
    GC.@preserve o string_call(out -> ccall((:nenyax_export, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ref{NenyaxString}),
        C_NULL, 0, o, sizeof(o), out))
end

include("train.jl")

end # module
