// Package nenyax is the Go binding of Nenyax, one contract for every RL environment, over the
// C ABI of libnenyax (include/nenyax.h).
//
// # Quick start
//
//	env, err := nenyax.Load("builtin:arithmetic?size=100")
//	if err != nil { ... }
//	defer env.Close()
//	policy, _ := nenyax.NewActionPolicy(func(obs []byte) ([]byte, error) {
//		return []byte(`"<answer>42</answer>"`), nil // the action, as JSON
//	})
//	defer policy.Close()
//	runner, _ := nenyax.NewRunner(0)
//	defer runner.Close()
//	err = runner.Run(env, policy, &nenyax.RunOptions{N: 64}, func(i int, t nenyax.Trajectory) error {
//		score, _ := t.Score()
//		fmt.Println(i, score, t.Err())
//		return nil
//	})
//
// # Linking
//
// By default the package links the static library libnenyax.a that cargo builds in this
// repository (target/release, else target/debug, relative to this directory), so test
// binaries need no LD_LIBRARY_PATH. Build it first:
//
//	cargo build --release -p nenyax-ffi   # or: cargo build -p nenyax-ffi
//
// When both profiles are built, target/release wins; to choose, put the directory first
// with CGO_LDFLAGS=-L/path/to/target/debug (bindings/go/run_tests.sh does this). Two build
// tags select other routes:
//
//   - nenyax_dynamic links libnenyax.so from the same directories and records them as an
//     rpath, so the binary finds the library without LD_LIBRARY_PATH while the checkout
//     stays where it is.
//   - nenyax_pkgconfig uses "#cgo pkg-config: nenyax", the route for an installed library.
//     scripts/nenyax.pc.sh writes target/<profile>/nenyax.pc; point PKG_CONFIG_PATH at it and
//     LD_LIBRARY_PATH at the library directory when running.
//
// A preprocessor guard refuses headers of another major version, and package initialisation
// panics when the linked library's MAJOR.MINOR differs from the header the package was
// compiled against (possible only with dynamic linking).
//
// # Errors
//
// Every failure of the library is a *Error with a Status (mirroring nenyax_status_t) and the
// library's message; use errors.As, or IsStatus(err, StatusUnknownParameter). The C error
// object is copied and freed at once, so there is no error state shared between goroutines.
//
// # Objects
//
// Env, Policy, Runner, Session, Sandbox, Recording, Server and Learner own a C handle, each through the
// one generic handle type of handle.go. Close frees it and may be called more than once; a finalizer closes forgotten objects as a safety net, but Close is the way to free
// them promptly. Handles may be closed in any order: a policy made from an environment
// keeps what it needs alive inside the library. Using an object after Close returns an
// error with StatusInvalidArgument instead of crashing.
//
// # Callbacks and threads
//
// Go policies (NewActionPolicy, NewChatPolicy) reach C through a runtime/cgo.Handle passed as
// the callback's user_data and exported trampolines. They are registered WITHOUT
// NENYAX_THREAD_SAFE. The library then calls them only on the OS thread that called into it:
// during Runner.Run (or a check) its worker threads step environments in parallel and hand
// each policy call to the calling thread, which runs it while it waits. A Go function is
// therefore never entered from a thread the Go runtime did not create, and it is never run
// concurrently with itself by one call.
//
// No runtime.LockOSThread is needed around Run: the library records the calling thread's id
// when a call starts and forgets it when the call returns, and for the whole duration of a
// cgo call the calling goroutine is wired to its OS thread (a goroutine inside C cannot be
// rescheduled, and a callback from C into Go runs on that same thread and goroutine, locked
// to it until it returns). Between two calls the goroutine may move to another thread, but
// then nothing is bound to the old one. The library has no thread-local error either.
//
// Calls that use a Go policy (Env.Rollout, Runner.Run) are serialised per policy, as the C
// API requires for callbacks that are not thread-safe; several goroutines may share a Go
// policy, they take turns. Calling into nenyax with the same policy from inside that
// policy's own function, or from the trajectory function of a batch that uses it, would
// deadlock; use a second policy made from the same Go function instead.
//
// Two kinds of Go callback are registered WITH NENYAX_THREAD_SAFE instead, because what calls
// them is not a goroutine's call into nenyax: environments defined by Go functions
// (DefineTasks, DefineStateful), which the runner's workers and a Serve server step, and
// NewConcurrentChatPolicy, which a Recording's server calls. cgo runs them on the library's
// threads, concurrently; they must be safe for concurrent use.
//
// Training (Train) follows the same rule: per-episode Go policies (NewEpisodeActionPolicy,
// NewEpisodeChatPolicy) run on the goroutine that called Train while environments step in
// parallel, and a Trainer's or HostLearner's methods run there too, between rollouts. They
// are told their Episode (seed sampling with Episode.SampleSeed, so a run is the same on any
// number of threads) and return a Record of what they sampled, which is what weight
// learners train on. An error or a panic in a Trainer or HostLearner fails that round only;
// the report carries the message. A Learner keeps its policy alive inside the library, so the
// Policy may be closed before Train; Train still takes the Go policy's turn. See ExampleTrain
// for a Go model trained end to end.
//
// A Go policy that panics fails only the episode it was serving: the panic is recovered in
// the trampoline and becomes the callback's error message, which the trajectory carries in
// its Error field. A panic in a Runner.Run trajectory function is recovered too, stops the
// batch, and is re-raised on the calling goroutine once the library has returned. Do not
// call runtime.Goexit (t.FailNow, t.Fatal) inside a callback: it cannot unwind through C.
package nenyax
