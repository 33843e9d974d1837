# The C acceptance sequence (ffi/tests/c/test_acceptance.c) through Nenyax.jl: load, 64
# rollouts in parallel with a Julia policy, every score 1.0, the conformance tier, close.
# Run with: NENYAX_LIB=/path/to/target/release/libnenyax.so julia --project=bindings/julia -e 'using Pkg; Pkg.test()'

using Nenyax
using Test

# Without a JSON dependency: the fields these tests need, read from the library's JSON (whose
# field order is fixed by the contract types).
score_of(traj::String) =
    (m = match(r"\"judgment\":\{\"score\":([-+0-9.eE]+)", traj); m === nothing ? NaN : parse(Float64, m[1]))
error_of(traj::String) =
    (m = match(r"\"error\":\"((?:[^\"\\]|\\.)*)\"", traj); m === nothing ? nothing : String(m[1]))
tier_of(report::String) = match(r"\"tier\":\"(\w+)\"", report)[1]

# Answer an arithmetic observation: {"data":{"expression":"46 + 12"},...}.
function answer(obs::String)
    m = match(r"\"expression\":\"(-?\d+) ([-+*]) (-?\d+)\"", obs)
    m === nothing && error("no expression in $obs")
    a, op, b = parse(Int, m[1]), m[2], parse(Int, m[3])
    x = op == "+" ? a + b : op == "-" ? a - b : a * b
    return "\"<answer>$(x)</answer>\""   # the action: a JSON string
end

