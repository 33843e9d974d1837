// The test harness shared by the C++ wrapper's test programs: TEST, CHECK, CHECK_STATUS, a few
// JSON look-ups, and the runner behind main():
//
//   <program>            run every test
//   <program> NAME...    run the named tests (ctest registers one entry per name)
//   <program> --list     print the names

#ifndef NENYAX_TEST_HARNESS_HPP
#define NENYAX_TEST_HARNESS_HPP

#include <nenyax.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

struct Failure {
  std::string message;
};

inline std::vector<std::pair<std::string, std::function<void()>>>& registry() {
  static std::vector<std::pair<std::string, std::function<void()>>> tests;
  return tests;
}

struct Register {
  Register(const char* name, std::function<void()> fn) {
    registry().emplace_back(name, std::move(fn));
  }
};

#define TEST(name)                                   \
  void test_##name();                                \
  const Register register_##name(#name, test_##name); \
  void test_##name()

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::ostringstream os_;                                                         \
      os_ << __FILE__ << ":" << __LINE__ << ": CHECK(" #cond ") failed";              \
      throw Failure{os_.str()};                                                       \
    }                                                                                 \
  } while (0)

#define CHECK_MSG(cond, msg)                                                          \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::ostringstream os_;                                                         \
      os_ << __FILE__ << ":" << __LINE__ << ": CHECK(" #cond ") failed: " << msg;     \
      throw Failure{os_.str()};                                                       \
    }                                                                                 \
  } while (0)

// Expect `expr` to throw nenyax::Error with `status`.
#define CHECK_STATUS(expr, want_status)                                                         \
  do {                                                                                     \
    bool thrown_ = false;                                                                  \
    try {                                                                                  \
      (void)(expr);                                                                        \
    } catch (const nenyax::Error& e_) {                                                    \
      thrown_ = true;                                                                      \
      CHECK_MSG(e_.status() == (want_status), #expr " threw " << nenyax::status_name(e_.status()) \
                                                  << " (" << e_.what() << "), expected "   \
                                                  << nenyax::status_name(want_status));         \
      CHECK_MSG(std::strlen(e_.what()) > 0, "empty message");                              \
    }                                                                                      \
    CHECK_MSG(thrown_, #expr " did not throw; expected " << nenyax::status_name(want_status));  \
  } while (0)

// ---------------------------------------------------------------------------------------------
// just enough JSON for the tests (the wrapper itself leaves JSON to the user)

inline bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

inline std::size_t count(std::string_view haystack, std::string_view needle) {
  std::size_t n = 0;
  for (auto pos = haystack.find(needle); pos != std::string_view::npos;
       pos = haystack.find(needle, pos + needle.size()))
    ++n;
  return n;
}

// The JSON string value of the first "key": "..." (escapes other than \" and \\ kept as is).
inline std::string string_field(std::string_view json, std::string_view key) {
  const std::string pat = "\"" + std::string(key) + "\":\"";
  auto pos = json.find(pat);
  if (pos == std::string_view::npos) return {};
  std::string out;
  for (pos += pat.size(); pos < json.size() && json[pos] != '"'; ++pos) {
    if (json[pos] == '\\' && pos + 1 < json.size()) ++pos;
    out += json[pos];
  }
  return out;
}

// The number after the first "key": (NaN when absent or not a number).
inline double number_field(std::string_view json, std::string_view key) {
  const std::string pat = "\"" + std::string(key) + "\":";
  auto pos = json.find(pat);
  if (pos == std::string_view::npos) return std::nan("");
  const std::string rest(json.substr(pos + pat.size(), 40));
  char* end = nullptr;
  double v = std::strtod(rest.c_str(), &end);
  return end == rest.c_str() ? std::nan("") : v;
}

// A trajectory's score: judgment.score, NaN when there is no judgment.
inline double score_of(std::string_view trajectory) {
  auto pos = trajectory.find("\"judgment\":{");
  if (pos == std::string_view::npos) return std::nan("");
  return number_field(trajectory.substr(pos), "score");
}

inline bool failed(std::string_view trajectory) { return !contains(trajectory, "\"error\":null"); }

// Run the tests the command line names (all without names); the exit status.
inline int run_tests(int argc, char** argv) {
  std::vector<std::string> names(argv + 1, argv + argc);
  if (names.size() == 1 && names[0] == "--list") {
    for (const auto& [name, fn] : registry()) std::printf("%s\n", name.c_str());
    return 0;
  }
  int failures = 0, ran = 0;
  for (const auto& want : names) {
    bool known = false;
    for (const auto& [name, fn] : registry()) known = known || name == want;
    if (!known) {
      std::fprintf(stderr, "unknown test `%s` (see --list)\n", want.c_str());
      return 2;
    }
  }
  for (const auto& [name, fn] : registry()) {
    const bool selected = names.empty() || std::find(names.begin(), names.end(), name) != names.end();
    if (!selected) continue;
    ++ran;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      fn();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("ok    %s (%.0f ms)\n", name.c_str(), ms);
    } catch (const Failure& f) {
      ++failures;
      std::printf("FAIL  %s\n      %s\n", name.c_str(), f.message.c_str());
    } catch (const std::exception& e) {
      ++failures;
      std::printf("FAIL  %s\n      unexpected exception: %s\n", name.c_str(), e.what());
    } catch (...) {
      ++failures;
      std::printf("FAIL  %s\n      unexpected non-std exception\n", name.c_str());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", ran - failures, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

#endif  // NENYAX_TEST_HARNESS_HPP
