#include "nccl_sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "topo/json.h"

namespace arfuse {
namespace cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t p = 0;
  while (true) {
    const size_t c = s.find(sep, p);
    out.push_back(s.substr(p, c == std::string::npos ? std::string::npos : c - p));
    if (c == std::string::npos) return out;
    p = c + 1;
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One axis of the grammar, expanded: a name for labels and, per value, the label part and the
// variables it sets.
struct Axis {
  std::string key;  // what a repeated axis in one cross is recognised by
  std::vector<NcclSetting> values;
};

const char* const kProtos[] = {"LL", "LL128", "Simple"};
const char* const kAlgos[] = {"Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"};

bool canonical(const std::string& v, const char* const* names, size_t n, std::string* out) {
  for (size_t i = 0; i < n; ++i)
    if (lower(v) == lower(names[i])) return *out = names[i], true;
  return false;
}

bool validVariableName(const std::string& s) {
  if (s.size() <= 5 || s.compare(0, 5, "NCCL_") != 0) return false;
  for (char c : s)
    if (!(std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_'))
      return false;
  return true;
}

bool parseAxis(const std::string& text, Axis* axis, std::string* error) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const bool hasValues = colon != std::string::npos;
  std::vector<std::string> values = hasValues ? split(text.substr(colon + 1), '/') : std::vector<std::string>{};
  for (const std::string& v : values) {
    if (v.empty() || v.find_first_of(" \t=") != std::string::npos) {
      *error = "--nccl-sweep: '" + text + "': values are separated by '/' and may not be empty or hold spaces or '='";
      return false;
    }
  }
  axis->values.clear();
  if (name == "proto") {
    if (!hasValues) values.assign(std::begin(kProtos), std::end(kProtos));
    for (const std::string& v : values) {
      std::string c;
      if (!canonical(v, kProtos, std::size(kProtos), &c)) {
        *error = "--nccl-sweep: proto value '" + v + "': use LL, LL128 or Simple";
        return false;
      }
      axis->values.push_back({"proto=" + c, {{"NCCL_PROTO", c}}});
    }
    axis->key = "NCCL_PROTO";
  } else if (name == "algo") {
    if (!hasValues) values = {"Ring", "Tree"};
    for (const std::string& v : values) {
      std::string c;
      if (!canonical(v, kAlgos, std::size(kAlgos), &c)) {
        *error =
            "--nccl-sweep: algo value '" + v + "': use Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree or PAT";
        return false;
      }
      axis->values.push_back({"algo=" + c, {{"NCCL_ALGO", c}}});
    }
    axis->key = "NCCL_ALGO";
  } else if (name == "channels") {
    if (!hasValues) values = {"1", "2", "4", "8", "16"};
    for (const std::string& v : values) {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 64) {
        *error = "--nccl-sweep: channels value '" + v + "': use a channel count in 1..64";
        return false;
      }
      const std::string c = std::to_string(n);
      axis->values.push_back({"channels=" + c, {{"NCCL_MIN_NCHANNELS", c}, {"NCCL_MAX_NCHANNELS", c}}});
    }
    axis->key = "NCCL_MIN_NCHANNELS";
  } else if (validVariableName(name)) {
    if (!hasValues) {
      *error =
          "--nccl-sweep: " + name + " needs values: " + name + ":V1/V2 (only proto, algo and channels have defaults)";
      return false;
    }
    for (const std::string& v : values) axis->values.push_back({name + "=" + v, {{name, v}}});
    axis->key = name;
  } else {
    *error = "--nccl-sweep: unknown axis '" + name +
             "': use proto, algo, channels or an NCCL variable with values (NCCL_NAME:V1/V2)";
    return false;
  }
  return true;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }

const topo::json::Value* member(const topo::json::Value& v, const char* key) {
  if (v.kind != topo::json::Value::Kind::kObject) return nullptr;
  for (const topo::json::Member& m : v.members)
    if (m.key == key) return &m.value;
  return nullptr;
}

double number(const topo::json::Value* v) {
  return v && v->kind == topo::json::Value::Kind::kNumber ? std::strtod(v->text.c_str(), nullptr) : 0;
}

}  // namespace

bool expandNcclSweep(const std::string& spec, std::vector<NcclSetting>* out, std::string* error) {
  std::vector<NcclSetting> settings = {{"default", {}}};
  std::set<std::string> seen = {"default"};
  if (spec.empty()) {
    *error = std::string("--nccl-sweep=: empty; give axes such as ") + kDefaultNcclSweepSpec +
             " or leave out '=' for that default";
    return false;
  }
  for (const std::string& group : split(spec, ',')) {
    if (group.empty()) {
      *error = "--nccl-sweep " + spec + ": an empty item between commas";
      return false;
    }
    // The cross product of the group's axes, in order (the first axis varies slowest).
    std::vector<NcclSetting> combos = {{"", {}}};
    std::set<std::string> keys;
    for (const std::string& text : split(group, '*')) {
      Axis axis;
      if (!parseAxis(text, &axis, error)) return false;
      if (!keys.insert(axis.key).second) {
        *error = "--nccl-sweep: '" + group + "' crosses " + axis.key + " with itself";
        return false;
      }
      std::vector<NcclSetting> next;
      for (const NcclSetting& c : combos) {
        for (const NcclSetting& v : axis.values) {
          NcclSetting s = c;
          s.label += (s.label.empty() ? "" : " ") + v.label;
          s.env.insert(s.env.end(), v.env.begin(), v.env.end());
          next.push_back(s);
        }
        if (next.size() > static_cast<size_t>(kMaxNcclSweepSettings)) break;
      }
      combos = next;
    }
    for (const NcclSetting& s : combos)
      if (seen.insert(s.label).second) settings.push_back(s);
    if (settings.size() > static_cast<size_t>(kMaxNcclSweepSettings) + 1) {
      *error = "--nccl-sweep " + spec + ": more than " + std::to_string(kMaxNcclSweepSettings) +
               " settings (each is a process of its own); sweep fewer values or cross fewer axes";
      return false;
    }
  }
  *out = settings;
  return true;
}

EnvList ncclVariables(const std::vector<std::string>& environment) {
  EnvList out;
  for (const std::string& e : environment) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || e.compare(0, 5, "NCCL_") != 0) continue;
    out.emplace_back(e.substr(0, eq), e.substr(eq + 1));
  }
  std::sort(out.begin(), out.end());
  return out;
}

