# Training (part of module Nenyax): per-episode policies, trainers written in Julia, host
# learners, and `train`. Every callback here is registered without NENYAX_THREAD_SAFE, so the
# library calls it only on the thread (and task) that called `train`/`rollout`/`run`, while
# the environments step in parallel; trainer and learner callbacks run there between rollouts.

# The #defines of nenyax.h for training (ffi/tests/bindings.rs checks each value).
const POLICY_VTABLE_VERSION = UInt32(2)   # a policy vtable with act_episode / chat_episode
const EPISODE_VERSION = UInt32(1)
const PHASE_RUN = UInt32(0)
const PHASE_TRAIN = UInt32(1)
const PHASE_EVAL = UInt32(2)
const TRACE_BATCH_VERSION = UInt32(1)
const TRAINER_VTABLE_VERSION = UInt32(1)
const LEARNER_VTABLE_VERSION = UInt32(1)

# nenyax_episode_t (Julia lays an isbits struct out as C does).
struct EpisodeC
    version::UInt32
    phase::UInt32
    round::UInt32
    group::UInt32
    member::UInt32
    step::UInt64
    seed::Int64
    has_seed::Bool
    task_id::Ptr{UInt8}
    task_id_len::Csize_t
    sample_seed::UInt64
end

"""
    Episode

Which episode and call a per-episode policy serves: `phase` (`:run`, `:train` or `:eval`),
`round`, `group`, `member`, `step` (the call's index in the episode, from 0), `seed` and
`task_id` (`nothing` when absent), and `sample_seed`: seed this call's sampling with it and a
run draws the same whatever the threads.
"""
struct Episode
    phase::Symbol
    round::UInt32
    group::UInt32
    member::UInt32
    step::UInt64
    seed::Union{Int64,Nothing}
    task_id::Union{String,Nothing}
    sample_seed::UInt64
end

function Episode(e::EpisodeC)
    phase = e.phase == PHASE_TRAIN ? :train : e.phase == PHASE_EVAL ? :eval : :run
    task = e.task_id == C_NULL ? nothing : unsafe_string(e.task_id, e.task_id_len)
    return Episode(phase, e.round, e.group, e.member, e.step, e.has_seed ? e.seed : nothing,
        task, e.sample_seed)
end

"""
    Record(; prompt_token_ids = Int64[], completion_token_ids, completion_logprobs = Float64[])

What a per-episode policy sampled in one call: what weight learners train on. Chat calls need
`prompt_token_ids` too; `completion_logprobs` is empty or one per completion token.
"""
Base.@kwdef struct Record
    prompt_token_ids::Vector{Int64} = Int64[]
    completion_token_ids::Vector{Int64}
    completion_logprobs::Vector{Float64} = Float64[]
end

function record_json(r::Record)
    isempty(r.completion_logprobs) || length(r.completion_logprobs) == length(r.completion_token_ids) ||
        throw(ArgumentError("Record: completion_logprobs must be empty or one per completion token"))
    all(isfinite, r.completion_logprobs) ||
        throw(ArgumentError("Record: a completion log-prob is not finite"))
    io = IOBuffer()
    print(io, '{')
    isempty(r.prompt_token_ids) || print(io, "\"prompt_token_ids\":[", join(r.prompt_token_ids, ','), "],")
    print(io, "\"completion_token_ids\":[", join(r.completion_token_ids, ','), ']')
    isempty(r.completion_logprobs) ||
        print(io, ",\"completion_logprobs\":[", join(map(repr, r.completion_logprobs), ','), ']')
    print(io, '}')
    return String(take!(io))
end

# nenyax_policy_vtable_t, version 2.
struct PolicyVtable2
    version::UInt32
    act::Ptr{Cvoid}
    chat::Ptr{Cvoid}
    act_episode::Ptr{Cvoid}
    chat_episode::Ptr{Cvoid}
end

# f(episode, text) returns the output, or (output, record).
function episode_trampoline(user_data::Ptr{Cvoid}, ep::Ptr{EpisodeC}, input::Ptr{UInt8},
        len::Csize_t, reply::Ptr{Cvoid}, record::Ptr{Cvoid})::Int32
    guarded(reply) do
        out = callbacks(user_data)(Episode(unsafe_load(ep)), unsafe_string(input, len))
        text, rec = out isa Tuple ? out : (out, nothing)
        rec === nothing || reply_set(record, record_json(rec::Record)) || return Int32(2)
        reply_set(reply, String(text)) ? Int32(0) : Int32(2)
    end
end

