// The layers of src/ form a DAG (src/layers.txt): every #include of a file under src/ names a file of
// its own folder or of a folder on a lower line of src/layers.txt. A CPU test so that an include
// against the order fails where it is written, not when a cycle has grown around it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// The units of a layer file by name, each with its line (0 = lowest).
struct Layers {
  std::map<std::string, int> line;
  std::vector<std::string> order;  // the units as written, lowest first
  std::string error;
};

Layers readLayers(const fs::path& file) {
  Layers l;
  std::ifstream in(file);
  if (!in) {
    l.error = "cannot read " + file.string();
    return l;
  }
  std::string text;
  int n = 0;
  while (std::getline(in, text)) {
    text = text.substr(0, text.find('#'));
    std::istringstream words(text);
    bool any = false;
    for (std::string u; words >> u;) {
      if (l.line.count(u)) l.error += u + " is on two lines; ";
      l.line[u] = n;
      l.order.push_back(u);
      any = true;
    }
    n += any;
  }
  return l;
}

// The unit a file of src/ belongs to: its folder, a path's folder under algos/ ("" for the files
// directly in src/: the build's).
std::string unitOf(const fs::path& rel) {
  std::vector<std::string> parts;
  for (const fs::path& p : rel) parts.push_back(p.string());
  if (parts.size() < 2) return "";
  if (parts[0] == "algos" && parts.size() > 2) return "algos/" + parts[1];
  return parts[0];
}

// The line of a unit (a path's folder not named on a line of its own: algos/*'s), -1 if none.
int lineOf(const std::string& unit, const Layers& l) {
  if (l.line.count(unit)) return l.line.at(unit);
  if (unit.rfind("algos/", 0) == 0 && l.line.count("algos/*")) return l.line.at("algos/*");
  return -1;
}

bool isSource(const fs::path& p) {
  static const std::vector<std::string> kExt = {".h", ".cc", ".cu", ".cuh", ".in"};
  for (const std::string& e : kExt)
    if (p.extension() == e) return true;
  return false;
}

// Every include of `src` that goes against `l`, and every folder on no line, one sentence each.
std::vector<std::string> violations(const fs::path& src, const Layers& l) {
  std::vector<std::string> out;
  if (!l.error.empty()) return {l.error};
  for (const auto& [unit, line] : l.line) {
    const fs::path dir = src / (unit == "algos/*" ? "algos" : unit);
    if (!fs::is_directory(dir)) out.push_back("src/layers.txt names " + unit + ", which is no folder of src/");
  }
  static const std::regex kInclude(R"(^\s*#\s*include\s*"([^"]+)\")");
  std::map<std::string, bool> reported;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(src))
    if (e.is_regular_file() && isSource(e.path())) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    const fs::path rel = fs::relative(file, src);
    const std::string from = unitOf(rel);
    if (from.empty()) continue;
    if (lineOf(from, l) < 0) {
      if (!reported[from])
        out.push_back("src/" + from + "/ is on no line of src/layers.txt: add it where it belongs in the order");
      reported[from] = true;
      continue;
    }
    std::ifstream in(file);
    std::string text;
    for (int n = 1; std::getline(in, text); ++n) {
      std::smatch m;
      if (!std::regex_search(text, m, kInclude)) continue;
      fs::path target = src / m[1].str();                                 // includes name files from src/ ...
      if (!fs::exists(target)) target = file.parent_path() / m[1].str();  // ... or beside the file
      if (!fs::exists(target)) continue;                                  // the public header, the system's
      const std::string to = unitOf(fs::relative(fs::weakly_canonical(target), fs::weakly_canonical(src)));
      if (to.empty() || to == from || lineOf(to, l) < 0) continue;
      const int a = lineOf(from, l), b = lineOf(to, l);
      if (b < a) continue;
      out.push_back("src/" + rel.string() + ":" + std::to_string(n) + " includes " + m[1].str() + ": " + from +
                    (b == a ? " and " + to + " are on one line of src/layers.txt (peers include none of each other)"
                            : " may not include " + to + ", a higher layer in src/layers.txt") +
                    "; move what it needs down, or the code that needs it up");
    }
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "  " + x + "\n";
  return s;
}

TEST(Layers, EveryIncludeOfSrcGoesDownTheLayerOrder) {
  const fs::path src = fs::path(ARFUSE_SOURCE_DIR) / "src";
  const Layers l = readLayers(src / "layers.txt");
  ASSERT_TRUE(l.error.empty()) << l.error;
  const std::vector<std::string> v = violations(src, l);
  EXPECT_TRUE(v.empty()) << v.size() << " include(s) against src/layers.txt:\n" << joined(v);
}

// docs/architecture.md draws the same order: its Layers drawing has a row for every unit,
// "src/<unit>" at the start of a line, each above the rows of every lower line's units.
TEST(Layers, TheArchitecturePageDrawsTheSameOrder) {
  const fs::path root(ARFUSE_SOURCE_DIR);
  const Layers l = readLayers(root / "src" / "layers.txt");
  std::ifstream in(root / "docs" / "architecture.md");
  std::stringstream all;
  all << in.rdbuf();
  const std::string doc = all.str();
  const size_t from = doc.find("## Layers");
  ASSERT_NE(from, std::string::npos) << "docs/architecture.md has no '## Layers' section";
  const size_t to = doc.find("\n## ", from + 1);
  const std::string section = doc.substr(from, to == std::string::npos ? std::string::npos : to - from);
  std::map<std::string, size_t> row;
  for (const std::string& u : l.order) {
    const std::string start = "\nsrc/" + u;
    for (size_t at = section.find(start); at != std::string::npos; at = section.find(start, at + 1)) {
      const char next = at + start.size() < section.size() ? section[at + start.size()] : '\n';
      if (next == ' ' || next == '\n') {
        row[u] = at;
        break;
      }
    }
    EXPECT_TRUE(row.count(u)) << "docs/architecture.md's Layers drawing has no row 'src/" << u << "'";
  }
  for (const auto& [hi, a] : row)
    for (const auto& [lo, b] : row)
      if (l.line.at(hi) > l.line.at(lo))
        EXPECT_LT(a, b) << "docs/architecture.md draws src/" << lo << " above src/" << hi
                        << ", which src/layers.txt puts higher";
}

// The check itself: a small tree with one include of each kind.
class LayersOfATree : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/arfuse_layers_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
};

