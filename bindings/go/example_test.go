package nenyax_test

import (
	"encoding/json"
	"fmt"
	"log"

	nenyax "github.com/nenyax/nenyax/bindings/go"
)

// A Go function as the policy, 64 episodes in parallel.
func Example() {
	env, err := nenyax.Load("builtin:arithmetic")
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()

	policy, err := nenyax.NewActionPolicy(func(observation []byte) ([]byte, error) {
		x, err := solve(observation) // reads {"data": {"expression": "46 + 12"}, ...}
		if err != nil {
			return nil, err // fails this episode only
		}
		return json.Marshal(fmt.Sprintf("<answer>%d</answer>", x))
	})
	if err != nil {
		log.Fatal(err)
	}
	defer policy.Close()

	runner, err := nenyax.NewRunner(2)
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close()

	total := 0.0
	err = runner.Run(env, policy, &nenyax.RunOptions{N: 64}, func(i int, t nenyax.Trajectory) error {
		score, _ := t.Score()
		total += score
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("mean score %.2f\n", total/64)

	report, err := nenyax.CheckURI("builtin:arithmetic", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tier:", report.Tier)
	// Output:
	// mean score 1.00
	// tier: audited
}

func ExampleLoad_error() {
	_, err := nenyax.Load("builtin:arithmetic?sise=10")
	fmt.Println(nenyax.IsStatus(err, nenyax.StatusUnknownParameter))
	// Output: true
}

func ExampleEnv_Session() {
	env, err := nenyax.Load("builtin:guess")
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	s, err := env.Session(&nenyax.SessionOptions{Seed: nenyax.Ptr[int64](1)})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	lo, hi := 1, 100
	for !s.Done() {
		step, err := s.Act(fmt.Sprint((lo + hi) / 2))
		if err != nil {
			log.Fatal(err)
		}
		var d struct{ Low, High int }
		_ = json.Unmarshal(step.Observation.Data, &d)
		lo, hi = d.Low, d.High
	}
	j, err := s.Judgment()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("score", j.Score)
	// Output: score 1
}