# nenyax_trace_batch_t.
struct TraceBatchC
    version::UInt32
    rows::Csize_t
    width::Csize_t
    tokens::Ptr{Int64}
    mask::Ptr{UInt8}
    sampled_logp::Ptr{Float64}
    context_start::Ptr{Int64}
    lengths::Ptr{Int64}
    rows_json::Ptr{UInt8}
    rows_json_len::Csize_t
end

"""
    TraceBatch

Traced sequences a trainer scores and learns from, copied from the library: `tokens`, `mask`,
`sampled_logp` and `context_start` are `width x rows` matrices (column `r` is row `r`, so
`tokens[t, r]` is position `t` of row `r`); `context_start[t, r]` is the 1-based position
where that token's context begins; `lengths[r]` the row's length; `rows_json` where each row
came from (`[{"trajectory", "group", "member", "reward", "segments"}]`).
"""
struct TraceBatch
    rows::Int
    width::Int
    tokens::Matrix{Int64}
    mask::Matrix{UInt8}
    sampled_logp::Matrix{Float64}
    context_start::Matrix{Int64}
    lengths::Vector{Int64}
    rows_json::String
end

function TraceBatch(b::TraceBatchC)
    rows, width = Int(b.rows), Int(b.width)
    grid(p) = copy(reshape(unsafe_wrap(Array, p, rows * width), width, rows))
    return TraceBatch(rows, width, grid(b.tokens), grid(b.mask), grid(b.sampled_logp),
        grid(b.context_start) .+ 1, copy(unsafe_wrap(Array, b.lengths, rows)),
        unsafe_string(b.rows_json, b.rows_json_len))
end

"""
    Trainer(; logprobs!, apply!, snapshot! = nothing, restore! = nothing)

A model whose weights a weight learner (grpo, dapo, rloo, rft, dpo, ...) trains:
`logprobs!(batch::TraceBatch, reference::Bool, out::Matrix{Float64})` fills `out[t, r]` with
`log p(token | its context)` for every sampled position (with `reference`, under the frozen
reference weights); `apply!(batch, grad::Matrix{Float64})` backpropagates dLoss/dlogp and
takes one optimiser step that lowers the loss. `snapshot!()` / `restore!()` (both or neither)
let a harmful update be reverted. An exception fails that round, with its message in the report.
"""
Base.@kwdef struct Trainer
    logprobs!::Any
    apply!::Any
    snapshot!::Any = nothing
    restore!::Any = nothing
end

# nenyax_trainer_vtable_t and nenyax_learner_vtable_t.
struct TrainerVtable
    version::UInt32
    logprobs::Ptr{Cvoid}
    apply::Ptr{Cvoid}
    snapshot::Ptr{Cvoid}
    restore::Ptr{Cvoid}
end

struct LearnerVtable
    version::UInt32
    update::Ptr{Cvoid}
    snapshot::Ptr{Cvoid}
    restore::Ptr{Cvoid}
end

function logprobs_trampoline(ud::Ptr{Cvoid}, b::Ptr{TraceBatchC}, reference::Bool,
        out::Ptr{Float64}, err::Ptr{Cvoid})::Int32
    guarded(err) do
        batch = TraceBatch(unsafe_load(b))
        logp = fill(NaN, batch.width, batch.rows)
        callbacks(ud).logprobs!(batch, reference, logp)
        unsafe_copyto!(out, pointer(logp), length(logp))
        Int32(0)
    end
end

function apply_trampoline(ud::Ptr{Cvoid}, b::Ptr{TraceBatchC}, grad::Ptr{Float64},
        err::Ptr{Cvoid})::Int32
    guarded(err) do
        batch = TraceBatch(unsafe_load(b))
        g = copy(reshape(unsafe_wrap(Array, grad, batch.rows * batch.width), batch.width, batch.rows))
        callbacks(ud).apply!(batch, g)
        Int32(0)
    end
end

snapshot_trampoline(ud::Ptr{Cvoid}, err::Ptr{Cvoid})::Int32 =
    guarded(() -> (callbacks(ud).snapshot!(); Int32(0)), err)
restore_trampoline(ud::Ptr{Cvoid}, err::Ptr{Cvoid})::Int32 =
    guarded(() -> (callbacks(ud).restore!(); Int32(0)), err)

