// triage_bench: how fast `arfuse triage` reads logs on one core. Writes a JSON record; asserts
// nothing about speed (a timed test on a shared CI core would be noise, not a result).
//
//   triage_bench [--mb N] [--out FILE.json] [--keep DIR]
//
// Three inputs of N MB each (default 256), generated deterministically and then analysed by the same
// runCli() the CLI calls, on this thread:
//   realistic  what a multi-rank server writes: SGLang/vLLM batch and metrics lines, HTTP access
//              lines, NCCL INFO, torch warnings, '\r' progress bars, Ray JSON lines, a long
//              server_args line now and then, a traceback every ~20k lines, a failure burst (NCCL
//              WARN + return chain + torch surface + echoes) every ~100k lines;
//   dense      every real-log fixture (tests/triage/real, fixtures/) concatenated and repeated: nearly
//              every line is an error, a frame or an echo, so the pattern stage runs on most lines;
//   dense_varied  the same, every digit redrawn in each repetition: no line repeats verbatim, so the
//              memo of repeated messages gains nothing from the repetition itself (the worst case).
// The rate is decoded bytes per CPU second of this process (user + system), so other load on a
// shared machine slows the wall clock, not the figure; wall time is recorded beside it.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "triage.h"

namespace {

double cpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string loadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "null" : one;
}

std::string jsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

