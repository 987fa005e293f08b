// Untrusted input stays bounded: each case runs `arfuse triage` in a child process under an address-
// space limit and an alarm, and checks its peak resident memory. The bounds are generous (seconds
// for work that takes milliseconds, hundreds of MB for a few): they are not speed targets, they
// catch what the issue measured - 23 GB from a 120-byte line, minutes in std::regex, 3.1 GB from an
// xz header, 3.2 GB from 1500 open .gz files - coming back.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "catalog.h"
#include "triage.h"

namespace {

struct Bounded {
  int rc = -1;
  bool killed = false;
  double seconds = 0;
  long maxRssMb = 0;
  std::string out;
};

// Runs runCli(args) in a child limited to `asMb` of address space and `seconds` of wall time.
Bounded runBounded(const std::vector<std::string>& args, int seconds, long asMb = 4096) {
  Bounded b;
  const std::string outPath = ::testing::TempDir() + "/triage_hostile_out_" + std::to_string(getpid());
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    rlimit lim{static_cast<rlim_t>(asMb) << 20, static_cast<rlim_t>(asMb) << 20};
    setrlimit(RLIMIT_AS, &lim);
    alarm(static_cast<unsigned>(seconds));
    std::ofstream out(outPath, std::ios::binary);
    std::ostringstream err;
    int rc = arfuse::triage::runCli(args, out, err);
    out << err.str();
    out.close();
    _exit(rc);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  b.maxRssMb = ru.ru_maxrss / 1024;
  b.killed = !WIFEXITED(status);
  b.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  std::ifstream in(outPath, std::ios::binary);
  b.out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(outPath.c_str());
  std::printf("[ hostile ] %-40s exit %d, %.2f s, peak RSS %ld MB\n",
              args.empty() ? "" : args[0].substr(args[0].rfind('/') + 1).c_str(), b.rc, b.seconds, b.maxRssMb);
  return b;
}

std::string tempPath(const std::string& name) {
  return ::testing::TempDir() + "/triage_hostile_" + std::to_string(getpid()) + "_" + name;
}

void writeFile(const std::string& path, const std::string& data) {
  std::ofstream o(path, std::ios::binary);
  o << data;
}

// A 120-byte line that claims 2^31 ranks must not make anything per rank.
TEST(TriageHostile, HugeRankClaimsAreClampedNotMaterialised) {
  const std::string p = tempPath("nranks.log");
  writeFile(p,
            "arfuse-flight-recorder v1 rank=0 dev=0 nranks=2147483647 arch=sm_90 timeout_s=5 abort=1 entries=1\n"
            "entry=0 epoch=9 op=AllReduce bytes=64 dtype=bf16 path=oneshot start_ns=1 end_ns=pending\n"
            "tp_size=2147483647 world_size=99999999999999999999\n"
            "[rank2147483646]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "arfuse-error-record rank=2147483647 peer=2147483646 block=0 epoch=9 phase=wait\n"
            "arfuse ERROR rank=2000000000 dev=0 sm_90 code=arfusePeerTimeout call=9 comm.cc:1 rank 0 waited 5.0 s for "
            "rank 2147483647 at call 9\n");
  Bounded b = runBounded({p, "--json"}, 30, 2048);
  std::remove(p.c_str());
  ASSERT_FALSE(b.killed) << b.out;
  EXPECT_EQ(b.rc, 0) << b.out;
  EXPECT_LT(b.maxRssMb, 200);
  EXPECT_NE(b.out.find("ranks were ignored"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("lines named a rank above 65535"), std::string::npos) << b.out;
}

// Lines built to hit every literal of the catalogue at once, long and full of the characters the
// patterns repeat: RE2 stays linear where std::regex backtracked for minutes (and recursed ~1-2 MB
// of stack per 4 KiB line).
TEST(TriageHostile, CraftedLinesStayLinear) {
  std::string lits;
  for (const auto& s : arfuse::triage::Catalog::builtin().signatures())
    for (const auto& l : s.literals) lits += l + " " + std::string(40, '\'') + " ";
  std::string line;
  while (line.size() < 60000) line += lits + std::string(200, 'a') + "[" + std::string(200, ' ') + "(";
  const std::string p = tempPath("crafted.log");
  {
    std::ofstream o(p, std::ios::binary);
    for (int i = 0; i < 100; ++i) o << "[2026-11-29 10:00:01 TP" << i % 8 << "] " << line << "\n";
  }
  Bounded b = runBounded({p}, 120, 2048);
  std::remove(p.c_str());
  ASSERT_FALSE(b.killed) << "timed out or crashed";
  EXPECT_LT(b.maxRssMb, 300);
}

// An xz stream whose block header asks for a 4 GiB dictionary: refused by the memory limit.
TEST(TriageHostile, XzDictionaryIsLimited) {
  const std::string plain = tempPath("xz.log"), xz = plain + ".xz";
  writeFile(plain, "RuntimeError: CUDA error: an illegal memory access was encountered\n");
  if (std::system(("xz -T1 -c '" + plain + "' > '" + xz + "' 2>/dev/null").c_str()) != 0) GTEST_SKIP() << "no xz tool";
  std::ifstream in(xz, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Stream header (12 bytes), then the block header: size byte, flags, [sizes], filter flags.
  ASSERT_GT(data.size(), 32u);
  const size_t hdr = 12, hdrSize = (static_cast<unsigned char>(data[hdr]) + 1) * 4;
  size_t at = hdr + 2;
  const unsigned char flags = static_cast<unsigned char>(data[hdr + 1]);
  auto skipVarint = [&]() {
    while (static_cast<unsigned char>(data[at]) & 0x80) ++at;
    ++at;
  };
  if (flags & 0x40) skipVarint();
  if (flags & 0x80) skipVarint();
  ASSERT_EQ(static_cast<unsigned char>(data[at]), 0x21) << "LZMA2 filter expected";
  ASSERT_EQ(data[at + 1], 1);
  data[at + 2] = 40;  // dictionary size code 40: 4 GiB - 1
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(data.data() + hdr), static_cast<uInt>(hdrSize - 4));
  for (int k = 0; k < 4; ++k) data[hdr + hdrSize - 4 + k] = static_cast<char>((crc >> (8 * k)) & 0xFF);
  writeFile(xz, data);
  Bounded b = runBounded({xz}, 30, 2048);
  std::remove(plain.c_str());
  std::remove(xz.c_str());
  ASSERT_FALSE(b.killed) << b.out;
  if (b.out.find("no liblzma") != std::string::npos) GTEST_SKIP() << "built without liblzma";
  EXPECT_EQ(b.rc, 2) << b.out;  // the only input is unusable
  EXPECT_NE(b.out.find("MiB limit"), std::string::npos) << b.out;
  EXPECT_LT(b.maxRssMb, 300);
}

// 1500 small .gz files (per-rank rotated logs): opened one at a time.
TEST(TriageHostile, ManySmallGzipFilesOpenLazily) {
  const std::string d = tempPath("manygz");
  mkdir(d.c_str(), 0755);
  for (int i = 0; i < 1500; ++i) {
    gzFile g = gzopen((d + "/rank" + std::to_string(i % 8) + "_" + std::to_string(i) + ".log.gz").c_str(), "wb");
    std::string s = "[2026-11-29 10:00:01 TP" + std::to_string(i % 8) + "] Decode batch. #running-req: 1\n";
    if (i == 777) s += "[2026-11-29 10:00:02 TP1] RuntimeError: CUDA error: an illegal memory access was encountered\n";
    gzwrite(g, s.data(), static_cast<unsigned>(s.size()));
    gzclose(g);
  }
  Bounded b = runBounded({d}, 60, 2048);
  std::system(("rm -rf '" + d + "'").c_str());
  ASSERT_FALSE(b.killed) << b.out;
  EXPECT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("1500 files"), std::string::npos) << b.out.substr(0, 300);
  EXPECT_LT(b.maxRssMb, 200);
}

// 100k error records with long texts, and the same failure from 65536 different ranks: kept
// structures are capped, the rest is counted.
TEST(TriageHostile, RecordsAndRanksDoNotAccumulate) {
  const std::string p = tempPath("records.log");
  {
    std::ofstream o(p, std::ios::binary);
    const std::string mine(400, 'm'), theirs(400, 't');
    for (int i = 0; i < 100000; ++i)
      o << "arfuse-error-record rank=" << i % 60000 << " peer=" << (i + 1) % 60000 << " block=0 epoch=" << i
        << " phase=arrive code=mismatch mine=" << mine << " theirs=" << theirs << "\n";
    for (int r = 0; r < 65536; ++r)
      o << "[rank" << r << "]:RuntimeError: CUDA error: an illegal memory access was encountered (call " << r << ")\n";
  }
  Bounded b = runBounded({p}, 120, 2048);
  std::remove(p.c_str());
  ASSERT_FALSE(b.killed) << b.out.substr(0, 2000);
  EXPECT_EQ(b.rc, 0) << b.out.substr(0, 2000);
  EXPECT_LT(b.maxRssMb, 400);
  EXPECT_NE(b.out.find("were counted, not kept"), std::string::npos) << b.out.substr(0, 3000);
  EXPECT_NE(b.out.find("(the first 4096 kept)"), std::string::npos) << b.out.substr(0, 3000);
}

// One 64 MB line without a newline, the error at its very end: found, in bounded memory.
TEST(TriageHostile, OneHugeLine) {
  const std::string p = tempPath("hugeline.log");
  {
    std::ofstream o(p, std::ios::binary);
    std::string chunk(1 << 20, 'q');
    for (int i = 0; i < 64; ++i) o << chunk;
    o << " RuntimeError: CUDA error: an illegal memory access was encountered";
  }
  Bounded b = runBounded({p}, 60, 2048);
  std::remove(p.c_str());
  ASSERT_FALSE(b.killed);
  EXPECT_EQ(b.rc, 0) << b.out.substr(0, 500);
  EXPECT_NE(b.out.find("cuda.illegal_address"), std::string::npos);
  EXPECT_LT(b.maxRssMb, 200);
}

bool validUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Escape sequences and NUL in a log line never reach the terminal raw; --json is valid UTF-8.
TEST(TriageHostile, ControlBytesAndInvalidUtf8AreEscaped) {
  const std::string p = tempPath("ctl.log");
  std::string line = "RuntimeError: CUDA error: an illegal memory access was encountered ";
  line += "\x1b]0;owned\x07 \x1bP1$r ";  // OSC (retitles the terminal), DCS
  line += std::string(1, '\0') + "\x07\x08\x7f bytes ";
  line += "\xC3\x28 \xFF\xFE \xE2\x82 ";  // invalid UTF-8: bad continuation, stray bytes, cut sequence
  line +=
      "\xC2\x9B"
      "2J\n";  // C1 CSI "clear screen"
  writeFile(p, line);
  std::ostringstream text, json, err;
  EXPECT_EQ(arfuse::triage::runCli({p}, text, err), 0);
  EXPECT_EQ(arfuse::triage::runCli({p, "--json"}, json, err), 0);
  std::remove(p.c_str());
  for (unsigned char c : text.str()) EXPECT_TRUE(c >= 0x20 || c == '\n' || c == '\t') << "raw control byte " << int(c);
  EXPECT_EQ(text.str().find("\xC2\x9B"), std::string::npos) << "C1 control (CSI) reached the terminal";
  EXPECT_NE(text.str().find("\\x1B"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\\x00"), std::string::npos) << text.str();
  EXPECT_TRUE(validUtf8(text.str()));
  EXPECT_TRUE(validUtf8(json.str()));
  for (unsigned char c : json.str()) EXPECT_TRUE(c >= 0x20 || c == '\n') << "raw control byte in JSON " << int(c);
}

}  // namespace
