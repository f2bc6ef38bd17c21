// Helpers for the data tests: temporary files and Criteo lines.
#ifndef SHARDPS_WORKER_DATA_TEST_UTIL_H_
#define SHARDPS_WORKER_DATA_TEST_UTIL_H_

#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace shardps {
namespace data {
namespace testing {

// A path in the test's private temporary directory.
inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

inline std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// Writes `content` gzip-compressed (one member per element of `members`).
inline std::string WriteGzip(const std::string& name, const std::vector<std::string>& members) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const std::string& m : members) {
    const std::string tmp = path + ".member";
    gzFile gz = gzopen(tmp.c_str(), "wb");
    EXPECT_NE(gz, nullptr);
    EXPECT_EQ(gzwrite(gz, m.data(), m.size()), static_cast<int>(m.size()));
    gzclose(gz);
    std::ifstream in(tmp, std::ios::binary);
    out << in.rdbuf();
  }
  return path;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A Criteo line (no '\n'): label, 13 ints, 26 categoricals; missing values
// are empty strings. `id` makes the categoricals distinct per line.
inline std::string CriteoLine(int label, int id) {
  std::vector<std::string> cols = {absl::StrCat(label)};
  for (int j = 0; j < 13; ++j) cols.push_back(absl::StrCat(id + j));
  for (int f = 0; f < 26; ++f) {
    char buf[16];
    snprintf(buf, sizeof(buf), "%08x", id * 32 + f);
    cols.push_back(buf);
  }
  return absl::StrJoin(cols, "\t");
}

// `n` lines "CriteoLine(i % 2, first + i)\n".
inline std::string CriteoLines(int first, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, CriteoLine(i % 2, first + i), "\n");
  return out;
}

}  // namespace testing
}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_TEST_UTIL_H_
