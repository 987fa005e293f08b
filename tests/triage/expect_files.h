// The .expect files the triage tests read: DIR/NAME.expect holds "key = value" lines ('#' starts a
// comment line; a key may repeat). Each file's fields in file order; the files sorted by NAME.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace triage_test {

struct ExpectFile {
  std::string name;                                         // NAME, without ".expect"
  std::vector<std::pair<std::string, std::string>> fields;  // (key, value) in file order
};

inline std::vector<ExpectFile> readExpectFiles(const std::string& dir) {
  std::vector<ExpectFile> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string f = e->d_name;
    if (f.size() < 8 || f.substr(f.size() - 7) != ".expect") continue;
    ExpectFile x;
    x.name = f.substr(0, f.size() - 7);
    std::ifstream in(dir + "/" + f);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t eq = line.find(" = ");
      if (eq != std::string::npos) x.fields.emplace_back(line.substr(0, eq), line.substr(eq + 3));
    }
    out.push_back(std::move(x));
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const ExpectFile& a, const ExpectFile& b) { return a.name < b.name; });
  return out;
}

// A gtest parameter name from a log's name (gtest allows only [A-Za-z0-9_]).
inline std::string testName(std::string n) {
  for (char& c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) c = '_';
  return n;
}

}  // namespace triage_test