ChildCommand childCommand(const std::string& exe, const BenchArgs& a, int nranks, const NcclSetting& setting,
                          const std::string& jsonPath, const std::vector<std::string>& parentEnv) {
  ChildCommand c;
  std::string tokens;
  for (int t : a.tokens) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
  c.argv = {exe,        "bench",
            "--op",     a.op,
            "--tokens", tokens,
            "--hidden", std::to_string(a.hidden),
            "--dtype",  arfuseDataTypeName(a.dtype),
            "--ranks",  std::to_string(nranks),
            "-n",       std::to_string(a.iters),
            "-w",       std::to_string(a.warmup),
            "--calls",  std::to_string(a.callsPerGraph),
            "-c",       a.check ? "1" : "0"};
  if (a.verifyPass) {
    c.argv.insert(c.argv.end(), {"--layers", std::to_string(a.layers), "--verify-pass"});
  }
  c.argv.push_back("--nccl-sweep-child");
  c.argv.push_back(jsonPath);

  bool hasDebug = false;
  for (const std::string& e : parentEnv) {
    const std::string name = e.substr(0, e.find('='));
    if (name == "NCCL_DEBUG") hasDebug = true;
    bool overridden = false;
    for (const auto& kv : setting.env) overridden = overridden || kv.first == name;
    if (!overridden) c.env.push_back(e);
  }
  for (const auto& kv : setting.env) c.env.push_back(kv.first + "=" + kv.second);
  if (!hasDebug) c.env.push_back("NCCL_DEBUG=WARN");
  return c;
}