// Writes about `bytes` of a realistic multi-rank server log.
size_t writeRealistic(const std::string& path, size_t bytes) {
  std::mt19937 rng(20261201);
  std::ofstream out(path, std::ios::binary);
  char buf[4096];
  size_t written = 0, line = 0;
  std::string serverArgs = "[2026-11-29 09:59:58] server_args=ServerArgs(model_path='moonshotai/Kimi-K2-Instruct'";
  for (int i = 0; i < 120; ++i) serverArgs += ", option_" + std::to_string(i) + "=None";
  serverArgs += ", tp_size=8)\n";
  while (written < bytes) {
    const int r = static_cast<int>(rng() % 8), k = static_cast<int>(rng() % 1000);
    const int mm = static_cast<int>(line / 60000 % 60), ss = static_cast<int>(line / 1000 % 60);
    int n = 0;
    ++line;
    if (line % 100000 == 0) {  // a failure burst: origin, chain, surface and echoes
      n = std::snprintf(buf, sizeof(buf),
                        "gpu-node-1:%d:%d [%d] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.%d<4"
                        "3210> failed : Connection refused\n"
                        "gpu-node-1:%d:%d [%d] NCCL INFO misc/socket.cc:567 -> 6\n"
                        "gpu-node-1:%d:%d [%d] NCCL INFO transport/net.cc:731 -> 6\n"
                        "[2026-11-29 10:%02d:%02d TP%d] RuntimeError: NCCL error: remote process exited or there was a "
                        "network error, NCCL version 2.28.9\n"
                        "[2026-11-29 10:%02d:%02d] Received sigquit from a child process. It usually means the child "
                        "failed.\n",
                        5000 + r, 5100 + r, r, k % 250, 5000 + r, 5100 + r, r, 5000 + r, 5100 + r, r, mm, ss, r, mm,
                        ss);
    } else if (line % 20000 == 0) {  // a traceback of a handled request error
      n = std::snprintf(buf, sizeof(buf),
                        "[2026-11-29 10:%02d:%02d TP%d] Error in request handler: Traceback (most recent call last):\n"
                        "  File \"/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py\", line 531, in "
                        "generate_request\n    ret = await _global_state.tokenizer_manager.generate_request(obj, "
                        "request).__anext__()\n  File \"/sgl-workspace/sglang/python/sglang/srt/managers/"
                        "tokenizer_manager.py\", line 412, in generate_request\n    raise ValueError(msg)\nValueError: "
                        "The input (%d tokens) is longer than the model's context length (131072 tokens).\n",
                        mm, ss, r, 131072 + k);
    } else if (line % 50000 == 0) {
      std::memcpy(buf, serverArgs.data(), std::min(serverArgs.size(), sizeof(buf)));
      n = static_cast<int>(std::min(serverArgs.size(), sizeof(buf)));
    } else {
      switch (rng() % 12) {
        case 0:
        case 1:
          n = std::snprintf(buf, sizeof(buf),
                            "[2026-11-29 10:%02d:%02d TP%d] Decode batch. #running-req: %d, #token: %d, token usage: "
                            "0.%02d, cuda graph: True, gen throughput (token/s): %d.%02d, #queue-req: %d,\n",
                            mm, ss, r, k % 64, k * 37, k % 100, 800 + k, k % 100, k % 7);
          break;
        case 2:
          n = std::snprintf(buf, sizeof(buf),
                            "[2026-11-29 10:%02d:%02d TP0] Prefill batch. #new-seq: %d, #new-token: %d, #cached-token: "
                            "%d, token usage: 0.%02d, #running-req: %d, #queue-req: %d,\n",
                            mm, ss, k % 8 + 1, k * 13, k * 7, k % 100, k % 64, k % 5);
          break;
        case 3:
          n = std::snprintf(
              buf, sizeof(buf),
              "[2026-11-29 10:%02d:%02d] INFO:     10.0.%d.%d:%d - \"POST /v1/chat/completions HTTP/1.1\" "
              "200 OK\n",
              mm, ss, r, k % 250, 30000 + k);
          break;
        case 4:
          n = std::snprintf(buf, sizeof(buf),
                            "(VllmWorker rank=%d pid=%d) INFO 11-29 10:%02d:%02d [gpu_model_runner.py:%d] Scheduled %d "
                            "tokens for request chatcmpl-%08x%08x\n",
                            r, 4000 + r, mm, ss, 1000 + k, k % 512, static_cast<unsigned>(rng()),
                            static_cast<unsigned>(rng()));
          break;
        case 5:
          n = std::snprintf(
              buf, sizeof(buf),
              "INFO 11-29 10:%02d:%02d [loggers.py:123] Engine 000: Avg prompt throughput: %d.%d tokens/s, "
              "Avg generation throughput: %d.%d tokens/s, Running: %d reqs, Waiting: 0 reqs, GPU KV cache "
              "usage: %d.%d%%, Prefix cache hit rate: %d.%d%%\n",
              mm, ss, k, k % 10, 2 * k, k % 10, k % 64, k % 100, k % 10, k % 90, k % 10);
          break;
        case 6:
          n = std::snprintf(buf, sizeof(buf),
                            "gpu-node-%d:%d:%d [%d] NCCL INFO Channel %02d/0 : %d[%d] -> %d[%d] via P2P/CUMEM/read\n",
                            r, 5000 + r, 5100 + r, r, k % 32, r, r, (r + 1) % 8, (r + 1) % 8);
          break;
        case 7:
          n = std::snprintf(
              buf, sizeof(buf),
              "[rank%d]:[W1129 10:%02d:%02d.%06d %d ProcessGroupNCCL.cpp:4751] [PG ID 0 PG GUID 0 Rank %d]  "
              "using GPU %d as device used by this process is currently unknown.\n",
              r, mm, ss, k * 997, 7000 + r, r, r);
          break;
        case 8: {  // a tqdm bar redrawn with '\r' (one line of many segments)
          std::string bar;
          for (int p = 0; p <= 35; p += 5)
            bar += "Capturing CUDA graph shapes:  " + std::to_string(p * 100 / 35) + "%|#####     | " +
                   std::to_string(p) + "/35 [00:" + std::to_string(10 + p / 2) + "<00:03,  1.7" +
                   std::to_string(p % 10) + "it/s]\r";
          bar += "\n";
          n = static_cast<int>(std::min(bar.size(), sizeof(buf)));
          std::memcpy(buf, bar.data(), static_cast<size_t>(n));
          break;
        }
        case 9:
          n = std::snprintf(buf, sizeof(buf),
                            "{\"log\":\"(RayWorkerWrapper pid=%d, ip=10.0.0.%d) INFO 11-29 10:%02d:%02d "
                            "[custom_all_reduce.py:%d] Registering %d cuda graph addresses\\n\",\"stream\":\"stdout\","
                            "\"time\":\"2026-11-29T10:%02d:%02d.%06dZ\"}\n",
                            8000 + r, r, mm, ss, 100 + k % 300, k * 3, mm, ss, k * 991);
          break;
        case 10:
          n = std::snprintf(
              buf, sizeof(buf),
              "/usr/local/lib/python3.12/dist-packages/torch/_dynamo/variables/functions.py:%d: UserWarning: "
              "The config.capture_scalar_outputs flag is disabled; graph break %d\n",
              700 + k % 100, k);
          break;
        default:
          n = std::snprintf(
              buf, sizeof(buf),
              "[2026-11-29 10:%02d:%02d TP%d] Cache flushed successfully! #free-tokens: %d, memory: %d.%02d "
              "GB, step %d of %d\n",
              mm, ss, r, 100000 + k * 11, 60 + k % 10, k % 100, k, 1000);
      }
    }
    if (n <= 0) continue;
    out.write(buf, std::min<int>(n, static_cast<int>(sizeof(buf))));
    written += static_cast<size_t>(std::min<int>(n, static_cast<int>(sizeof(buf))));
  }
  return written;
}

void collect(const std::string& dir, std::string* all) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 4 && (n.substr(n.size() - 4) == ".log" || n.find(".dmesg") != std::string::npos)) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::ifstream in(dir + "/" + n, std::ios::binary);
    *all += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    *all += '\n';
  }
}

// varied: every digit of every repetition redrawn (as ranks, pids, addresses and counters differ between
// the copies of a message in a real job), so no line repeats verbatim and triage's memo of repeated
// messages gains nothing from the repetition itself.
size_t writeDense(const std::string& path, size_t bytes, bool varied) {
  std::string all;
  collect(ARFUSE_TRIAGE_REAL, &all);
  collect(ARFUSE_TRIAGE_FIXTURES, &all);
  std::ofstream out(path, std::ios::binary);
  std::mt19937 rng(20261203);
  size_t written = 0;
  std::string copy;
  while (written < bytes && !all.empty()) {
    if (varied) {
      copy = all;
      for (char& c : copy)
        if (c >= '0' && c <= '9') c = static_cast<char>('0' + rng() % 10);
      out << copy;
    } else {
      out << all;
    }
    written += all.size();
  }
  return written;
}

