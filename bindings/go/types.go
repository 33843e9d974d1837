package nenyax

import "encoding/json"

// The contract types, decoded with encoding/json. Field names follow docs/protocol.md; JSON
// null becomes the zero value (or nil for pointers and maps). Where a type carries a Raw
// field, it holds the exact JSON the library returned, including fields this package does
// not model.

// Capabilities is what an environment can do (see docs/protocol.md).
type Capabilities struct {
	Resettable   bool     `json:"resettable"`
	Branchable   bool     `json:"branchable"`
	MaxParallel  *uint64  `json:"max_parallel"`
	Participants uint32   `json:"participants"`
	Text         bool     `json:"text"`
	RewardTiming string   `json:"reward_timing"`
	RealWorld    bool     `json:"real_world"`
	Risk         string   `json:"risk"`
	Requires     []string `json:"requires"`
	Isolation    string   `json:"isolation"`
	TokenCapture string   `json:"token_capture"`
}

// Manifest is the identity and capabilities of a loaded environment (the common fields;
// Env.Manifest returns the whole JSON).
type Manifest struct {
	ID                string          `json:"id"`
	Protocol          string          `json:"protocol"`
	Name              string          `json:"name"`
	SourceFormat      string          `json:"source_format"`
	Mode              string          `json:"mode"` // "step", "rollout" or "task"
	Capabilities      Capabilities    `json:"capabilities"`
	Version           string          `json:"version"`
	License           string          `json:"license"`
	Description       string          `json:"description"`
	ActionSchema      json.RawMessage `json:"action_schema"`
	ObservationSchema json.RawMessage `json:"observation_schema"`
	NumTasks          *uint64         `json:"num_tasks"`
	Extra             map[string]any  `json:"extra"`
}