ChildOutcome runChild(const ChildCommand& command, const std::string& logPath, double timeoutS) {
  ChildOutcome o;
  if (command.argv.empty()) {
    o.error = "no command";
    return o;
  }
  std::vector<char*> argv, envp;
  for (const std::string& s : command.argv) argv.push_back(const_cast<char*>(s.c_str()));
  for (const std::string& s : command.env) envp.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const auto start = std::chrono::steady_clock::now();
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    o.error = std::string("cannot start ") + argv[0] + ": " + std::strerror(rc);
    return o;
  }
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  // Polls rather than blocks, so that the bound holds whatever the child does.
  auto waitUntil = [&](double limit, int* status) {
    while (true) {
      const pid_t w = waitpid(pid, status, WNOHANG);
      if (w == pid) return true;
      if (w < 0 && errno != EINTR) return true;  // already reaped elsewhere: nothing to wait for
      if (elapsed() >= limit) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  int status = 0;
  if (waitUntil(timeoutS, &status)) {
    o.seconds = elapsed();
    if (WIFSIGNALED(status)) {
      o.kind = ChildOutcome::Kind::kSignalled;
      o.code = WTERMSIG(status);
    } else {
      o.kind = ChildOutcome::Kind::kExited;
      o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    }
    return o;
  }
  kill(pid, SIGKILL);
  o.kind = ChildOutcome::Kind::kTimedOut;
  if (!waitUntil(timeoutS + 10, &status))
    o.error =
        "killed, but pid " + std::to_string(pid) + " had not exited 10 s later (stuck in the driver?); left behind";
  o.seconds = elapsed();
  return o;
}

std::string logReason(const std::string& logText) {
  std::string lastWarn, lastLine;
  std::istringstream is(logText);
  std::string line;
  while (std::getline(is, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    const size_t e = line.find_last_not_of(" \t\r");
    line = line.substr(b, e - b + 1);
    if (line.find("NCCL WARN") != std::string::npos) lastWarn = line;
    lastLine = line;
  }
  std::string r = lastWarn.empty() ? lastLine : lastWarn;
  if (r.size() > 300) r = r.substr(0, 297) + "...";
  return r;
}

void setPoints(NcclSweep* sweep, const BenchArgs& a, const std::vector<Row>& rows) {
  const size_t esize = a.dtype == arfuseFloat32 ? 4 : 2;
  sweep->arfuseLabel = a.op == "allreduce" ? "arfuse all-reduce" : "arfuse fused";
  sweep->callsPerPass = a.verifyPass ? 2 * a.layers : 0;
  sweep->tokens = a.tokens;
  sweep->bytes.clear();
  sweep->arfuseUs.assign(a.tokens.size(), 0);
  sweep->arfuseAlgo.assign(a.tokens.size(), "");
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    sweep->bytes.push_back(static_cast<long long>(a.tokens[i]) * a.hidden * esize);
    const Row* autoRow = nullptr;
    const Row* fastest = nullptr;
    for (const Row& r : rows) {
      if (r.tokens != a.tokens[i] || !r.t.ok || r.wrong || !r.error.empty()) continue;
      if (r.role != "arfuse" && r.role != "verify-pass") continue;
      if (r.algo.compare(0, 4, "auto") == 0 && !autoRow) autoRow = &r;
      if (!fastest || r.t.medianUs < fastest->t.medianUs) fastest = &r;
    }
    const Row* ref = autoRow ? autoRow : fastest;
    if (ref) {
      sweep->arfuseUs[i] = ref->t.medianUs;
      sweep->arfuseAlgo[i] = ref->algo;
    }
  }
}

void fillSetting(SweepSetting* s, const std::vector<int>& tokens, const std::vector<long long>& bytes,
                 const std::string& childJson, const ChildOutcome& outcome, const std::string& logText, int timeoutS) {
  const std::string reason = logReason(logText);
  s->points.assign(tokens.size(), SweepPoint());
  for (size_t i = 0; i < tokens.size(); ++i) {
    s->points[i].tokens = tokens[i];
    s->points[i].bytes = i < bytes.size() ? bytes[i] : 0;
  }
  auto failAll = [&](const std::string& status, std::string why) {
    if (!reason.empty() && why.find(reason) == std::string::npos) why += "; last log line: " + reason;
    s->status = status;
    s->error = why;
    for (SweepPoint& p : s->points) p.error = why;
  };
  switch (outcome.kind) {
    case ChildOutcome::Kind::kNotStarted:
      return failAll("crashed", outcome.error.empty() ? "the child did not start" : outcome.error);
    case ChildOutcome::Kind::kTimedOut:
      return failAll("timeout", "no result within " + std::to_string(timeoutS) + " s; killed" +
                                    (outcome.error.empty() ? "" : " (" + outcome.error + ")"));
    case ChildOutcome::Kind::kSignalled:
      return failAll("crashed", std::string("killed by signal ") + std::to_string(outcome.code) + " (" +
                                    strsignal(outcome.code) + ")");
    case ChildOutcome::Kind::kExited:
      break;
  }
  topo::json::Value doc;
  if (childJson.empty())
    return failAll("crashed", "exited with status " + std::to_string(outcome.code) + " without writing its result");
  if (const Status parsed = topo::json::parse(childJson, &doc); !parsed.ok())
    return failAll("crashed",
                   "its result is not JSON (" + parsed.message() + "); exit status " + std::to_string(outcome.code));
  const topo::json::Value* results = member(doc, "results");
  if (!results || results->kind != topo::json::Value::Kind::kArray || results->items.size() != tokens.size())
    return failAll("crashed",
                   "its result does not hold one row per point; exit status " + std::to_string(outcome.code));
  bool allOk = true;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const topo::json::Value& r = results->items[i];
    SweepPoint& p = s->points[i];
    if (static_cast<int>(number(member(r, "tokens"))) != tokens[i])
      return failAll("crashed", "its result's points differ from the parent's (child of another build?)");
    p.wrong = static_cast<int>(number(member(r, "wrong")));
    const topo::json::Value* med = member(r, "median_us");
    const topo::json::Value* err = member(r, "error");
    if (med) {
      p.t.ok = true;
      p.t.medianUs = number(med);
      p.t.minUs = number(member(r, "min_us"));
      p.t.maxUs = number(member(r, "max_us"));
    }
    if (err && err->kind == topo::json::Value::Kind::kString) p.error = err->text;
    if (!p.t.ok && p.error.empty()) p.error = "no timing in the child's result";
    if (!p.error.empty() && !reason.empty() && reason.find("NCCL WARN") != std::string::npos &&
        p.error.find(reason) == std::string::npos)
      p.error += "; " + reason;
    if (!p.t.ok || p.wrong || !p.error.empty()) {
      allOk = false;
      if (s->error.empty()) s->error = p.wrong && p.error.empty() ? "wrong results" : p.error;
    }
  }
  s->status = allOk ? "ok" : "error";
}