@testset "Nenyax" begin
    @testset "version" begin
        @test Nenyax.version() == Nenyax.HEADER_VERSION
        @test Nenyax.version_number() == Nenyax.HEADER_VERSION_NUMBER
        @test Nenyax.protocol_version() == "0.1"
    end

    @testset "acceptance" begin
        env = Nenyax.load("builtin:arithmetic")
        @test occursin("\"id\":\"builtin:arithmetic\"", Nenyax.manifest(env))
        @test startswith(Nenyax.tasks(env; limit = 2), "[{\"id\":\"0\"")

        calls = Ref(0)
        thread = Threads.threadid()
        same_thread = Ref(true)
        policy = Nenyax.action_policy() do obs
            calls[] += 1
            same_thread[] &= Threads.threadid() == thread
            answer(obs)
        end
        runner = Nenyax.Runner(2)
        @test Nenyax.threads(runner) == 2

        trajectories = run(runner, env, policy; n = 64)
        @test length(trajectories) == 64
        @test all(t -> score_of(t) == 1.0, trajectories)
        @test all(t -> error_of(t) === nothing, trajectories)
        @test calls[] == 64
        @test same_thread[]   # the Julia function ran on the calling thread only

        one = Nenyax.rollout(env, policy; options = "{\"seed\": 3}")
        @test score_of(one) == 1.0

        @test tier_of(Nenyax.check_uri("builtin:arithmetic")) == "audited"
        # A handle rebuilds its fresh instance, so it reaches the same tier as by URI.
        @test tier_of(Nenyax.check(env; options = "{\"samples\": 4}")) == "audited"

        close(runner)
        close(policy)
        close(env)
        close(env)   # idempotent
        @test_throws NenyaxError Nenyax.manifest(env)
    end

    @testset "errors" begin
        e = try
            Nenyax.load("builtin:arithmetic?sise=3")
        catch err
            err
        end
        @test e isa NenyaxError
        @test e.status == Nenyax.STATUS_UNKNOWN_PARAMETER
        @test occursin("did you mean `size`", e.message)
        for (uri, status) in (("nope", Nenyax.STATUS_INVALID_URI),
                              ("warp:drive", Nenyax.STATUS_UNKNOWN_SCHEME),
                              ("builtin:nothing", Nenyax.STATUS_UNKNOWN_TARGET),
                              ("builtin:arithmetic?size=-3", Nenyax.STATUS_INVALID_PARAMETER))
            err = try
                Nenyax.load(uri)
            catch x
                x
            end
            @test err isa NenyaxError && err.status == status
        end
        env = Nenyax.load("builtin:arithmetic")
        err = try
            Nenyax.with_judge(env, "{\"type\": \"telepathy\"}")
        catch x
            x
        end
        @test err isa NenyaxError && err.status == Nenyax.STATUS_CONFIG
        close(env)
    end

    @testset "a throwing policy fails only its episode" begin
        env = Nenyax.load("builtin:arithmetic")
        policy = Nenyax.action_policy() do obs
            occursin("\"task_id\":\"3\"", obs) && error("boom at task 3")
            answer(obs)
        end
        trajectories = run(Nenyax.Runner(2), env, policy; n = 8)
        for (i, t) in enumerate(trajectories)
            if i == 4   # job 3
                @test occursin("boom at task 3", something(error_of(t), ""))
            else
                @test score_of(t) == 1.0
            end
        end
        close(policy)
        close(env)
    end

    @testset "define, reference policy, chat policy, judge" begin
        env = Nenyax.define("""{"name": "caps", "judge": {"type": "contains"},
            "tasks": [{"prompt": "Capital of Kenya?", "answer": "Nairobi"}]}""")
        @test occursin("\"id\":\"defined:caps\"", Nenyax.manifest(env))
        ref = Nenyax.reference_policy(env)
        @test score_of(Nenyax.rollout(env, ref)) == 1.0
        chat = Nenyax.chat_policy(messages -> occursin("Kenya", messages) ? "Nairobi." : "?")
        @test score_of(Nenyax.rollout(env, chat)) == 1.0
        close(chat)
        close(ref)
        close(env)

        arith = Nenyax.load("builtin:arithmetic")
        bare = Nenyax.action_policy(obs -> replace(answer(obs), r"</?answer>" => ""))
        judged = Nenyax.with_judge(arith, "{\"type\": \"numeric\", \"extract\": \"last_number\"}")
        @test score_of(Nenyax.rollout(arith, bare)) == 0.0
        @test score_of(Nenyax.rollout(judged, bare)) == 1.0
        close(judged)
        close(bare)
        close(arith)
    end

    @testset "finalizers" begin
        for _ in 1:10
            env = Nenyax.load("builtin:arithmetic?size=5")
            policy = Nenyax.action_policy(answer)
            run(Nenyax.Runner(1), env, policy; n = 2)
        end
        GC.gc()
        GC.gc()
        @test true   # no crash
    end

    # The areas added with the whole-header wrapper (untested here: Julia is not installable on
    # the CI machine; scripts/check_julia.sh parses this file and ffi/tests/bindings.rs checks
    # every ccall against the header).
    @testset "sessions and Julia-defined environments" begin
        env = Nenyax.load("builtin:arithmetic")
        s = Nenyax.session(env; options = "{\"task\": {\"id\": \"3\"}}")
        @test !Nenyax.done(s)
        Nenyax.act(s, answer(Nenyax.observation(s)))
        @test Nenyax.done(s)
        @test occursin("\"score\":1", Nenyax.judgment(s))
        close(s); close(env)

        tasks = Nenyax.define_tasks("sums", "[{\"prompt\": \"2+2?\", \"answer\": \"4\"}]";
            score = (task, reply) -> strip(reply) == "4" ? 1.0 : 0.0, reference = task -> "4")
        ref = Nenyax.reference_policy(tasks)
        close(tasks)   # the reference policy keeps the callbacks alive
        GC.gc()
        tasks2 = Nenyax.define_tasks("sums", "[{\"prompt\": \"2+2?\"}]"; score = (t, r) -> 0.5)
        @test score_of(Nenyax.rollout(tasks2, ref)) == 0.5
        close(ref); close(tasks2)

        counter = Nenyax.define_stateful("counter"; reset = seed -> "0", observe = st -> st,
            step = (st, a) -> (string(parse(Int, st) + parse(Int, a)), 1.0, parse(Int, st) + 1 >= 3),
            max_steps = 10)
        one = Nenyax.action_policy(obs -> "1")
        @test count("\"reward\":", Nenyax.rollout(counter, one)) >= 3
        close(one); close(counter)
    end

    @testset "learners" begin
        adv = Nenyax.advantages([1.0, 0.0, 1.0, 1.0], Int64[0, 0, 1, 1];
            options = "{\"estimator\": \"rloo\"}")
        @test adv ≈ [1.0, -1.0, 0.0, 0.0]
        @test Nenyax.dapo_keep([1.0, 0.0, 1.0, 1.0], Int64[0, 0, 1, 1]) == [true, true, false, false]
        mask = UInt8[1, 1, 1, 0]
        for T in (Float64, Float32)
            logp = T[-1, -2, -0.5, -9]
            stats, grad, _ = Nenyax.pg_loss(logp, logp, mask, T[1, 1]; rows = 2, width = 2,
                config = "{\"learner\": \"dapo\"}")
            @test stats.tokens == 3 && stats.loss_pg ≈ -1
            @test grad[1] < 0 && grad[4] == 0
        end
        @test_throws NenyaxError Nenyax.pg_loss([1.0], [1.0], UInt8[1, 1], [1.0]; rows = 1,
            width = 2, config = "{}")
        _, ret = Nenyax.reinforce_pp([2.0, 0.0], mask; rows = 2, width = 2, gamma = 1.0)
        @test ret[1:3] ≈ [2.0, 2.0, 0.0]
        loss, _, pairs = Nenyax.dpo_loss([2.0, 0.0], Int64[0, 0], fill(-1.0, 4), fill(-1.0, 4),
            mask; rows = 2, width = 2, beta = 0.1)
        @test pairs == 1 && loss ≈ log(2)
        @test occursin("clip_high", Nenyax.learner_json("{\"learner\": \"dapo\"}"))
    end

    @testset "export" begin
        # Two attempts at one task scoring 1 and 0: one DPO pair.
        runs = """
        {"env_id":"e","mode":"step","task":{"id":"t"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"judgment":{"score":1.0}}
        {"env_id":"e","mode":"step","task":{"id":"t"},"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"b"}],"judgment":{"score":0.0}}
        """
        dir = mktempdir()
        out = joinpath(dir, "pairs.jsonl")
        summary = Nenyax.export_jsonl(runs, "{\"rows\": \"dpo\", \"out\": \"$out\"}")
        @test occursin("\"rows\":1", summary) && occursin("\"trajectories\":2", summary)
        line = read(out, String)
        @test occursin("\"chosen\":[{\"content\":\"a\",\"role\":\"assistant\"}]", line)
        @test occursin("\"rejected\":[{\"content\":\"b\",\"role\":\"assistant\"}]", line)
        input = joinpath(dir, "runs.jsonl")
        write(input, runs)
        summary = Nenyax.export_file("{\"input\": \"$input\", \"to\": \"parquet\"}")
        @test occursin("\"rows\":2", summary)
        @test read(joinpath(dir, "runs.raw.parquet"))[1:4] == b"PAR1"
        err = try
            Nenyax.export_jsonl(runs, "{\"rows\": \"ppo\", \"out\": \"x\"}")
        catch e
            e
        end
        @test err isa NenyaxError && err.status == Nenyax.STATUS_CONFIG
        err = try
            Nenyax.export_file("{\"input\": \"/nonexistent/runs.jsonl\"}")
        catch e
            e
        end
        @test err isa NenyaxError && err.status == Nenyax.STATUS_IO
    end

    @testset "sandbox and server" begin
        sb = Nenyax.Sandbox("{\"backend\": \"process\"}")
        @test occursin("\"stdout\":\"hi\\n\"", Nenyax.exec(sb, "{\"argv\": [\"echo\", \"hi\"]}"))
        Nenyax.write_file(sb, "dir/a.txt", "hello")
        @test Nenyax.read_file(Nenyax.fork(sb), "dir/a.txt") == "hello"
        @test occursin("a.txt", Nenyax.list_dir(sb, "dir"))
        close(sb)
        env = Nenyax.load("builtin:arithmetic")
        server = Nenyax.serve(env; options = "{\"port\": 0}")
        @test startswith(Nenyax.url(server), "http://127.0.0.1:")
        close(server); close(server); close(env)
    end

    @testset "training" begin
        cfg = tempname() * ".toml"
        write(cfg, "[env]\nuri = \"builtin:guess\"\n[learner]\nuse = \"grpo\"\n")
        run = Nenyax.config_load(cfg; overrides = "{\"train.rounds\": 3}")
        @test occursin("\"rounds\":3", run) && occursin("\"use\":\"grpo\"", run)
        write(cfg, "[train]\nrouns = 3\n")
        @test_throws NenyaxError Nenyax.config_load(cfg)
        rm(cfg)
        env = Nenyax.load("builtin:guess?high=16&max_guesses=4&size=64")
        # Guess uniformly within the bounds, from the episode's sample seed; record the prompt
        # (100 + low, 200 + high) and the guess (guess - 1).
        phases = Symbol[]
        policy = Nenyax.episode_action_policy() do ep, obs
            push!(phases, ep.phase)
            lo = parse(Int, match(r"\"low\":(\d+)", obs)[1])
            hi = parse(Int, match(r"\"high\":(\d+)", obs)[1])
            g = lo + Int(ep.sample_seed % UInt64(hi - lo + 1))
            rec = Nenyax.Record(prompt_token_ids = [100 + lo, 200 + hi],
                completion_token_ids = [g - 1], completion_logprobs = [-log(hi - lo + 1)])
            (string(g), rec)
        end
        applies = Ref(0)
        trainer = Nenyax.Trainer(
            logprobs! = (b, reference, out) -> begin
                for r in 1:b.rows, t in 1:b.width
                    b.mask[t, r] == 0 && continue
                    c = b.context_start[t, r]
                    lo, hi = b.tokens[c, r] - 100, b.tokens[c+1, r] - 200
                    out[t, r] = -log(hi - lo + 1)
                end
            end,
            apply! = (b, grad) -> (applies[] += 1),
            snapshot! = () -> nothing, restore! = () -> nothing)
        learner = Nenyax.Learner("grpo"; env = env, policy = policy, trainer = trainer)
        report = Nenyax.train(env, learner;
            options = "{\"rounds\": 2, \"group_size\": 4, \"batch\": 3, \"eval_tasks\": 4}")
        @test !occursin("\"outcome\":\"failed\"", report)
        @test applies[] == 2 && :train in phases && :eval in phases
        @test occursin("\"text\":\"train builtin:guess", report)

        seen = Ref(0)
        custom = Nenyax.custom_learner("recorder", groups -> (seen[] += 1; Dict("n" => 1.0));
            policy = Nenyax.reference_policy(env))
        report = Nenyax.train(env, custom; options = "{\"rounds\": 1, \"group_size\": 2}")
        @test seen[] == 1 && occursin("\"n\":1.0", report)
        @test_throws NenyaxError Nenyax.Learner("grpoo"; env = env)
        @test_throws NenyaxError Nenyax.train(env, learner; options = "{\"group_size\": 1}")
        close(custom); close(learner); close(policy); close(env)
    end

end
