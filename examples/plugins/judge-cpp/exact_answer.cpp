// A Nenyax judge plugin in C++: `exact_answer` scores 1 when the episode's final answer equals
// the task's metadata `answer` (the text inside <answer></answer> when there is one, whitespace
// collapsed, case ignored), else 0. Build: see README.md. Nothing here calls libnenyax: a plugin
// gets everything it needs through the descriptor's function pointers.
//
// Compile-time switches, used by the tests:
//   -DEXAMPLE_ABI_VERSION=2  claim another plugin ABI version (Nenyax must refuse the library)
//   -DEXAMPLE_BROKEN         always score 1 (a judge that cannot discriminate)
//   -DEXAMPLE_CRASH          dereference NULL inside judge (a crashing plugin)

#include "../../../include/nenyax.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#ifndef EXAMPLE_ABI_VERSION
#define EXAMPLE_ABI_VERSION NENYAX_PLUGIN_ABI_VERSION
#endif

namespace {

// ---- a minimal JSON reader: enough for a trajectory ----------------------------------------

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  std::string text;  // a string's value, or a number's literal
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;

  const Json *get(const char *key) const {
    for (const auto &f : fields)
      if (f.first == key) return &f.second;
    return nullptr;
  }
};

struct Parser {
  const char *p, *end;
  std::string error;