// TaskRef points at one concrete situation in an environment. Pass it back unchanged (e.g.
// in RolloutOptions.Task) to replay that task.
type TaskRef struct {
	ID       string         `json:"id"`
	Split    *string        `json:"split"`
	Prompt   *string        `json:"prompt"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Observation is what the policy sees: Data is the native observation (JSON), Text its
// text rendering, Messages a chat-shaped rendering (JSON array or null), Info side data.
type Observation struct {
	Data     json.RawMessage `json:"data"`
	Text     *string         `json:"text"`
	Messages json.RawMessage `json:"messages"`
	Info     map[string]any  `json:"info"`
}

// Step is the result of one action.
type Step struct {
	Action      json.RawMessage `json:"action"`
	Observation Observation     `json:"observation"`
	Reward      float64         `json:"reward"`
	Terminated  bool            `json:"terminated"`
	Truncated   bool            `json:"truncated"`
	Info        map[string]any  `json:"info"`
}

// Done reports whether the episode ended with this step.
func (s Step) Done() bool { return s.Terminated || s.Truncated }

// Message is one chat message; Content is a JSON string, a list of parts, or null.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID *string         `json:"tool_call_id,omitempty"`
}

// ModelCall is one request/response pair with a model endpoint, raw bodies included.
type ModelCall struct {
	Request            map[string]any `json:"request"`
	Response           map[string]any `json:"response"`
	Error              *string        `json:"error"`
	LatencyS           *float64       `json:"latency_s"`
	PromptTokenIDs     []int64        `json:"prompt_token_ids"`
	CompletionTokenIDs []int64        `json:"completion_token_ids"`
	CompletionLogprobs []float64      `json:"completion_logprobs"`
}

// Judgment is the verdict on an episode.
type Judgment struct {
	Score      float64            `json:"score"`
	Passed     *bool              `json:"passed"`
	Components map[string]float64 `json:"components"`
	Source     string             `json:"source"`
	Judge      *string            `json:"judge"`
	Details    map[string]any     `json:"details"`
}

// Trajectory is the complete, judged record of one episode. A failed episode is not a Go
// error: Error says why it failed ("<Kind>: <message>") and Judgment is usually nil.
type Trajectory struct {
	EnvID              string         `json:"env_id"`
	Mode               string         `json:"mode"`
	Protocol           string         `json:"protocol"`
	Task               *TaskRef       `json:"task"`
	Seed               *int64         `json:"seed"`
	InitialObservation *Observation   `json:"initial_observation"`
	Steps              []Step         `json:"steps"`
	Messages           []Message      `json:"messages"`
	ModelCalls         []ModelCall    `json:"model_calls"`
	Judgment           *Judgment      `json:"judgment"`
	Error              *string        `json:"error"`
	StartedAt          float64        `json:"started_at"`
	DurationS          *float64       `json:"duration_s"`
	Metadata           map[string]any `json:"metadata"`

	// Raw is the trajectory's JSON exactly as the library wrote it.
	Raw json.RawMessage `json:"-"`
}

// OK reports whether the episode finished without error and was judged.
func (t *Trajectory) OK() bool { return t.Error == nil && t.Judgment != nil }

// Score returns the judgment's score, and false when the episode was not judged.
func (t *Trajectory) Score() (float64, bool) {
	if t.Judgment == nil {
		return 0, false
	}
	return t.Judgment.Score, true
}

// Err returns the episode's error message, or "" when it has none.
func (t *Trajectory) Err() string {
	if t.Error == nil {
		return ""
	}
	return *t.Error
}

func decodeTrajectory(data []byte) (Trajectory, error) {
	var t Trajectory
	if err := decode("trajectory", data, &t); err != nil {
		return Trajectory{}, err
	}
	t.Raw = data
	return t, nil
}

// CheckResult is one conformance check.
type CheckResult struct {
	Name      string  `json:"name"`
	Tier      string  `json:"tier"`
	Status    string  `json:"status"` // "pass", "fail" or "skip"
	Detail    string  `json:"detail"`
	DurationS float64 `json:"duration_s"`
}

// Report is a conformance report: the highest Tier reached ("none", "connectable",
// "evaluable", "trainable" or "audited") and every check.
type Report struct {
	EnvID  string        `json:"env_id"`
	Mode   string        `json:"mode"`
	Tier   string        `json:"tier"`
	Checks []CheckResult `json:"checks"`

	// Raw is the report's JSON exactly as the library wrote it.
	Raw json.RawMessage `json:"-"`
}

func decodeReport(data []byte) (Report, error) {
	var r Report
	if err := decode("report", data, &r); err != nil {
		return Report{}, err
	}
	r.Raw = data
	return r, nil
}

// RolloutOptions are the options of Env.Rollout; nil or zero fields mean the defaults.
type RolloutOptions struct {
	// The task to play (default: the environment's choice).
	Task *TaskRef `json:"task,omitempty"`
	// The episode's seed (default: none).
	Seed *int64 `json:"seed,omitempty"`
	// A step limit; 0 means the environment's own.
	MaxSteps int `json:"max_steps,omitempty"`
	// Which episode this is, for per-episode policies (default: a plain run).
	Context *EpisodeContext `json:"context,omitempty"`
}

// EpisodeContext says which episode a rollout is (what NewEpisodeActionPolicy functions see).
// Seed and TaskID default to the rollout's, SampleSeed to one derived from the rest.
type EpisodeContext struct {
	Phase      string  `json:"phase,omitempty"` // "run" (default), "train" or "eval"
	Round      uint32  `json:"round,omitempty"`
	Group      uint32  `json:"group,omitempty"`
	Member     uint32  `json:"member,omitempty"`
	Seed       *int64  `json:"seed,omitempty"`
	TaskID     *string `json:"task_id,omitempty"`
	SampleSeed *uint64 `json:"sample_seed,omitempty"`
}

// SessionOptions are the options of Env.Session.
type SessionOptions struct {
	Task *TaskRef `json:"task,omitempty"`
	Seed *int64   `json:"seed,omitempty"`
}

// RunOptions are the options of Runner.Run; nil or zero fields mean the defaults.
type RunOptions struct {
	// Number of episodes; 0 means the library's default (10).
	N int `json:"n,omitempty"`
	// Seed of the first episode; episode i gets Seed+i.
	Seed int64 `json:"seed"`
	// A step limit; 0 means the environment's own.
	MaxSteps int `json:"max_steps,omitempty"`
	// Tasks to cycle through (default: the environment's tasks, cycled).
	Tasks []TaskRef `json:"tasks,omitempty"`
}

// CheckOptions are the options of Env.Check and CheckURI; zero fields mean the defaults.
type CheckOptions struct {
	// Episodes per check (default 8).
	Samples int `json:"samples,omitempty"`
	// Threads of the parallel check (default 2).
	Threads int `json:"threads,omitempty"`
}

// EndpointSpec describes an OpenAI-compatible chat endpoint (NewEndpointPolicy).
type EndpointSpec struct {
	// Base URL, e.g. "http://localhost:8000/v1".
	BaseURL string `json:"base_url"`
	Model   string `json:"model"`
	// Name of the environment variable holding the API key (optional).
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// Whole-request timeout in seconds; nil means 600.
	TimeoutS *float64 `json:"timeout_s,omitempty"`
	// Retries on 429, 5xx and connection errors; nil means 3.
	Retries *uint32 `json:"retries,omitempty"`
	// Initial backoff in seconds, doubled each retry; nil means 0.5.
	BackoffS *float64 `json:"backoff_s,omitempty"`
	// Request parameters sent with every call (temperature, max_tokens, ...).
	Params map[string]any `json:"params,omitempty"`
}

// Ptr returns a pointer to v, for the optional fields of the option structs
// (e.g. RolloutOptions{Seed: nenyax.Ptr[int64](7)}).
func Ptr[T any](v T) *T { return &v }
