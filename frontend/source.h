// Source files and locations. Every AST node and graph node carries a
// SourceLoc so that any later phase can point at the text that caused it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nns::front {

// A position in a loaded file: 1-based line and column, plus the length of
// the span on that line (for the caret underline).
struct SourceLoc {
  int file = -1;  // index into SourceManager; -1 = no location (built-in)
  int line = 0;
  int col = 0;
  int length = 1;
  bool valid() const { return file >= 0; }
};

struct SourceFile {
  std::string path;
  std::string text;
  std::vector<size_t> line_starts;  // byte offset of each line
  std::string_view line(int line_no) const;  // 1-based, without newline
};

// Owns the text of every file the program reads (the main file, imports,
// stdlib modules), so diagnostics can quote any of them.
class SourceManager {
 public:
  int add(std::string path, std::string text);
  // Reads a file; returns -1 if it cannot be read.
  int load(const std::string& path);
  const SourceFile& file(int id) const { return *files_[id]; }
  int count() const { return static_cast<int>(files_.size()); }

 private:
  std::vector<std::unique_ptr<SourceFile>> files_;
};

}  // namespace nns::front