# A host learner's update: a report JSON string, a Dict of numbers (its metrics), or nothing.
function update_trampoline(ud::Ptr{Cvoid}, groups::Ptr{UInt8}, len::Csize_t,
        report::Ptr{Cvoid})::Int32
    guarded(report) do
        r = callbacks(ud).update(unsafe_string(groups, len))
        if r isa AbstractDict
            all(v -> v isa Real && isfinite(v), values(r)) ||
                throw(ArgumentError("update's metrics must be finite numbers"))
            r = "{\"metrics\":{" *
                join(("$(json_string(String(k))):$(repr(Float64(v)))" for (k, v) in r), ',') * "}}"
        end
        r === nothing || reply_set(report, String(r)) || return Int32(2)
        Int32(0)
    end
end

# A JSON string literal of `s`.
function json_string(s::String)
    io = IOBuffer()
    print(io, '"')
    for c in s
        if c == '"' || c == '\\'
            print(io, '\\', c)
        elseif c < ' '
            print(io, "\\u", string(UInt32(c), base = 16, pad = 4))
        else
            print(io, c)
        end
    end
    print(io, '"')
    return String(take!(io))
end

const EPISODE_FN = Ref{Ptr{Cvoid}}(C_NULL)
const LOGPROBS_FN = Ref{Ptr{Cvoid}}(C_NULL)
const APPLY_FN = Ref{Ptr{Cvoid}}(C_NULL)
const SNAPSHOT_FN = Ref{Ptr{Cvoid}}(C_NULL)
const RESTORE_FN = Ref{Ptr{Cvoid}}(C_NULL)
const UPDATE_FN = Ref{Ptr{Cvoid}}(C_NULL)

function init_train_callbacks()
    EPISODE_FN[] = @cfunction(episode_trampoline, Int32,
        (Ptr{Cvoid}, Ptr{EpisodeC}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}, Ptr{Cvoid}))
    LOGPROBS_FN[] = @cfunction(logprobs_trampoline, Int32,
        (Ptr{Cvoid}, Ptr{TraceBatchC}, Bool, Ptr{Float64}, Ptr{Cvoid}))
    APPLY_FN[] = @cfunction(apply_trampoline, Int32,
        (Ptr{Cvoid}, Ptr{TraceBatchC}, Ptr{Float64}, Ptr{Cvoid}))
    SNAPSHOT_FN[] = @cfunction(snapshot_trampoline, Int32, (Ptr{Cvoid}, Ptr{Cvoid}))
    RESTORE_FN[] = @cfunction(restore_trampoline, Int32, (Ptr{Cvoid}, Ptr{Cvoid}))
    UPDATE_FN[] = @cfunction(update_trampoline, Int32, (Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ptr{Cvoid}))
    return nothing
end

function episode_policy(f, chat::Bool)
    root = Ref{Any}(f)
    vt = Ref(PolicyVtable2(POLICY_VTABLE_VERSION, C_NULL, C_NULL,
        chat ? C_NULL : EPISODE_FN[], chat ? EPISODE_FN[] : C_NULL))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    # As host_policy: no free_user_data (Julia's GC owns `root`, kept by the Policy), flags 0.
    GC.@preserve root begin
        @check ccall((:nenyax_policy_new, libnenyax), Ptr{Cvoid},
            (Ref{PolicyVtable2}, Ptr{Cvoid}, Ptr{Cvoid}, UInt32, Ref{Ptr{Cvoid}}),
            vt, pointer_from_objref(root), C_NULL, UInt32(0), out)
    end
    return Policy(out[], root)
end

"""
    episode_action_policy(f) -> Policy

A policy from `f(episode::Episode, observation_json::String)` returning the action (JSON) or
`(action_json, record::Record)`. Sample with `episode.sample_seed`; return a `Record` so weight
learners can train on the episode. An exception fails that episode only.
"""
episode_action_policy(f) = episode_policy(f, false)

"""
    episode_chat_policy(f) -> Policy

A chat policy from `f(episode::Episode, messages_json::String)` returning the reply text or
`(reply, record::Record)` (with prompt and completion token ids, to be trained on).
"""
episode_chat_policy(f) = episode_policy(f, true)

"""
    Learner

What `train` improves: `Learner(config; env, policy, trainer)` (a named learner) or
`custom_learner(name, update; policy, snapshot!, restore!)` (one written in Julia). Free it
with `close(learner)`.
"""
mutable struct Learner
    ptr::Ptr{Cvoid}
    # The Refs whose addresses are its callbacks' user_data, and the policy it rolls out with.
    root::Any
    function Learner(ptr::Ptr{Cvoid}, root)
        obj = new(ptr, root)
        finalizer(close, obj)
        return obj
    end
end

function Base.close(l::Learner)
    if l.ptr != C_NULL
        ccall((:nenyax_learner_free, libnenyax), Cvoid, (Ptr{Cvoid},), l.ptr)
        l.ptr = C_NULL
        l.root = nothing
    end
    return nothing