  void ws() {
    while (p < end && std::isspace(static_cast<unsigned char>(*p))) ++p;
  }
  bool fail(const char *what) {
    if (error.empty()) error = what;
    return false;
  }
  static void utf8(std::string &out, unsigned cp) {
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
  }
  bool hex4(unsigned &v) {
    if (end - p < 4) return fail("short \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i, ++p) {
      char c = *p;
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else return fail("bad \\u escape");
    }
    return true;
  }
  bool string(std::string &out) {
    if (p >= end || *p != '"') return fail("expected a string");
    ++p;
    while (p < end && *p != '"') {
      char c = *p++;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p >= end) return fail("unterminated escape");
      char e = *p++;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          unsigned cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
            p += 2;
            unsigned lo;
            if (!hex4(lo)) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: out += e;  // \" \\ \/
      }
    }
    if (p >= end) return fail("unterminated string");
    ++p;
    return true;
  }
  bool value(Json &v, int depth = 0) {
    if (depth > 200) return fail("nested too deeply");
    ws();
    if (p >= end) return fail("unexpected end");
    char c = *p;
    if (c == '{') {
      v.kind = Json::Object;
      ++p;
      ws();
      if (p < end && *p == '}') return ++p, true;
      for (;;) {
        ws();
        std::string key;
        if (!string(key)) return false;
        ws();
        if (p >= end || *p != ':') return fail("expected ':'");
        ++p;
        v.fields.emplace_back(std::move(key), Json());
        if (!value(v.fields.back().second, depth + 1)) return false;
        ws();
        if (p < end && *p == ',') { ++p; continue; }
        if (p < end && *p == '}') return ++p, true;
        return fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++p;
      ws();
      if (p < end && *p == ']') return ++p, true;
      for (;;) {
        v.items.emplace_back();
        if (!value(v.items.back(), depth + 1)) return false;
        ws();
        if (p < end && *p == ',') { ++p; continue; }
        if (p < end && *p == ']') return ++p, true;
        return fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      return string(v.text);
    }
    auto word = [&](const char *w, Json::Kind k, bool b) {
      size_t n = std::strlen(w);
      if (static_cast<size_t>(end - p) < n || std::strncmp(p, w, n) != 0) return fail("bad literal");
      p += n;
      v.kind = k;
      v.b = b;
      return true;
    };
    if (c == 't') return word("true", Json::Bool, true);
    if (c == 'f') return word("false", Json::Bool, false);
    if (c == 'n') return word("null", Json::Null, false);
    const char *start = p;
    while (p < end && (std::isdigit(static_cast<unsigned char>(*p)) || std::strchr("+-.eE", *p))) ++p;
    if (p == start) return fail("unexpected character");
    v.kind = Json::Number;
    v.text.assign(start, p);
    return true;
  }
};

// ---- the judge ----------------------------------------------------------------------------

std::string json_string(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string normalize(const std::string &s) {
  std::string out;
  bool space = false;
  for (unsigned char c : s) {
    if (std::isspace(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += static_cast<char>(std::tolower(c));
  }
  return out;
}

// The final text: the last assistant message's string content, else the last step's action.
std::string final_text(const Json &traj) {
  if (const Json *msgs = traj.get("messages")) {
    for (auto it = msgs->items.rbegin(); it != msgs->items.rend(); ++it) {
      const Json *role = it->get("role");
      const Json *content = it->get("content");
      if (role && role->text == "assistant" && content && content->kind == Json::String)
        return content->text;
    }
  }
  if (const Json *steps = traj.get("steps")) {
    if (!steps->items.empty()) {
      const Json *action = steps->items.back().get("action");
      if (action && (action->kind == Json::String || action->kind == Json::Number)) return action->text;
    }
  }
  return "";
}

// The text inside the last <answer></answer>, else the whole text.
std::string extract(const std::string &text) {
  size_t open = text.rfind("<answer>");
  if (open == std::string::npos) return text;
  size_t from = open + std::strlen("<answer>");
  size_t close = text.find("</answer>", from);
  return text.substr(from, close == std::string::npos ? std::string::npos : close - from);
}

void write(const nenyax_plugin_out_t *out, const std::string &s) {
  if (out && out->write) out->write(out->ctx, s.data(), s.size());
}

int32_t judge(void *user_data, const char *trajectory, size_t len, const nenyax_plugin_out_t *out) {
  (void)user_data;
#ifdef EXAMPLE_CRASH
  volatile int *nowhere = nullptr;
  *nowhere = 1;  // on purpose: the host must name this plugin as it dies
#endif
  Json traj;
  Parser parser{trajectory, trajectory + len, {}};
  if (!parser.value(traj)) {
    write(out, "exact_answer: the trajectory is not JSON: " + parser.error);
    return 1;
  }
  const Json *task = traj.get("task");
  const Json *meta = task ? task->get("metadata") : nullptr;
  const Json *answer = meta ? meta->get("answer") : nullptr;
  if (!answer || (answer->kind != Json::String && answer->kind != Json::Number)) {
    write(out, "exact_answer needs the task's metadata field `answer` (a string or number)");
    return 2;
  }
  std::string got = extract(final_text(traj));
  bool hit = normalize(got) == normalize(answer->text);
#ifdef EXAMPLE_BROKEN
  hit = true;  // on purpose: a judge that passes everything
#endif
  write(out, std::string("{\"score\": ") + (hit ? "1.0" : "0.0") + ", \"passed\": " +
                 (hit ? "true" : "false") + ", \"details\": {\"got\": " + json_string(got) +
                 ", \"expected\": " + json_string(answer->text) + "}}");
  return 0;
}

const nenyax_judge_vtable_t VTABLE = {NENYAX_JUDGE_VTABLE_VERSION, judge, nullptr};

// Stateless and reentrant, so it may be called from several rollout threads at once.
const nenyax_plugin_t PLUGINS[] = {{
    EXAMPLE_ABI_VERSION,
    NENYAX_PLUGIN_KIND_JUDGE,
    NENYAX_JUDGE_VTABLE_VERSION,
    NENYAX_PLUGIN_THREAD_SAFE,
    "exact_answer",
    "0.1.0",
    &VTABLE,
    nullptr,
}};

}  // namespace

extern "C" int32_t nenyax_plugin_entry(uint32_t host_abi_version, const nenyax_plugin_t **plugins,
                                       size_t *count) {
  (void)host_abi_version;  // the host checks each descriptor's abi_version itself
  *plugins = PLUGINS;
  *count = sizeof PLUGINS / sizeof PLUGINS[0];
  return 0;
}
