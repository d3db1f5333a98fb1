#include "frontend/source.h"
#include "frontend/regular_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace nns::front {

std::string_view SourceFile::line(int line_no) const {
  if (line_no < 1 || line_no > static_cast<int>(line_starts.size())) return {};
  size_t begin = line_starts[line_no - 1];
  size_t end = text.find('\n', begin);
  if (end == std::string::npos) end = text.size();
  if (end > begin && text[end - 1] == '\r') --end;
  return std::string_view(text).substr(begin, end - begin);
}

int SourceManager::add(std::string path, std::string text) {
  auto f = std::make_unique<SourceFile>();
  f->path = std::move(path);
  f->text = std::move(text);
  f->line_starts.push_back(0);
  for (size_t i = 0; i < f->text.size(); ++i)
    if (f->text[i] == '\n') f->line_starts.push_back(i + 1);
  files_.push_back(std::move(f));
  return static_cast<int>(files_.size()) - 1;
}

int SourceManager::load(const std::string& path) {
  // A directory opens as a stream that reads nothing: refused, not an empty file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return -1;
  // Regular files only, opened without blocking: a FIFO or /dev/zero given
  // as a model file is refused instead of hanging or filling memory.
  std::string text, why;
  if (!read_regular_file(path, text, why)) return -1;
  return add(path, std::move(text));
}

}  // namespace nns::front