TEST_F(LayersOfATree, FindsUpwardPeerAndUnlistedIncludes) {
  write("layers.txt", "# lowest first\nbase  # below all\nmid other\nalgos\nalgos/*\nalgos/two\ntop\n");
  write("base/a.h", "#include \"base/b.h\"\n");                             // its own folder
  write("base/b.h", "#include \"mid/m.h\"\n");                              // upward
  write("mid/m.h", "#include \"base/a.h\"\n#include \"other/o.h\"\n");      // down; a peer
  write("other/o.h", "#include <vector>\n#include \"arfuse/arfuse.h\"\n");  // not files of src
  write("algos/registry.h", "#include \"mid/m.h\"\n");
  write("algos/one/plan.cc", "#include \"algos/registry.h\"\n#include \"algos/two/k.h\"\n");  // a path on a higher line
  write("algos/two/k.h", "#include \"algos/one/plan.cc\"\n#include \"k2.h\"\n");              // a path on a lower line
  write("algos/two/k2.h", "");
  write("algos/three/x.h", "#include \"algos/one/plan.cc\"\n");  // a path beside it: algos/* are peers
  write("top/t.cc", "#include \"algos/two/k.h\"\n");
  write("stray/s.h", "#include \"base/a.h\"\n");
  const Layers l = readLayers(root_ / "layers.txt");
  ASSERT_TRUE(l.error.empty()) << l.error;
  EXPECT_EQ(l.order, (std::vector<std::string>{"base", "mid", "other", "algos", "algos/*", "algos/two", "top"}));
  const std::vector<std::string> v = violations(root_, l);
  ASSERT_EQ(v.size(), 5u) << joined(v);
  EXPECT_NE(v[0].find("src/algos/one/plan.cc:2 includes algos/two/k.h: algos/one may not include algos/two"),
            std::string::npos)
      << v[0];
  EXPECT_NE(v[1].find("src/algos/three/x.h:1 includes algos/one/plan.cc: algos/three and algos/one are on one line"),
            std::string::npos)
      << v[1];
  EXPECT_NE(v[2].find("src/base/b.h:1 includes mid/m.h: base may not include mid"), std::string::npos) << v[2];
  EXPECT_NE(v[3].find("src/mid/m.h:2 includes other/o.h: mid and other are on one line"), std::string::npos) << v[3];
  EXPECT_NE(v[4].find("src/stray/ is on no line"), std::string::npos) << v[4];
}

TEST_F(LayersOfATree, ALayerFileNamingNoFolderOrAUnitTwiceIsAnError) {
  write("layers.txt", "base\nbase gone\n");
  write("base/a.h", "");
  const Layers twice = readLayers(root_ / "layers.txt");
  EXPECT_NE(twice.error.find("base is on two lines"), std::string::npos);
  write("layers.txt", "base\ngone\n");
  const std::vector<std::string> v = violations(root_, readLayers(root_ / "layers.txt"));
  ASSERT_EQ(v.size(), 1u) << joined(v);
  EXPECT_NE(v[0].find("names gone, which is no folder"), std::string::npos);
}

}  // namespace