void computeRatios(NcclSweep* sweep) {
  if (sweep->settings.empty()) return;
  const SweepSetting& def = sweep->settings[0];
  for (SweepSetting& s : sweep->settings) {
    for (size_t i = 0; i < s.points.size(); ++i) {
      SweepPoint& p = s.points[i];
      p.vsDefault = p.vsArfuse = 0;
      if (!p.t.ok || p.t.medianUs <= 0) continue;
      if (i < def.points.size() && def.points[i].t.ok && def.points[i].t.medianUs > 0)
        p.vsDefault = p.t.medianUs / def.points[i].t.medianUs;
      if (i < sweep->arfuseUs.size() && sweep->arfuseUs[i] > 0) p.vsArfuse = p.t.medianUs / sweep->arfuseUs[i];
    }
  }
}

int bestSetting(const NcclSweep& sweep, size_t point) {
  int best = -1;
  for (size_t k = 0; k < sweep.settings.size(); ++k) {
    const std::vector<SweepPoint>& pts = sweep.settings[k].points;
    if (point >= pts.size()) continue;
    const SweepPoint& p = pts[point];
    if (!p.t.ok || p.wrong || !p.error.empty()) continue;
    if (best < 0 || p.t.medianUs < sweep.settings[best].points[point].t.medianUs) best = static_cast<int>(k);
  }
  return best;
}

std::string sweepReport(const NcclSweep& sweep) {
  std::ostringstream os;
  size_t w = 10;
  for (const SweepSetting& s : sweep.settings) w = std::max(w, s.setting.label.size() + 2);
  const bool pass = sweep.callsPerPass > 0;
  for (size_t i = 0; i < sweep.tokens.size(); ++i) {
    os << "# tokens " << sweep.tokens[i] << ", " << (i < sweep.bytes.size() ? sweep.bytes[i] : 0)
       << " B per rank: NCCL baseline per setting, us per call" << (pass ? " (in a pass of " : "")
       << (pass ? std::to_string(sweep.callsPerPass) + " calls)" : "") << "\n";
    os << "  " << pad("setting", w);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%10s %10s %10s%s %10s %10s %7s\n", "time_us", "min_us", "max_us",
                  pass ? "    pass_ms" : "", "vs_default", "vs_arfuse", "#wrong");
    os << buf;
    for (const SweepSetting& s : sweep.settings) {
      const SweepPoint& p = s.points[i];
      os << "  " << pad(s.setting.label, w);
      if (p.t.ok) {
        std::snprintf(buf, sizeof buf, "%10.2f %10.2f %10.2f", p.t.medianUs, p.t.minUs, p.t.maxUs);
        os << buf;
        if (pass) {
          std::snprintf(buf, sizeof buf, " %10.3f", p.t.medianUs * sweep.callsPerPass / 1000.0);
          os << buf;
        }
        std::snprintf(buf, sizeof buf, " %10s %10s %7d", p.vsDefault > 0 ? fixed(p.vsDefault, 3).c_str() : "-",
                      p.vsArfuse > 0 ? fixed(p.vsArfuse, 3).c_str() : "-", p.wrong);
        os << buf;
        if (!p.error.empty()) os << "  " << p.error;
        os << "\n";
      } else {
        os << (s.status == "timeout"   ? "timeout: "
               : s.status == "crashed" ? "crashed: "
                                       : "error: ")
           << p.error << "\n";
      }
    }
    const int b = bestSetting(sweep, i);
    const double arf = i < sweep.arfuseUs.size() ? sweep.arfuseUs[i] : 0;
    os << "  best NCCL setting: ";
    if (b < 0) {
      os << "none ran at this point (see the errors above)";
    } else {
      const SweepPoint& p = sweep.settings[b].points[i];
      os << sweep.settings[b].setting.label << ", " << fixed(p.t.medianUs, 2) << " us";
      if (p.vsDefault > 0) os << " (" << fixed(p.vsDefault, 3) << " x default)";
    }
    if (arf > 0) {
      os << "; " << sweep.arfuseLabel << " (" << sweep.arfuseAlgo[i] << ") " << fixed(arf, 2) << " us";
      if (b >= 0) os << " = " << fixed(arf / sweep.settings[b].points[i].t.medianUs, 3) << " x the best NCCL setting";
    } else {
      os << "; no timed, correct arfuse row at this point to compare";
    }
    os << "\n";
  }
  return os.str();
}

