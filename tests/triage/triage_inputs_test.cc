// What users hand to `arfuse triage`: directories of per-rank logs, tar / tar.gz archives, binary
// files by mistake, empty files, lines far longer than a screen, '\r' progress bars, CRLF.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "input.h"
#include "triage.h"

namespace {

int run(const std::vector<std::string>& args, std::string* out, std::string* err = nullptr) {
  std::ostringstream o, e;
  int rc = arfuse::triage::runCli(args, o, e);
  *out = o.str() + e.str();
  if (err) *err = e.str();
  return rc;
}

std::string tempDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/triage_in_" + name + "_" + std::to_string(getpid());
  std::system(("rm -rf '" + d + "'").c_str());
  mkdir(d.c_str(), 0755);
  return d;
}

void writeFile(const std::string& path, const std::string& data) {
  std::ofstream o(path, std::ios::binary);
  o << data;
}

void writeGzip(const std::string& path, const std::string& data) {
  gzFile g = gzopen(path.c_str(), "wb");
  ASSERT_NE(g, nullptr);
  gzwrite(g, data.data(), static_cast<unsigned>(data.size()));
  gzclose(g);
}

// A minimal ustar archive (what `tar --format=ustar` writes), so the test needs no tar binary.
std::string ustar(const std::vector<std::pair<std::string, std::string>>& members) {
  std::string out;
  for (const auto& [name, data] : members) {
    char h[512] = {};
    std::snprintf(h, 100, "%s", name.c_str());
    std::snprintf(h + 100, 8, "%07o", 0644);
    std::snprintf(h + 108, 8, "%07o", 0);
    std::snprintf(h + 116, 8, "%07o", 0);
    std::snprintf(h + 124, 12, "%011o", static_cast<unsigned>(data.size()));
    std::snprintf(h + 136, 12, "%011o", 0);
    h[156] = '0';
    std::memcpy(h + 257,
                "ustar\0"
                "00",
                8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out.append(h, 512);
    out += data;
    out.append((512 - data.size() % 512) % 512, '\0');
  }
  out.append(1024, '\0');
  return out;
}

const char kRank2Log[] =
    "[2026-11-29 10:00:01 TP2] Load weight end.\n"
    "[2026-11-29 10:00:02 TP2] RuntimeError: CUDART error: peer access is not supported between these two devices\n";
const char kMainLog[] =
    "[2026-11-29 10:00:03] Received sigquit from a child process. It usually means the child failed.\n";

TEST(TriageInputs, DirectoryIsOneJob) {
  const std::string d = tempDir("dir");
  mkdir((d + "/ranks").c_str(), 0755);
  writeFile(d + "/launcher.log", kMainLog);
  writeGzip(d + "/ranks/tp2.log.gz", kRank2Log);
  writeFile(d + "/ranks/core.png", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16) + std::string(200, '\0'));
  std::string out;
  EXPECT_EQ(run({d, "--json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"id\":\"cuda.peer_access_unsupported\""), std::string::npos) << out;
  EXPECT_NE(out.find("core.png: binary data, not a log (skipped)"), std::string::npos) << out;
  EXPECT_NE(out.find("\"skipped_inputs\":1"), std::string::npos) << out;
  EXPECT_EQ(run({d}, &out), 0);
  EXPECT_NE(out.find("2 files"), std::string::npos) << out;
  EXPECT_NE(out.find("sglang.sigquit"), std::string::npos) << out;  // the launcher's echo is explained
  std::system(("rm -rf '" + d + "'").c_str());
}

TEST(TriageInputs, TarAndTarGzAreReadMemberByMember) {
  const std::string d = tempDir("tar");
  const std::string tar = ustar({{"logs/launcher.log", kMainLog}, {"logs/rank2.log", kRank2Log}});
  writeFile(d + "/job.tar", tar);
  writeGzip(d + "/job.tgz", tar);
  for (const char* name : {"/job.tar", "/job.tgz"}) {
    std::string out;
    EXPECT_EQ(run({d + name, "--json"}, &out), 0) << out;
    EXPECT_NE(out.find("\"id\":\"cuda.peer_access_unsupported\""), std::string::npos) << out;
    EXPECT_NE(out.find(std::string(name + 1) + ":logs/rank2.log\""), std::string::npos) << out;
    EXPECT_EQ(out.find("ustar"), std::string::npos) << "tar headers read as log text:\n" << out;
    EXPECT_NE(out.find("\"rank\":2"), std::string::npos) << out;
  }
  // A member that is itself gzip-compressed, and the GNU tar of the system when there is one (long
  // names use GNU 'L' headers).
  writeFile(d + "/nested.tar", ustar({{"rank2.log.gz", ""}}));
  const std::string longDir = d + "/src/" + std::string(120, 'x');
  std::system(("mkdir -p '" + longDir + "'").c_str());
  writeGzip(longDir + "/rank2.log.gz", kRank2Log);
  if (std::system(("tar -C '" + d + "/src' -czf '" + d + "/gnu.tar.gz' . 2>/dev/null").c_str()) == 0) {
    std::string out;
    EXPECT_EQ(run({d + "/gnu.tar.gz", "--json"}, &out), 0) << out;
    EXPECT_NE(out.find(std::string(120, 'x') + "/rank2.log.gz\""), std::string::npos) << out;
  }
  std::system(("rm -rf '" + d + "'").c_str());
}

TEST(TriageInputs, TruncatedArchiveKeepsWhatWasRead) {
  const std::string d = tempDir("trunc");
  std::string tar = ustar({{"a/rank2.log", kRank2Log}, {"b/big.log", std::string(5000, 'x')}});
  writeFile(d + "/cut.tar", tar.substr(0, 512 * 3 + 100));
  std::string out;
  EXPECT_EQ(run({d + "/cut.tar"}, &out), 0) << out;
  EXPECT_NE(out.find("ends early"), std::string::npos) << out;
  std::system(("rm -rf '" + d + "'").c_str());
}

TEST(TriageInputs, BinaryOnlyIsUnusableEmptyIsSaidSo) {
  const std::string d = tempDir("bin");
  writeFile(d + "/core", std::string("\x7f"
                                     "ELF\x02\x01\x01",
                                     7) +
                             std::string(4096, '\0'));
  writeFile(d + "/empty.log", "");
  std::string out, err;
  EXPECT_EQ(run({d + "/core"}, &out, &err), 2) << out;
  EXPECT_NE(err.find("binary data"), std::string::npos) << err;
  EXPECT_NE(err.find("no readable log"), std::string::npos) << err;
  EXPECT_EQ(run({d + "/empty.log"}, &out), 1) << out;
  EXPECT_NE(out.find("VERDICT: no root cause found: the input is empty (0 bytes)"), std::string::npos) << out;
  EXPECT_EQ(run({d + "/does-not-exist.log"}, &out, &err), 2);
  EXPECT_NE(err.find("does-not-exist.log: No such file or directory"), std::string::npos) << err;
  mkdir((d + "/nothing").c_str(), 0755);
  EXPECT_EQ(run({d + "/nothing"}, &out, &err), 2) << out;
  EXPECT_NE(err.find("holds no files"), std::string::npos) << err;
  std::system(("rm -rf '" + d + "'").c_str());
}

// What add() refuses is arfuseInvalidArgument with the text the CLI prints after "arfuse triage: "; a
// compression this build cannot read is arfuseUnsupported, naming the log and how to decompress it.
TEST(TriageInputs, RefusalsAreStatusesWithTheirText) {
  const std::string d = tempDir("refused");
  arfuse::triage::InputSet s;
  const arfuse::Status missing = s.add(d + "/does-not-exist.log");
  EXPECT_EQ(missing.code(), arfuseInvalidArgument);
  EXPECT_EQ(missing.message(), d + "/does-not-exist.log: No such file or directory");
  EXPECT_TRUE(s.add("-").ok());
  const arfuse::Status twice = s.add("-");
  EXPECT_EQ(twice.code(), arfuseInvalidArgument);
  EXPECT_EQ(twice.message(), "'-' (stdin) given twice");
  struct Bytes : arfuse::triage::ByteSource {
    std::string data;
    explicit Bytes(std::string d) : data(std::move(d)) {}
    long read(char* dst, size_t n) override {
      n = std::min(n, data.size());
      std::memcpy(dst, data.data(), n);
      data.erase(0, n);
      return static_cast<long>(n);
    }
  };
  std::string kind;
  std::unique_ptr<arfuse::triage::ByteSource> decoded;
  const arfuse::Status zstd = arfuse::triage::decode(
      std::make_unique<Bytes>(std::string("\x28\xB5\x2F\xFD", 4) + "frame"), "a.zst", &kind, &decoded);
  EXPECT_EQ(zstd.code(), arfuseUnsupported);
  EXPECT_EQ(zstd.message(),
            "a.zst: zstd-compressed, which triage does not read; decompress first (zstd -dc a.zst | arfuse triage -)");
  EXPECT_EQ(decoded, nullptr);
  const arfuse::Status plain = arfuse::triage::decode(std::make_unique<Bytes>("hello\n"), "a.log", &kind, &decoded);
  EXPECT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(kind, "none");
  ASSERT_NE(decoded, nullptr);
  char buf[16] = {};
  EXPECT_EQ(decoded->read(buf, sizeof(buf)), 6);
  EXPECT_EQ(std::string(buf), "hello\n");
  std::system(("rm -rf '" + d + "'").c_str());
}

// An error after a '\r' progress bar, at the end of a 300 KB line, straddling a 64 KiB window edge,
// and a CRLF log: each is seen, on the line number an editor shows.
TEST(TriageInputs, CarriageReturnsAndLongLines) {
  const std::string d = tempDir("long");
  std::string bar;
  for (int i = 0; i < 2000; ++i) bar += "Capturing batches (bs=" + std::to_string(i) + "): 50%|#####     |\r";
  writeFile(d + "/bar.log",
            "line one\n" + bar + "RuntimeError: CUDA error: an illegal memory access was encountered\n");
  std::string out;
  EXPECT_EQ(run({d + "/bar.log", "--json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"id\":\"cuda.illegal_address\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"line\":2,"), std::string::npos) << out;

  const std::string msg = "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)";
  writeFile(d + "/huge.log", std::string(300000, 'a') + " " + msg + "\nnext line\n");
  EXPECT_EQ(run({d + "/huge.log", "--json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"id\":\"host.shm_exhausted\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"windowed_lines\":1"), std::string::npos) << out;
  EXPECT_NE(out.find("scanned in overlapping"), std::string::npos) << out;

  constexpr size_t kWindow = arfuse::triage::LineReader::kWindow;
  writeFile(d + "/edge.log", std::string(kWindow - 30, 'b') + " " + msg + std::string(100000, 'c') + "\n");
  EXPECT_EQ(run({d + "/edge.log", "--json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"id\":\"host.shm_exhausted\""), std::string::npos) << out;

  writeFile(d + "/crlf.log", "a\r\nb\r\nRuntimeError: CUDA error: an illegal memory access was encountered\r\n");
  EXPECT_EQ(run({d + "/crlf.log", "--json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"line\":3,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"lines\":3,"), std::string::npos) << out;
  std::system(("rm -rf '" + d + "'").c_str());
}

// The reader's segments and windows, against a direct split of the same bytes.
TEST(TriageInputs, LineReaderSegmentsAndWindows) {
  using arfuse::triage::LineReader;
  struct Mem : arfuse::triage::ByteSource {
    std::string data;
    size_t pos = 0, step;
    Mem(std::string d, size_t s) : data(std::move(d)), step(s) {}
    long read(char* dst, size_t n) override {
      n = std::min({n, step, data.size() - pos});
      std::memcpy(dst, data.data() + pos, n);
      pos += n;
      return static_cast<long>(n);
    }
  };
  const std::string longLine(200000, 'z');
  const std::string text =
      "a\rb\r\nc\n" + longLine + "\n\x1b[31mred\x1b[0m \x1b]0;title\x07ok\n#033[2m(raylet)#033[0m x";
  for (size_t step : {size_t{1}, size_t{7}, size_t{1} << 20}) {
    LineReader r(std::make_unique<Mem>(text, step));
    std::vector<std::pair<std::string, bool>> got;
    std::string_view seg;
    bool same = false;
    while (r.next(&seg, &same)) got.emplace_back(std::string(seg), same);
    ASSERT_GE(got.size(), 7u);
    EXPECT_EQ(got[0], std::make_pair(std::string("a"), false));
    EXPECT_EQ(got[1], std::make_pair(std::string("b"), true));
    EXPECT_EQ(got[2], std::make_pair(std::string("c"), false));
    // 200000 bytes in 64 KiB windows overlapping by 1 KiB: every byte is delivered, in order.
    size_t covered = 0, i = 3;
    for (; i < got.size() && got[i].first.find_first_not_of('z') == std::string::npos; ++i) {
      EXPECT_EQ(got[i].second, i > 3);
      covered += got[i].first.size() - (i > 3 ? LineReader::kOverlap : 0);
    }
    EXPECT_EQ(covered, longLine.size());
    EXPECT_EQ(r.windowedLines(), 1u);
    ASSERT_EQ(got.size(), i + 2);
    EXPECT_EQ(got[i].first, "red ok");          // CSI and OSC removed
    EXPECT_EQ(got[i + 1].first, "(raylet) x");  // syslog's "#033[" spelling too
  }
}

}  // namespace