end

handle(x::Learner) = x.ptr == C_NULL ? throw(closed_error("Learner")) : x.ptr

"""
    Learner(config; env = nothing, policy = nothing, trainer = nothing) -> Learner

A named learner: `config` is a name (`"grpo"`) or JSON (`{"use": "grpo", "epochs": 2}`).
Weight learners train `trainer` (a `Trainer`; `policy` samples with its weights), or with no
trainer the built-in softmax policy sized from `env`; `"incontext"` improves a chat `policy`.
Unknown learners and knobs throw `STATUS_CONFIG`.
"""
function Learner(config::AbstractString; env::Union{Env,Nothing} = nothing,
        policy::Union{Policy,Nothing} = nothing, trainer::Union{Trainer,Nothing} = nothing)
    c = String(config)
    root = Ref{Any}(trainer)
    snaps = trainer !== nothing && trainer.snapshot! !== nothing
    vt = Ref(TrainerVtable(TRAINER_VTABLE_VERSION, LOGPROBS_FN[], APPLY_FN[],
        snaps ? SNAPSHOT_FN[] : C_NULL, snaps ? RESTORE_FN[] : C_NULL))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    eptr = env === nothing ? C_NULL : handle(env)
    pptr = policy === nothing ? C_NULL : handle(policy)
    GC.@preserve c env policy root vt begin
        vtp = trainer === nothing ? C_NULL : Base.unsafe_convert(Ptr{TrainerVtable}, vt)
        @check ccall((:nenyax_learner_new, libnenyax), Ptr{Cvoid},
            (Ptr{UInt8}, Csize_t, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{TrainerVtable}, Ptr{Cvoid},
                Ptr{Cvoid}, Ref{Ptr{Cvoid}}),
            c, sizeof(c), eptr, pptr, vtp, pointer_from_objref(root), C_NULL, out)
    end
    return Learner(out[], (root, policy))
end

"""
    custom_learner(name, update; policy, snapshot! = nothing, restore! = nothing) -> Learner

A learner written in Julia, rolling out with `policy`: `update(groups_json::String)` learns
from one round's groups (`[{"index", "task", "seed", "trajectories"}]`) and returns a Dict of
metrics, a report JSON string (`{"metrics": {...}}`) or `nothing`.
"""
function custom_learner(name::AbstractString, update; policy::Policy, snapshot! = nothing,
        restore! = nothing)
    n = String(name)
    root = Ref{Any}((update = update, snapshot! = snapshot!, restore! = restore!))
    snaps = snapshot! !== nothing
    vt = Ref(LearnerVtable(LEARNER_VTABLE_VERSION, UPDATE_FN[], snaps ? SNAPSHOT_FN[] : C_NULL,
        snaps ? RESTORE_FN[] : C_NULL))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve n policy root begin
        @check ccall((:nenyax_learner_custom, libnenyax), Ptr{Cvoid},
            (Ptr{UInt8}, Csize_t, Ref{LearnerVtable}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid},
                Ref{Ptr{Cvoid}}),
            n, sizeof(n), vt, pointer_from_objref(root), C_NULL, handle(policy), out)
    end
    return Learner(out[], (root, policy))
end

"""
    train(env, learner; options = "") -> String

Train `learner` on `env`; the report as JSON (`"text"` holds it for people). Options (JSON):
`{"rounds", "group_size", "batch", "eval_tasks", "eval_repeats", "seed", "concurrency", "gate",
...}`. A failed round is in the report, not thrown; bad options or setup throw.
"""
function train(env::Env, learner::Learner; options::AbstractString = "")
    o = String(options)
    GC.@preserve env learner o begin
        string_call(out -> ccall((:nenyax_train, libnenyax), Ptr{Cvoid},
            (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{UInt8}, Csize_t, Ref{NenyaxString}),
            handle(env), handle(learner), optptr(o), sizeof(o), out))
    end
end

"A run config file (TOML) read and checked as `nenyax train --config` does, as normalised JSON; `overrides` sets dotted keys first, e.g. `{\"train.gate\": false}`."
function config_load(path::AbstractString; overrides::AbstractString = "")
    p, o = String(path), String(overrides)
    GC.@preserve p o string_call(out -> ccall((:nenyax_config_load, libnenyax), Ptr{Cvoid},
        (Ptr{UInt8}, Csize_t, Ptr{UInt8}, Csize_t, Ref{NenyaxString}),
        p, sizeof(p), optptr(o), sizeof(o), out))
end
