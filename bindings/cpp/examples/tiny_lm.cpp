// tiny_lm: a small causal language model, trained from scratch with libtorch, learns a text task
// through Nenyax's loss kernels.
//
// Nenyax does everything but the model: it loads the environment by URI, rolls out groups of
// episodes on its runner with a host policy whose callback samples the model's answer, judges
// them, computes the group advantages (nenyax_advantages, GRPO) and the PPO/GRPO loss with
// dL/dlogp over the model's per-token log-probabilities (nenyax_pg_loss_batch: host f32 on the
// CPU; CUDA memory on torch's current stream with --cuda). libtorch does the forward pass,
// `logp.backward(grad)` and Adam.
//
// The model reads the prompt character by character and answers with one token, one of
// --answers (the digits by default): its next-token distribution at the end of the prompt,
// restricted to those tokens, is the policy. The program wraps the token in the answer tags the
// environment asks for. Held-out questions come from the same environment with another task
// seed, and any that also occurs among the training questions is dropped, so a gain there is a
// rule learned, not answers remembered. See docs/learning.md for what it achieves.
//
//   scripts/tiny_lm.sh                  # sets up torch, builds, runs, writes docs/ figures
//   tiny_lm --out DIR [--cuda] [--rounds N] [--seed S] [--env URI] ... (--help)

#include <torch/torch.h>

#include <nenyax.hpp>
#ifdef NENYAX_TINY_LM_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------
// A minimal JSON reader: the wrapper keeps JSON as text and this example needs a few fields of
// observations, task lists and trajectories, without adding a dependency.

struct Json {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json& operator[](std::string_view key) const {
    for (const auto& [k, v] : object)
      if (k == key) return v;
    return missing();
  }
  const Json& at(std::size_t i) const { return i < array.size() ? array[i] : missing(); }
  bool is_null() const { return kind == Kind::null; }

 private:
  static const Json& missing() {
    static const Json null;
    return null;
  }
};

class JsonReader {
 public:
  static Json parse(std::string_view text) {
    JsonReader r(text);
    Json v = r.value();
    r.space();
    if (r.i_ != r.s_.size()) r.fail("trailing characters");
    return v;
  }