std::string envJson(const EnvList& env) {
  std::string o = "{";
  for (size_t i = 0; i < env.size(); ++i)
    o += (i ? ", \"" : "\"") + jsonEscape(env[i].first) + "\": \"" + jsonEscape(env[i].second) + "\"";
  return o + "}";
}

std::string sweepJsonMembers(const NcclSweep& sweep) {
  std::ostringstream os;
  os << "  \"nccl_sweep_spec\": \"" << jsonEscape(sweep.spec) << "\",\n";
  os << "  \"nccl_sweep_timeout_s\": " << sweep.timeoutS << ",\n";
  os << "  \"nccl_sweep_added_env\": " << envJson(sweep.added) << ",\n";
  os << "  \"nccl_sweep\": [";
  for (size_t k = 0; k < sweep.settings.size(); ++k) {
    const SweepSetting& s = sweep.settings[k];
    os << (k ? ",\n" : "\n") << "    {\"setting\": \"" << jsonEscape(s.setting.label)
       << "\", \"env\": " << envJson(s.setting.env) << ", \"status\": \"" << s.status << "\"";
    if (!s.error.empty()) os << ", \"error\": \"" << jsonEscape(s.error) << "\"";
    os << ", \"results\": [";
    for (size_t i = 0; i < s.points.size(); ++i) {
      const SweepPoint& p = s.points[i];
      os << (i ? ",\n" : "\n") << "      {\"tokens\": " << p.tokens << ", \"bytes\": " << p.bytes;
      if (p.t.ok) {
        os << ", \"median_us\": " << p.t.medianUs << ", \"min_us\": " << p.t.minUs << ", \"max_us\": " << p.t.maxUs;
        if (sweep.callsPerPass > 0) os << ", \"pass_ms\": " << p.t.medianUs * sweep.callsPerPass / 1000.0;
        if (p.vsDefault > 0) os << ", \"vs_default\": " << p.vsDefault;
        if (p.vsArfuse > 0) os << ", \"vs_arfuse\": " << p.vsArfuse;
      }
      if (!p.error.empty()) os << ", \"error\": \"" << jsonEscape(p.error) << "\"";
      os << ", \"wrong\": " << p.wrong << "}";
    }
    os << "]}";
  }
  os << "\n  ],\n";
  os << "  \"nccl_sweep_best\": [";
  for (size_t i = 0; i < sweep.tokens.size(); ++i) {
    const int b = bestSetting(sweep, i);
    os << (i ? ",\n" : "\n") << "    {\"tokens\": " << sweep.tokens[i];
    if (b >= 0) {
      const SweepPoint& p = sweep.settings[b].points[i];
      os << ", \"setting\": \"" << jsonEscape(sweep.settings[b].setting.label) << "\", \"median_us\": " << p.t.medianUs;
      if (p.vsDefault > 0) os << ", \"vs_default\": " << p.vsDefault;
    } else {
      os << ", \"setting\": null";
    }
    if (i < sweep.arfuseUs.size() && sweep.arfuseUs[i] > 0) {
      os << ", \"arfuse_algo\": \"" << jsonEscape(sweep.arfuseAlgo[i]) << "\", \"arfuse_us\": " << sweep.arfuseUs[i];
      if (b >= 0) os << ", \"arfuse_vs_best\": " << sweep.arfuseUs[i] / sweep.settings[b].points[i].t.medianUs;
    }
    os << "}";
  }
  os << "\n  ],\n";
  return os.str();
}

}  // namespace cli
}  // namespace arfuse