struct Run {
  std::string name;
  size_t bytes = 0;
  double cpu = 0, wall = 0;
  int rc = 0;
  std::string verdict;
};

Run analyse(const std::string& name, const std::string& path, size_t bytes) {
  Run r;
  r.name = name;
  r.bytes = bytes;
  std::ostringstream out, err;
  const double c0 = cpuSeconds();
  const auto w0 = std::chrono::steady_clock::now();
  r.rc = arfuse::triage::runCli({path}, out, err);
  r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  r.cpu = cpuSeconds() - c0;
  const std::string o = out.str();
  const size_t v = o.find("VERDICT: ");
  if (v != std::string::npos) r.verdict = o.substr(v, std::min<size_t>(o.find('\n', v) - v, 200));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 256;
  std::string outPath, keep;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    command += " " + a;
    if (a == "--mb" && i + 1 < argc) {
      mb = std::strtoul(argv[++i], nullptr, 10);
      command += std::string(" ") + argv[i];
    } else if (a == "--out" && i + 1 < argc) {
      outPath = argv[++i];
      command += std::string(" ") + argv[i];
    } else if (a == "--keep" && i + 1 < argc) {
      keep = argv[++i];
      command += std::string(" ") + argv[i];
    } else {
      std::fprintf(stderr, "usage: triage_bench [--mb N] [--out FILE.json] [--keep DIR]\n");
      return 2;
    }
  }
  if (mb == 0 || mb > 65536) {
    std::fprintf(stderr, "triage_bench: --mb wants 1..65536, got %zu\n", mb);
    return 2;
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = !keep.empty() ? keep : (tmp && *tmp ? tmp : "/tmp");
  const size_t bytes = mb << 20;
  std::vector<Run> runs;
  const std::string realistic = dir + "/triage_bench_realistic.log", dense = dir + "/triage_bench_dense.log";
  runs.push_back(analyse("realistic", realistic, writeRealistic(realistic, bytes)));
  runs.push_back(analyse("dense", dense, writeDense(dense, bytes, false)));
  const std::string varied = dir + "/triage_bench_dense_varied.log";
  runs.push_back(analyse("dense_varied", varied, writeDense(varied, bytes, true)));
  if (keep.empty()) {
    std::remove(realistic.c_str());
    std::remove(dense.c_str());
    std::remove(varied.c_str());
  }

  utsname u;
  uname(&u);
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::ostringstream j;
  j << "{\n  \"schema\": \"arfuse.triage.bench.v1\",\n  \"date\": \"" << date << "\",\n  \"host\": \""
    << jsonEscape(u.nodename) << "\",\n  \"cpu\": \"" << jsonEscape(cpuModel())
    << "\",\n  \"online_cpus\": " << sysconf(_SC_NPROCESSORS_ONLN)
    << ",\n  \"load_average_1m_at_end\": " << loadAverage() << ",\n  \"optimised\": "
#ifdef NDEBUG
    << "true"
#else
    << "false"
#endif
    << ",\n  \"threads_used\": 1,\n  \"command\": \"" << jsonEscape(command)
    << "\",\n  \"note\": \"rate = decoded bytes / CPU seconds (user+system) of the analysing thread; the machine may "
       "be "
       "shared, so wall time can be longer\",\n  \"runs\": [\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    char line[1024];
    std::snprintf(line, sizeof(line),
                  "    {\"name\": \"%s\", \"bytes\": %zu, \"cpu_s\": %.3f, \"wall_s\": %.3f, \"mb_per_s_cpu\": %.1f, "
                  "\"mb_per_s_wall\": %.1f, \"exit_code\": %d, \"verdict\": \"%s\"}%s\n",
                  r.name.c_str(), r.bytes, r.cpu, r.wall, r.bytes / 1e6 / r.cpu, r.bytes / 1e6 / r.wall, r.rc,
                  jsonEscape(r.verdict).c_str(), i + 1 < runs.size() ? "," : "");
    j << line;
    std::printf("[ triage_bench ] %-9s %7.1f MB: %.2f s CPU (%.0f MB/s), %.2f s wall (%.0f MB/s), exit %d\n",
                r.name.c_str(), r.bytes / 1e6, r.cpu, r.bytes / 1e6 / r.cpu, r.wall, r.bytes / 1e6 / r.wall, r.rc);
  }
  j << "  ]\n}\n";
  if (!outPath.empty()) {
    std::ofstream o(outPath);
    o << j.str();
    if (!o) {
      std::fprintf(stderr, "triage_bench: cannot write %s\n", outPath.c_str());
      return 1;
    }
    std::printf("[ triage_bench ] wrote %s\n", outPath.c_str());
  } else {
    std::fputs(j.str().c_str(), stdout);
  }
  return 0;
}
