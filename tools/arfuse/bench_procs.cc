#include "bench_procs.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "topo/json.h"

namespace arfuse {
namespace cli {
namespace {

namespace json = topo::json;

const json::Value* member(const json::Value& v, const char* key) {
  if (v.kind != json::Value::Kind::kObject) return nullptr;
  for (const json::Member& m : v.members)
    if (m.key == key) return &m.value;
  return nullptr;
}
double number(const json::Value* v) {
  return v && v->kind == json::Value::Kind::kNumber ? std::strtod(v->text.c_str(), nullptr) : 0;
}
std::string text(const json::Value* v) { return v && v->kind == json::Value::Kind::kString ? v->text : std::string(); }

}  // namespace

std::vector<int> procsJobs(const BenchArgs& a) {
  std::vector<int> all = {arfuseAlgoAuto,       arfuseAlgoLowLatency,   arfuseAlgoOneShot, arfuseAlgoTwoShot,
                          arfuseAlgoHostStaged, arfuseAlgoHierarchical, arfuseAlgoNccl,    kAlgoNcclSymm};
  // Over simulated hosts only the paths that cross hosts run (and auto); within one host, every
  // path but hierarchical.
  if (a.algos.empty() && a.hosts) return {arfuseAlgoAuto, arfuseAlgoHierarchical, arfuseAlgoNccl};
  if (a.algos.empty()) {
    all.erase(std::find(all.begin(), all.end(), arfuseAlgoHierarchical));
    return all;
  }
  std::vector<int> jobs;
  for (int j : all)  // the fixed order, whatever order --algo gave
    if (std::find(a.algos.begin(), a.algos.end(), j) != a.algos.end()) jobs.push_back(j);
  return jobs;
}

std::vector<std::string> procsChildArgs(const BenchArgs& a, int rank, const std::string& dir) {
  std::vector<std::string> out;
  for (size_t i = 0; i < a.rawArgs.size(); ++i) {
    const std::string& s = a.rawArgs[i];
    if (s == "-J" || s == "--proc-rank" || s == "--proc-dir") {  // the launcher writes the JSON
      ++i;
      continue;
    }
    out.push_back(s);
  }
  out.insert(out.end(), {"--proc-rank", std::to_string(rank), "--proc-dir", dir});
  return out;
}

std::string rankRowJson(const RankRow& r) {
  std::ostringstream os;
  auto str = [](const std::string& s) {
    std::string o;
    json::appendString(&o, s);
    return o;
  };
  os << "{\"job\": " << r.job << ", \"tokens\": " << r.tokens << ", \"bytes\": " << r.bytes
     << ", \"algo\": " << str(r.algo) << ", \"role\": " << str(r.role) << ", \"error\": " << str(r.error)
     << ", \"wrong\": " << r.wrong << ", \"hash\": " << str(r.hash) << ", \"sets\": " << r.sets
     << ", \"footprint\": " << r.footprintBytes << ", \"ms\": [";
  for (size_t i = 0; i < r.ms.size(); ++i) os << (i ? ", " : "") << json::formatDouble(r.ms[i]);
  os << "], \"kernels\": [";
  for (size_t i = 0; i < r.kernels.size(); ++i) os << (i ? ", " : "") << str(r.kernels[i]);
  os << "]}";
  return os.str();
}

bool parseRankRows(const std::string& text_, std::vector<RankRow>* rows, std::string* error) {
  rows->clear();
  std::istringstream is(text_);
  std::string line;
  int n = 0;
  while (std::getline(is, line)) {
    ++n;
    if (line.empty()) continue;
    json::Value v;
    if (const Status parsed = json::parse(line, &v); !parsed.ok()) {
      if (is.peek() == EOF) return true;  // the last line of a killed process
      *error = "line " + std::to_string(n) + ": " + parsed.message();
      return false;
    }
    RankRow r;
    r.job = static_cast<int>(number(member(v, "job")));
    r.tokens = static_cast<int>(number(member(v, "tokens")));
    r.bytes = static_cast<long long>(number(member(v, "bytes")));
    r.algo = text(member(v, "algo"));
    r.role = text(member(v, "role"));
    r.error = text(member(v, "error"));
    r.wrong = static_cast<int>(number(member(v, "wrong")));
    r.hash = text(member(v, "hash"));
    r.sets = static_cast<int>(number(member(v, "sets")));
    r.footprintBytes = static_cast<long long>(number(member(v, "footprint")));
    if (const json::Value* ms = member(v, "ms"))
      for (const json::Value& x : ms->items) r.ms.push_back(number(&x));
    if (const json::Value* k = member(v, "kernels"))
      for (const json::Value& x : k->items) r.kernels.push_back(x.text);
    rows->push_back(r);
  }
  return true;
}

std::vector<Row> mergeRankRows(const std::vector<std::vector<RankRow>>& perRank,
                               const std::vector<std::string>& rankExit, const std::vector<int>& jobs,
                               const std::vector<int>& tokens, long long bytesPerToken, int callsPerGraph) {
  const int n = static_cast<int>(perRank.size());
  std::vector<Row> out;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int t : tokens) {
      Row row;
      row.tokens = t;
      row.bytes = bytesPerToken * t;
      row.algo = algoName(jobs[j]);
      row.role = jobs[j] == arfuseAlgoNccl || jobs[j] == kAlgoNcclSymm ? "baseline" : "arfuse";
      std::vector<const RankRow*> mine(n, nullptr);
      for (int r = 0; r < n; ++r)
        for (const RankRow& x : perRank[r])
          if (x.job == static_cast<int>(j) && x.tokens == t) mine[r] = &x;
      for (int r = 0; r < n && row.error.empty(); ++r) {
        if (!mine[r]) {
          row.error = "rank " + std::to_string(r) + " left no result" +
                      (r < static_cast<int>(rankExit.size()) && !rankExit[r].empty() ? " (" + rankExit[r] + ")" : "");
        } else if (!mine[r]->error.empty()) {
          // A size a forced path does not carry is "n/a" on every rank alike: keep its words.
          row.error = mine[r]->error.compare(0, 4, "n/a:") == 0 ? mine[r]->error
                                                                : "rank " + std::to_string(r) + ": " + mine[r]->error;
        }
      }
      if (mine[0]) {
        row.algo = mine[0]->algo.empty() ? row.algo : mine[0]->algo;
        row.kernels = mine[0]->kernels;
        row.sets = mine[0]->sets;
        row.footprintBytes = mine[0]->footprintBytes;
      }
      for (int r = 0; r < n; ++r) {
        if (!mine[r]) continue;
        row.wrong = std::max(row.wrong, mine[r]->wrong);
        if (r > 0 && mine[0] && !mine[r]->hash.empty() && mine[r]->hash != mine[0]->hash && row.error.empty()) {
          row.wrong = 1;
          row.error = "outputs differ across ranks (bitwise): rank " + std::to_string(r) + " against rank 0";
        }
      }
      if (row.error.empty()) {
        std::vector<double> worst;
        for (int r = 0; r < n && row.error.empty(); ++r) {
          if (mine[r]->ms.empty() || (r > 0 && mine[r]->ms.size() != worst.size())) {
            row.error = "rank " + std::to_string(r) + " timed " + std::to_string(mine[r]->ms.size()) +
                        " replays, rank 0 " + std::to_string(worst.size());
            break;
          }
          if (r == 0) worst = mine[r]->ms;
          for (size_t i = 0; i < worst.size(); ++i) worst[i] = std::max(worst[i], mine[r]->ms[i]);
        }
        if (row.error.empty() && callsPerGraph > 1) {
          std::sort(worst.begin(), worst.end());
          const double scale = 1000.0 / (callsPerGraph - 1);
          row.t.ok = true;
          row.t.iters = static_cast<int>(worst.size());
          row.t.minUs = worst.front() * scale;
          row.t.maxUs = worst.back() * scale;
          row.t.medianUs = worst[worst.size() / 2] * scale;
        }
      }
      out.push_back(row);
    }
  }
  return out;
}

std::string hexEncode(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

bool hexDecode(const std::string& hex, std::string* bytes) {
  if (hex.size() % 2) return false;
  bytes->clear();
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

}  // namespace cli
}  // namespace arfuse