 private:
  explicit JsonReader(std::string_view s) : s_(s) {}

  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("JSON: ") + what + " at byte " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() {
    space();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail("unexpected character");
    ++i_;
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  Json value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.kind = Json::Kind::object;
      ++i_;
      if (peek() == '}') return ++i_, v;
      for (;;) {
        std::string key = string();
        expect(':');
        v.object.emplace_back(std::move(key), value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::array;
      ++i_;
      if (peek() == ']') return ++i_, v;
      for (;;) {
        v.array.push_back(value());
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::string;
      v.string = string();
      return v;
    }
    if (word("true") || word("false")) {
      v.kind = Json::Kind::boolean;
      v.boolean = s_[i_ - 1] == 'e' && s_[i_ - 4] == 't';
      return v;
    }
    if (word("null")) return v;
    const std::size_t start = i_;
    while (i_ < s_.size() &&
           std::string_view("+-0123456789.eE").find(s_[i_]) != std::string_view::npos)
      ++i_;
    if (start == i_) fail("unexpected character");
    v.kind = Json::Kind::number;
    v.number = std::strtod(std::string(s_.substr(start, i_ - start)).c_str(), nullptr);
    return v;
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    unsigned cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      cp = cp * 16 + static_cast<unsigned>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return cp;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && word("\\u"))
            cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4() - 0xDC00);
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default:
          out += e;  // \" \\ \/
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

// A JSON string literal of `s` (the action the environment receives).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// ---------------------------------------------------------------------------------------------
// Seeded randomness of our own, so a run is the same on every platform and libtorch version.

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

// A uniform double in [0, 1) from 64 random bits.
double unit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(splitmix64(seed)) {}
  std::uint64_t next() { return splitmix64(state_ += 0x9E3779B97F4A7C15ull); }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

// ---------------------------------------------------------------------------------------------
// Tokens: one per printable ASCII character, 0 for padding. Fixed, not fitted to any data, so the
// held-out prompts cannot shape it.

constexpr std::int64_t kPad = 0;
constexpr std::int64_t kVocab = 96;  // padding + the 95 printable ASCII characters

std::int64_t token_of(char c) {
  if (c < ' ' || c > '~') throw std::runtime_error("the tokenizer covers printable ASCII only");
  return c - ' ' + 1;
}

// ---------------------------------------------------------------------------------------------
// The model: token + position embeddings, pre-norm transformer blocks with causal attention, a
// final norm and a linear head over the vocabulary.

struct Hyper {
  std::int64_t d_model = 64;
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t max_len = 96;
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(std::int64_t d, std::int64_t heads)
      : heads(heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        qkv(register_module("qkv", torch::nn::Linear(d, 3 * d))),
        proj(register_module("proj", torch::nn::Linear(d, d))),
        fc1(register_module("fc1", torch::nn::Linear(d, 4 * d))),
        fc2(register_module("fc2", torch::nn::Linear(4 * d, d))) {}

  torch::Tensor forward(torch::Tensor x) {
    const auto b = x.size(0), t = x.size(1), d = x.size(2);
    auto q = qkv(ln1(x)).view({b, t, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    auto y = torch::scaled_dot_product_attention(q[0], q[1], q[2], {}, 0.0, /*is_causal=*/true);
    x = x + proj(y.transpose(1, 2).reshape({b, t, d}));
    return x + fc2(torch::gelu(fc1(ln2(x))));
  }

  std::int64_t heads;
  torch::nn::LayerNorm ln1, ln2;
  torch::nn::Linear qkv, proj, fc1, fc2;
};
TORCH_MODULE(Block);

struct TinyLmImpl : torch::nn::Module {
  explicit TinyLmImpl(const Hyper& h)
      : tok(register_module("tok", torch::nn::Embedding(kVocab, h.d_model))),
        pos(register_module("pos", torch::nn::Embedding(h.max_len, h.d_model))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        ln_f(register_module("ln_f",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({h.d_model})))),
        head(register_module("head", torch::nn::Linear(h.d_model, kVocab))) {
    for (std::int64_t i = 0; i < h.layers; ++i) blocks->push_back(Block(h.d_model, h.heads));
  }

  // Log-probabilities of the answer tokens as the next token after each prompt: x holds the
  // right-padded token ids [B, T], lens the prompt lengths [B]; returns [B, answers]. Causal
  // attention keeps the padding after a prompt out of its last position.
  torch::Tensor answer_logp(const torch::Tensor& x, const torch::Tensor& lens,
                            const torch::Tensor& answer_ids) {
    const auto t = x.size(1);
    auto h = tok(x) + pos(torch::arange(t, x.options()));
    for (const auto& block : *blocks) h = block->as<Block>()->forward(h);
    auto last = h.index({torch::arange(x.size(0), x.options()), lens - 1});
    return torch::log_softmax(head(ln_f(last)).index_select(1, answer_ids), -1);
  }

  torch::nn::Embedding tok, pos;
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyLm);

std::int64_t parameter_count(const torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
  std::string env = "builtin:digits?rules=max,min&length=6";
  std::size_t train_size = 20000;
  std::int64_t train_seed = 1;
  std::size_t heldout = 500;
  std::int64_t heldout_seed = 2;
  int rounds = 150;
  std::size_t groups = 32;
  std::size_t group_size = 8;
  int epochs = 2;
  std::size_t minibatches = 2;
  double lr = 1e-3;
  std::uint64_t seed = 0;
  int eval_every = 10;
  std::size_t threads = 0;
  int torch_threads = 0;
  bool cuda = false;
  // verl's GRPO with an entropy bonus: without one the answer distribution collapses before the
  // model reads which rule is asked, and digits that are often wrong early (9 for the smallest,
  // 0 for the largest) are never sampled again (docs/learning.md).
  std::string learner = R"({"learner": "grpo", "entropy_coef": 0.3})";
  std::string answers = "0123456789";
  std::string prompt_until = " Give your final answer";
  std::string out = "target/tiny-lm";
  Hyper hyper;
};

const char* kUsage =
    "tiny_lm: a from-scratch transformer learns a Nenyax text environment through the loss\n"
    "kernels (GRPO: nenyax_advantages + nenyax_pg_loss_batch, backward and Adam in libtorch).\n"
    "\n"
    "  --env URI          environment, without size and seed\n"
    "                     (default builtin:digits?rules=max,min&length=6)\n"
    "  --train-size N     training questions, task seed --train-seed (default 20000, 1)\n"
    "  --heldout N        held-out questions, task seed --heldout-seed (default 500, 2)\n"
    "  --rounds N         rounds of GRPO (default 150)\n"
    "  --groups N         questions per round (default 32)\n"
    "  --group-size N     samples per question (default 8)\n"
    "  --epochs N, --minibatches N   optimiser passes over a round's samples (default 2, 2)\n"
    "  --lr X             Adam learning rate (default 1e-3)\n"
    "  --seed N           model initialisation, question order and sampling (default 0)\n"
    "  --eval-every N     rounds between held-out evaluations (default 10)\n"
    "  --threads N        Nenyax runner workers (default 0: one per core)\n"
    "  --torch-threads N  libtorch intra-op threads (default 0: libtorch's choice)\n"
    "  --learner JSON     loss config (default {\"learner\": \"grpo\", \"entropy_coef\": 0.3}:\n"
    "                     verl's GRPO, k3 KL to the initial weights, and an entropy bonus)\n"
    "  --d-model N, --layers N, --heads N   model size (default 64, 2, 4)\n"
    "  --answers CHARS    the answer tokens (default 0123456789)\n"
    "  --prompt-until S   read the prompt up to S, the answer-format instruction this program\n"
    "                     satisfies itself (default \" Give your final answer\"; \"\" keeps all)\n"
    "  --cuda             model on the GPU, loss through the CUDA entry point on torch's stream\n"
    "  --out DIR          curve.csv, curve.svg, summary.json (default target/tiny-lm)\n";

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    auto num = [&]() { return std::stoll(next()); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--env")
      o.env = next();
    else if (a == "--train-size")
      o.train_size = static_cast<std::size_t>(num());
    else if (a == "--train-seed")
      o.train_seed = num();
    else if (a == "--heldout")
      o.heldout = static_cast<std::size_t>(num());
    else if (a == "--heldout-seed")
      o.heldout_seed = num();
    else if (a == "--rounds")
      o.rounds = static_cast<int>(num());
    else if (a == "--groups")
      o.groups = static_cast<std::size_t>(num());
    else if (a == "--group-size")
      o.group_size = static_cast<std::size_t>(num());
    else if (a == "--epochs")
      o.epochs = static_cast<int>(num());
    else if (a == "--minibatches")
      o.minibatches = static_cast<std::size_t>(num());
    else if (a == "--lr")
      o.lr = std::stod(next());
    else if (a == "--seed")
      o.seed = static_cast<std::uint64_t>(num());
    else if (a == "--eval-every")
      o.eval_every = static_cast<int>(num());
    else if (a == "--threads")
      o.threads = static_cast<std::size_t>(num());
    else if (a == "--torch-threads")
      o.torch_threads = static_cast<int>(num());
    else if (a == "--learner")
      o.learner = next();
    else if (a == "--d-model")
      o.hyper.d_model = num();
    else if (a == "--layers")
      o.hyper.layers = num();
    else if (a == "--heads")
      o.hyper.heads = num();
    else if (a == "--answers")
      o.answers = next();
    else if (a == "--prompt-until")
      o.prompt_until = next();
    else if (a == "--cuda")
      o.cuda = true;
    else if (a == "--out")
      o.out = next();
    else
      throw std::runtime_error("unknown argument " + a + " (see --help)");
  }
  if (o.rounds < 0 || o.groups == 0 || o.group_size < 2 || o.epochs < 1 || o.minibatches == 0 ||
      o.eval_every < 1 || o.answers.empty() || o.heldout == 0 || o.train_size < o.groups)
    throw std::runtime_error("an option is out of range (see --help)");
  return o;
}

std::string with_params(const std::string& uri, std::size_t size, std::int64_t seed) {
  return uri + (uri.find('?') == std::string::npos ? "?" : "&") + "size=" + std::to_string(size) +
         "&seed=" + std::to_string(seed);
}

// ---------------------------------------------------------------------------------------------
// The policy: the model's answer distribution for the prompt of an observation.

struct Encoded {
  torch::Tensor x;     // [B, T] token ids, right-padded
  torch::Tensor lens;  // [B]
};

class Lm {
 public:
  Lm(const Options& o, torch::Device device)
      : model(TinyLm(o.hyper)), device(device), until_(o.prompt_until), max_len_(o.hyper.max_len) {
    std::vector<std::int64_t> ids;
    for (const char c : o.answers) ids.push_back(token_of(c));
    answer_ids = torch::tensor(ids, torch::kLong).to(device);
    model->to(device);
  }

  // The part of an observation's text the model reads.
  std::string prompt(const std::string& text) const {
    const auto cut = until_.empty() ? std::string::npos : text.find(until_);
    return cut == std::string::npos ? text : text.substr(0, cut);
  }

  Encoded encode(const std::vector<const std::string*>& prompts) const {
    std::size_t t = 1;
    for (const auto* p : prompts) t = std::max(t, p->size());
    if (t > static_cast<std::size_t>(max_len_))
      throw std::runtime_error("a prompt has " + std::to_string(t) +
                               " characters; the model reads " + std::to_string(max_len_));
    const auto b = static_cast<std::int64_t>(prompts.size());
    auto x = torch::full({b, static_cast<std::int64_t>(t)}, kPad, torch::kLong);
    auto lens = torch::empty({b}, torch::kLong);
    auto xa = x.accessor<std::int64_t, 2>();
    auto la = lens.accessor<std::int64_t, 1>();
    for (std::int64_t i = 0; i < b; ++i) {
      const std::string& p = *prompts[static_cast<std::size_t>(i)];
      if (p.empty()) throw std::runtime_error("an empty prompt");
      for (std::size_t j = 0; j < p.size(); ++j)
        xa[i][static_cast<std::int64_t>(j)] = token_of(p[j]);
      la[i] = static_cast<std::int64_t>(p.size());
    }
    return {x.to(device), lens.to(device)};
  }

  torch::Tensor answer_logp(const Encoded& e) {
    return model->answer_logp(e.x, e.lens, answer_ids);
  }

  TinyLm model;
  torch::Device device;
  torch::Tensor answer_ids;

 private:
  std::string until_;
  std::int64_t max_len_;
};

// Samples (or, greedy, takes the most likely) answer for each observation. Thread-safe: the
// runner calls it from its workers concurrently. A draw depends on the run's seed, the round,
// the prompt and how many times this prompt was answered before in the round, never on which
// thread asks first: the members of a group share a prompt, so their draws are fixed as a set,
// and sorting each group's rows by answer afterwards makes the whole round reproducible.
class Sampler {
 public:
  Sampler(Lm& lm, std::string answers) : lm_(lm), answers_(std::move(answers)) {}

  void start(std::uint64_t seed, bool greedy) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    greedy_ = greedy;
    seen_.clear();
  }

  std::string act(std::string_view observation_json) {
    const Json obs = JsonReader::parse(observation_json);
    const std::string prompt = lm_.prompt(obs["text"].string);
    torch::Tensor p;
    {
      torch::NoGradGuard no_grad;
      p = lm_.answer_logp(lm_.encode({&prompt})).exp().to(torch::kCPU, torch::kDouble).contiguous();
    }
    const double* probs = p.data_ptr<double>();
    const auto n = static_cast<std::size_t>(p.size(1));
    std::size_t choice = 0;
    if (greedy_) {
      choice = static_cast<std::size_t>(std::max_element(probs, probs + n) - probs);
    } else {
      std::uint64_t k = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        k = seen_[prompt]++;
      }
      const double u = unit(splitmix64(seed_ ^ splitmix64(fnv1a(prompt) + k)));
      double total = 0.0;
      for (std::size_t i = 0; i < n; ++i) total += probs[i];
      double acc = 0.0;
      choice = n - 1;
      for (std::size_t i = 0; i < n; ++i) {
        acc += probs[i];
        if (u * total < acc) {
          choice = i;
          break;
        }
      }
    }
    return json_string("<answer>" + std::string(1, answers_[choice]) + "</answer>");
  }

 private:
  Lm& lm_;
  std::string answers_;
  std::mutex mu_;
  std::uint64_t seed_ = 0;
  bool greedy_ = false;
  std::unordered_map<std::string, std::uint64_t> seen_;
};

// ---------------------------------------------------------------------------------------------
// Rollouts through the runner

struct Row {
  std::string prompt;    // what the model read
  std::string rule;      // observation data "rule", when the environment gives one (per-rule score)
  std::string expected;  // the judgment's "expected" detail: reported per answer, never trained on
  std::int64_t answer = 0;
  double reward = 0.0;
  std::int64_t group = 0;
};

std::vector<Row> rollout(const nenyax::Runner& runner, const nenyax::Env& env,
                         const nenyax::Policy& policy, const Lm& lm, const std::string& answers,
                         const std::vector<std::string>& task_ids, std::size_t group_size) {
  std::string opts = "{\"n\": " + std::to_string(task_ids.size() * group_size) + ", \"tasks\": [";
  for (std::size_t i = 0; i < task_ids.size(); ++i)
    for (std::size_t g = 0; g < group_size; ++g)
      opts += std::string(i || g ? "," : "") + "{\"id\":" + json_string(task_ids[i]) + "}";
  opts += "]}";
  std::vector<Row> rows;
  runner.run(env, policy, opts, [&](std::size_t i, std::string_view trajectory_json) {
    const Json t = JsonReader::parse(trajectory_json);
    if (!t["error"].is_null())
      throw std::runtime_error("episode " + std::to_string(i) + " failed: " + t["error"].string);
    Row r;
    r.prompt = lm.prompt(t["initial_observation"]["text"].string);
    r.rule = t["initial_observation"]["data"]["rule"].string;
    const std::string& action = t["steps"].at(0)["action"].string;  // "<answer>d</answer>"
    const auto open = action.find('>');
    const auto k =
        open == std::string::npos ? std::string::npos : answers.find(action.at(open + 1));
    if (k == std::string::npos)
      throw std::runtime_error("episode " + std::to_string(i) + ": unexpected action " + action);
    r.answer = static_cast<std::int64_t>(k);
    r.reward = t["judgment"]["score"].number;
    r.expected = t["judgment"]["details"]["expected"].string;
    r.group = static_cast<std::int64_t>(i / group_size);
    rows.push_back(std::move(r));
  });
  return rows;
}

// ---------------------------------------------------------------------------------------------
// The loss through Nenyax: host f32 on the CPU, CUDA memory on torch's stream with --cuda.

struct Stats {
  double loss = 0, clip_fraction = 0, approx_kl = 0, kl = 0, entropy = 0;
};

// logp and entropy are the model's (with autograd); the loss sees their values, and its
// gradients dL/dlogp and dL/dentropy come back in grad_logp and grad_entropy for backward().
Stats pg_loss(const torch::Tensor& logp, const torch::Tensor& entropy,
              const torch::Tensor& old_logp, const torch::Tensor& ref_logp,
              const torch::Tensor& advantages, const std::string& config, torch::Tensor& grad_logp,
              torch::Tensor& grad_entropy) {
  const auto rows = static_cast<std::size_t>(logp.size(0));
  // One answer token per row: width 1, every token counted.
  const std::size_t width = 1;
  Stats s;
  if (logp.is_cuda()) {
#ifdef NENYAX_TINY_LM_CUDA
    auto opts = logp.options();
    auto lp = logp.detach().contiguous();
    auto ent = entropy.detach().contiguous();
    auto old = old_logp.contiguous();
    auto ref = ref_logp.contiguous();
    auto adv = advantages.to(opts).contiguous();
    auto mask = torch::ones({static_cast<std::int64_t>(rows)}, opts.dtype(torch::kUInt8));
    grad_logp = torch::empty_like(lp);
    grad_entropy = torch::empty_like(lp);
    auto stats = torch::zeros({NENYAX_PG_STATS_LEN}, opts.dtype(torch::kDouble));
    nenyax::PgDeviceInputs<float> in;
    in.logp = lp.data_ptr<float>();
    in.old_logp = old.data_ptr<float>();
    in.ref_logp = ref.data_ptr<float>();
    in.entropy = ent.data_ptr<float>();
    in.mask = mask.data_ptr<std::uint8_t>();
    in.advantages = adv.data_ptr<float>();
    in.advantages_len = rows;
    in.rows = rows;
    in.width = width;
    // Queued on torch's current stream: the gradient is ready for backward() in stream order,
    // with no synchronisation here.
    void* stream = c10::cuda::getCurrentCUDAStream().stream();
    nenyax::pg_loss_batch(
        nenyax::pg_batch(in, grad_logp.data_ptr<float>(), grad_entropy.data_ptr<float>(),
                         stats.data_ptr<double>(), stream),
        config);
    auto h = stats.cpu();
    const double* v = h.data_ptr<double>();
    if (v[NENYAX_PG_STATS_LEN - 1] != 0.0)
      throw std::runtime_error("the CUDA loss flagged bad input: " +
                               std::to_string(v[NENYAX_PG_STATS_LEN - 1]));
    s.loss = v[0];
    s.kl = v[2];
    s.entropy = v[3];
    s.clip_fraction = v[4];
    s.approx_kl = v[5];
    return s;
#else
    throw std::runtime_error("tiny_lm was built without CUDA support");
#endif
  }
  auto host = [](const torch::Tensor& t) {
    return t.detach().to(torch::kCPU, torch::kFloat).contiguous();
  };
  auto lp = host(logp), ent = host(entropy), old = host(old_logp), ref = host(ref_logp),
       adv = host(advantages);
  std::vector<std::uint8_t> mask(rows, 1);
  std::vector<float> grad(rows), grad_h(rows);
  nenyax::PgInputs<float> in;
  in.logp = {lp.data_ptr<float>(), rows};
  in.old_logp = {old.data_ptr<float>(), rows};
  in.ref_logp = {ref.data_ptr<float>(), rows};
  in.entropy = {ent.data_ptr<float>(), rows};
  in.mask = mask;
  in.advantages = {adv.data_ptr<float>(), rows};
  in.rows = rows;
  in.width = width;
  const auto st = nenyax::pg_loss_batch(
      nenyax::pg_batch(in, nenyax::View<float>(grad), nenyax::View<float>(grad_h)), config);
  grad_logp =
      torch::from_blob(grad.data(), {static_cast<std::int64_t>(rows)}, torch::kFloat).clone();
  grad_entropy =
      torch::from_blob(grad_h.data(), {static_cast<std::int64_t>(rows)}, torch::kFloat).clone();
  s.loss = st.loss;
  s.kl = st.kl;
  s.entropy = st.entropy;
  s.clip_fraction = st.clip_fraction;
  s.approx_kl = st.approx_kl;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Evaluation and the report

struct Eval {
  double accuracy = 0.0;
  std::map<std::string, std::pair<double, std::size_t>> by_rule;    // rule -> (correct, count)
  std::map<std::string, std::pair<double, std::size_t>> by_answer;  // expected -> (correct, count)
  std::vector<std::string> mistakes;  // a few wrong answers, for the log
};

Eval evaluate(const nenyax::Runner& runner, const nenyax::Env& env, const nenyax::Policy& policy,
              Sampler& sampler, const Lm& lm, const std::string& answers,
              const std::vector<std::string>& ids) {
  sampler.start(0, /*greedy=*/true);
  Eval e;
  double total = 0.0;
  for (const Row& r : rollout(runner, env, policy, lm, answers, ids, 1)) {
    total += r.reward;
    if (r.reward < 1.0 && e.mistakes.size() < 12)
      e.mistakes.push_back(r.prompt + " -> " + answers[static_cast<std::size_t>(r.answer)] +
                           " (expected " + r.expected + ")");
    for (auto* m : {&e.by_rule, &e.by_answer}) {
      auto& [correct, count] =
          (*m)[m == &e.by_rule ? (r.rule.empty() ? "all" : r.rule) : r.expected];
      correct += r.reward;
      ++count;
    }
  }
  e.accuracy = total / static_cast<double>(ids.size());
  return e;
}

struct Point {
  int round = 0;
  std::size_t episodes = 0;
  double seconds = 0.0;
  double train_reward = std::nan("");
  double heldout = std::nan("");
  Stats stats;
};

std::string fmt(double v, int digits = 4) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

// The learning curve as a small hand-written SVG: held-out accuracy (greedy) and the mean
// training reward (sampled) per round, with the chance level.
void write_svg(const std::string& path, const std::vector<Point>& curve, int rounds, double chance,
               const std::string& title) {
  const double w = 640, h = 360, l = 56, r = 150, t = 36, b = 44;
  const double pw = w - l - r, ph = h - t - b;
  auto x = [&](double round) { return l + pw * round / std::max(rounds, 1); };
  auto y = [&](double v) { return t + ph * (1.0 - v); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << l << "\" y=\"22\" font-size=\"14\">" << xml_escape(title) << "</text>\n";
  for (int k = 0; k <= 5; ++k) {
    const double v = k / 5.0;
    s << "<line x1=\"" << l << "\" x2=\"" << l + pw << "\" y1=\"" << y(v) << "\" y2=\"" << y(v)
      << "\" stroke=\"#e5e5e5\"/>\n<text x=\"" << l - 8 << "\" y=\"" << y(v) + 4
      << "\" text-anchor=\"end\">" << fmt(v, 1) << "</text>\n";
  }
  for (int k = 0; k <= 5; ++k) {
    const double round = rounds * k / 5.0;
    s << "<text x=\"" << x(round) << "\" y=\"" << t + ph + 18 << "\" text-anchor=\"middle\">"
      << static_cast<int>(round) << "</text>\n";
  }
  s << "<text x=\"" << l + pw / 2 << "\" y=\"" << h - 8
    << "\" text-anchor=\"middle\">round</text>\n"
    << "<line x1=\"" << l << "\" x2=\"" << l + pw << "\" y1=\"" << y(chance) << "\" y2=\""
    << y(chance) << "\" stroke=\"#999\" stroke-dasharray=\"4 4\"/>\n"
    << "<rect x=\"" << l << "\" y=\"" << t << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  auto line = [&](bool heldout, const char* colour) {
    s << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\""
      << (heldout ? 2 : 1.2) << "\" points=\"";
    for (const auto& p : curve) {
      const double v = heldout ? p.heldout : p.train_reward;
      if (!std::isnan(v)) s << x(p.round) << "," << y(v) << " ";
    }
    s << "\"/>\n";
  };
  line(false, "#aaaaaa");
  line(true, "#1f6fb4");
  for (const auto& p : curve)
    if (!std::isnan(p.heldout))
      s << "<circle cx=\"" << x(p.round) << "\" cy=\"" << y(p.heldout)
        << "\" r=\"3\" fill=\"#1f6fb4\"/>\n";
  const double lx = l + pw + 12;
  s << "<line x1=\"" << lx << "\" x2=\"" << lx + 20 << "\" y1=\"" << t + 10 << "\" y2=\"" << t + 10
    << "\" stroke=\"#1f6fb4\" stroke-width=\"2\"/><text x=\"" << lx + 26 << "\" y=\"" << t + 14
    << "\">held-out (greedy)</text>\n"
    << "<line x1=\"" << lx << "\" x2=\"" << lx + 20 << "\" y1=\"" << t + 30 << "\" y2=\"" << t + 30
    << "\" stroke=\"#aaaaaa\"/><text x=\"" << lx + 26 << "\" y=\"" << t + 34
    << "\">training reward</text>\n"
    << "<line x1=\"" << lx << "\" x2=\"" << lx + 20 << "\" y1=\"" << t + 50 << "\" y2=\"" << t + 50
    << "\" stroke=\"#999\" stroke-dasharray=\"4 4\"/><text x=\"" << lx + 26 << "\" y=\"" << t + 54
    << "\">chance</text>\n</svg>\n";
  std::ofstream(path) << s.str();
}

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&]() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (o.torch_threads > 0) torch::set_num_threads(o.torch_threads);
  torch::manual_seed(o.seed);
  torch::Device device(torch::kCPU);
  if (o.cuda) {
#ifdef NENYAX_TINY_LM_CUDA
    if (!torch::cuda::is_available()) throw std::runtime_error("--cuda: libtorch sees no GPU");
    std::printf("GPU for the loss: %s\n", nenyax::cuda_device().c_str());
    device = torch::Device(torch::kCUDA, 0);
#else
    throw std::runtime_error("--cuda: tiny_lm was built without CUDA support");
#endif
  }

  // The environment: training and held-out questions from different task seeds.
  const std::string train_uri = with_params(o.env, o.train_size, o.train_seed);
  const std::string heldout_uri = with_params(o.env, o.heldout, o.heldout_seed);
  auto train_env = nenyax::Env::load(train_uri);
  auto heldout_env = nenyax::Env::load(heldout_uri);
  Lm lm(o, device);
  // Each distinct held-out question once: a seeded draw can repeat a question (the largest of
  // six digits is 0 only for "0 0 0 0 0 0"), and repeats would weigh it several times.
  std::set<std::string> heldout_prompts;
  std::vector<std::string> heldout_ids;
  std::map<std::string, std::size_t> heldout_answers;
  for (const Json& task : JsonReader::parse(heldout_env.tasks()).array) {
    if (!heldout_prompts.insert(lm.prompt(task["prompt"].string)).second) continue;
    heldout_ids.push_back(task["id"].string);
    ++heldout_answers[task["metadata"]["answer"].string];
  }
  std::size_t most_common = 0;
  for (const auto& [answer, count] : heldout_answers) most_common = std::max(most_common, count);
  const double best_constant =
      static_cast<double>(most_common) / static_cast<double>(heldout_ids.size());
  std::vector<std::string> train_ids;
  std::size_t overlap = 0;
  for (const Json& task : JsonReader::parse(train_env.tasks()).array) {
    if (heldout_prompts.count(lm.prompt(task["prompt"].string))) {
      ++overlap;  // a held-out question is never trained on
      continue;
    }
    train_ids.push_back(task["id"].string);
  }
  const double chance = 1.0 / static_cast<double>(o.answers.size());
  std::printf(
      "nenyax %s, torch %s\ntrain: %s (%zu questions, %zu dropped as held-out)\n"
      "held-out: %s (%zu distinct questions); chance %.3f, best constant answer %.3f\n",
      std::string(nenyax::version()).c_str(), TORCH_VERSION, train_uri.c_str(), train_ids.size(),
      overlap, heldout_uri.c_str(), heldout_ids.size(), chance, best_constant);

  // The reference policy of the KL term: the initial weights, frozen.
  TinyLm ref(o.hyper);
  {
    torch::NoGradGuard no_grad;
    auto src = lm.model->parameters();
    auto dst = ref->parameters();
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  ref->to(device);
  ref->eval();
  torch::optim::Adam opt(lm.model->parameters(), torch::optim::AdamOptions(o.lr));
  const std::string learner = nenyax::learner_json(o.learner);
  const std::int64_t params = parameter_count(*lm.model);
  std::printf(
      "model: %lld parameters (d_model %lld, %lld layers, %lld heads), device %s\nloss: %s\n",
      static_cast<long long>(params), static_cast<long long>(o.hyper.d_model),
      static_cast<long long>(o.hyper.layers), static_cast<long long>(o.hyper.heads),
      o.cuda ? "cuda" : "cpu", learner.c_str());

  Sampler sampler(lm, o.answers);
  auto policy = nenyax::Policy::action(
      [&sampler](std::string_view obs) { return sampler.act(obs); }, /*thread_safe=*/true);
  nenyax::Runner runner(o.threads);

  std::vector<Point> curve;
  const Eval before = evaluate(runner, heldout_env, policy, sampler, lm, o.answers, heldout_ids);
  Point p0;
  p0.heldout = before.accuracy;
  p0.seconds = seconds();
  curve.push_back(p0);
  std::printf("round   0  held-out %.3f\n", before.accuracy);

  Rng order(o.seed ^ 0x5EEDull);
  double rollout_s = 0.0, update_s = 0.0;
  std::size_t episodes = 0;
  Eval last = before;
  for (int round = 1; round <= o.rounds; ++round) {
    // Distinct questions in a round, so that a prompt's draws belong to one group.
    std::vector<std::string> ids;
    std::set<std::size_t> picked;
    while (ids.size() < o.groups) {
      const std::size_t k = order.below(train_ids.size());
      if (picked.insert(k).second) ids.push_back(train_ids[k]);
    }
    auto ts = std::chrono::steady_clock::now();
    sampler.start(splitmix64(o.seed * 1000003ull + static_cast<std::uint64_t>(round)), false);
    std::vector<Row> rows = rollout(runner, train_env, policy, lm, o.answers, ids, o.group_size);
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return a.group != b.group ? a.group < b.group : a.answer < b.answer;
    });
    episodes += rows.size();
    const double t_roll =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
    rollout_s += t_roll;

    ts = std::chrono::steady_clock::now();
    const auto n = static_cast<std::int64_t>(rows.size());
    std::vector<double> rewards;
    std::vector<std::int64_t> groups;
    std::vector<const std::string*> prompts;
    std::vector<std::int64_t> answers;
    for (const Row& r : rows) {
      rewards.push_back(r.reward);
      groups.push_back(r.group);
      prompts.push_back(&r.prompt);
      answers.push_back(r.answer);
    }
    const std::vector<double> adv =
        nenyax::advantages(rewards, groups, R"({"estimator": "grpo_verl"})");
    const Encoded all = lm.encode(prompts);
    const auto tokens = torch::tensor(answers, torch::kLong).to(device).unsqueeze(1);
    const auto advantages = torch::tensor(adv, torch::kDouble).to(torch::kFloat).to(device);
    torch::Tensor old_logp, ref_logp;
    {
      torch::NoGradGuard no_grad;
      old_logp = lm.answer_logp(all).gather(1, tokens).squeeze(1);
      ref_logp = ref->answer_logp(all.x, all.lens, lm.answer_ids).gather(1, tokens).squeeze(1);
    }
    Stats stats;
    const double mean_reward =
        std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(n);
    for (int epoch = 0; epoch < o.epochs; ++epoch) {
      std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[order.below(i)]);
      const auto mb = (n + static_cast<std::int64_t>(o.minibatches) - 1) /
                      static_cast<std::int64_t>(o.minibatches);
      for (std::int64_t s = 0; s < n; s += mb) {
        const auto idx = torch::tensor(std::vector<std::int64_t>(
                                           perm.begin() + s, perm.begin() + std::min(n, s + mb)),
                                       torch::kLong)
                             .to(device);
        const Encoded part{all.x.index_select(0, idx), all.lens.index_select(0, idx)};
        auto dist = lm.answer_logp(part);
        auto logp = dist.gather(1, tokens.index_select(0, idx)).squeeze(1);
        // The entropy of the answer distribution, for the loss's entropy bonus (entropy_coef).
        auto entropy = -(dist.exp() * dist).sum(1);
        torch::Tensor grad_logp, grad_entropy;
        stats = pg_loss(logp, entropy, old_logp.index_select(0, idx), ref_logp.index_select(0, idx),
                        advantages.index_select(0, idx), learner, grad_logp, grad_entropy);
        opt.zero_grad();
        torch::autograd::backward({logp, entropy},
                                  {grad_logp.to(logp.device()), grad_entropy.to(logp.device())});
        torch::nn::utils::clip_grad_norm_(lm.model->parameters(), 1.0);
        opt.step();
      }
    }
    update_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();

    Point p;
    p.round = round;
    p.episodes = episodes;
    p.train_reward = mean_reward;
    p.stats = stats;
    if (round % o.eval_every == 0 || round == o.rounds) {
      last = evaluate(runner, heldout_env, policy, sampler, lm, o.answers, heldout_ids);
      p.heldout = last.accuracy;
    }
    p.seconds = seconds();
    curve.push_back(p);
    std::printf(
        "round %3d  reward %.3f  loss %+.4f  clip %.3f  kl %.3f  entropy %.3f  %6.1fs%s%s\n", round,
        mean_reward, stats.loss, stats.clip_fraction, stats.kl, stats.entropy, p.seconds,
        std::isnan(p.heldout) ? "" : "  held-out ", fmt(p.heldout, 3).c_str());
    std::fflush(stdout);
  }
  const double wall = seconds();

