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

export Env, Policy, Runner, NenyaxError

const libnenyax = get(ENV, "NENYAX_LIB", "libnenyax")

# nenyax.h: NENYAX_VTABLE_VERSION, NENYAX_THREAD_SAFE (not used: see action_policy).
const VTABLE_VERSION = UInt32(1)
const HEADER_VERSION = "0.1.0"
const HEADER_VERSION_NUMBER = UInt32(1000)   # MAJOR*1000000 + MINOR*1000 + PATCH

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

const STATUS_NAMES = ("OK", "InvalidArgument", "InvalidURI", "UnknownScheme",
    "DriverUnavailable", "UnknownTarget", "UnknownParameter", "InvalidParameter",
    "Unsupported", "PolicyMismatch", "Policy", "InvalidAction", "Environment",
    "NonFiniteScore", "Judge", "Define", "Endpoint", "Protocol", "Config", "IO", "Callback",
    "Panic", "CudaUnavailable", "Cuda", "Capacity")

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
    function Env(ptr::Ptr{Cvoid})
        obj = new(ptr)
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
    return Policy(out[])
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
    return Env(out[])
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

end # module