  // The report.
  std::filesystem::create_directories(o.out);
  std::ofstream csv(o.out + "/curve.csv");
  csv << "round,episodes,seconds,train_reward,heldout_accuracy,loss,clip_fraction,approx_kl,kl,"
         "entropy\n";
  for (const auto& p : curve)
    csv << p.round << "," << p.episodes << "," << fmt(p.seconds, 2) << "," << fmt(p.train_reward)
        << "," << fmt(p.heldout) << "," << fmt(p.stats.loss, 6) << "," << fmt(p.stats.clip_fraction)
        << "," << fmt(p.stats.approx_kl, 6) << "," << fmt(p.stats.kl, 6) << ","
        << fmt(p.stats.entropy, 6) << "\n";
  write_svg(o.out + "/curve.svg", curve, o.rounds, chance,
            "tiny_lm on " + o.env + ": held-out accuracy from chance");
  std::ostringstream rules;
  for (const auto& [rule, ck] : last.by_rule)
    rules << (rules.tellp() ? ", " : "") << json_string(rule) << ": "
          << fmt(ck.first / static_cast<double>(ck.second));
  std::ostringstream answers_after;
  for (const auto& [answer, ck] : last.by_answer)
    answers_after << (answers_after.tellp() ? ", " : "") << json_string(answer)
                  << ": {\"accuracy\": " << fmt(ck.first / static_cast<double>(ck.second))
                  << ", \"questions\": " << ck.second << "}";
  std::ostringstream before_rules;
  for (const auto& [rule, ck] : before.by_rule)
    before_rules << (before_rules.tellp() ? ", " : "") << json_string(rule) << ": "
                 << fmt(ck.first / static_cast<double>(ck.second));
  std::ofstream(o.out + "/summary.json")
      << "{\n  \"env\": " << json_string(o.env) << ",\n  \"train_uri\": " << json_string(train_uri)
      << ",\n  \"heldout_uri\": " << json_string(heldout_uri)
      << ",\n  \"train_questions\": " << train_ids.size()
      << ",\n  \"heldout_questions\": " << heldout_ids.size()
      << ",\n  \"dropped_as_heldout\": " << overlap << ",\n  \"chance\": " << fmt(chance)
      << ",\n  \"best_constant_answer\": " << fmt(best_constant)
      << ",\n  \"heldout_before\": " << fmt(before.accuracy)
      << ",\n  \"heldout_after\": " << fmt(last.accuracy) << ",\n  \"heldout_before_by_rule\": {"
      << before_rules.str() << "},\n  \"heldout_after_by_rule\": {" << rules.str()
      << "},\n  \"heldout_after_by_answer\": {" << answers_after.str()
      << "},\n  \"rounds\": " << o.rounds << ",\n  \"episodes\": " << episodes
      << ",\n  \"groups\": " << o.groups << ",\n  \"group_size\": " << o.group_size
      << ",\n  \"parameters\": " << params << ",\n  \"d_model\": " << o.hyper.d_model
      << ",\n  \"layers\": " << o.hyper.layers << ",\n  \"heads\": " << o.hyper.heads
      << ",\n  \"device\": \"" << (o.cuda ? "cuda" : "cpu") << "\",\n  \"seed\": " << o.seed
      << ",\n  \"learner\": " << learner << ",\n  \"wall_s\": " << fmt(wall, 1)
      << ",\n  \"rollout_s\": " << fmt(rollout_s, 1) << ",\n  \"update_s\": " << fmt(update_s, 1)
      << ",\n  \"torch_threads\": " << torch::get_num_threads()
      << ",\n  \"runner_threads\": " << runner.threads() << ",\n  \"nenyax\": \""
      << nenyax::version() << "\",\n  \"torch\": \"" << TORCH_VERSION << "\"\n}\n";
  std::printf("some held-out mistakes after training:\n");
  for (const auto& m : last.mistakes) std::printf("  %s\n", m.c_str());
  std::printf(
      "held-out accuracy: %.3f -> %.3f (chance %.3f) after %d rounds, %zu episodes, %.0f s "
      "(rollouts %.0f s, updates %.0f s); results in %s\n",
      before.accuracy, last.accuracy, chance, o.rounds, episodes, wall, rollout_s, update_s,
      o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const nenyax::Error& e) {
    std::fprintf(stderr, "tiny_lm: nenyax error %s: %s\n", nenyax::status_name(e.status()),
                 e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tiny_lm: %s\n", e.what());
  }
  return 1;
}
