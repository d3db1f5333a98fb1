// Device profiles by name (profiles.h).
#include "backend/planner/profiles.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "semantics/checker/checker.h"
#include "semantics/graph.h"

namespace nns::planner {

std::string profiles_dir() {
  const char* env = std::getenv("NNS_STDLIB");
  return std::string(env && *env ? env : NNS_STDLIB_DIR) + "/profiles";
}

std::vector<std::string> list_profiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::filesystem::path& p = entry.path();
    if (p.extension() == ".json" && entry.is_regular_file(ec)) names.push_back(p.stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string device_choices(const std::string& dir) {
  std::string s;
  for (const std::string& n : list_profiles(dir)) s += n + "|";
  return s + "PATH.json";
}

bool load_device(const std::string& spec, DeviceProfile& out, std::string& err) {
  return load_profile(spec, profiles_dir(), out, err);
}

bool parse_device_memory(const std::string& text, int64_t& bytes, std::string& label, std::string& err, const std::string& dir) {
  const std::vector<std::string> names = list_profiles(dir);
  if (std::find(names.begin(), names.end(), text) != names.end()) {
    DeviceProfile p;
    if (!load_profile(text, dir, p, err)) {
      err = "--device-memory: " + err;
      return false;
    }
    bytes = static_cast<int64_t>(std::llround(p.memory_bytes));
    const bool whole_gib = bytes > 0 && bytes % (int64_t{1} << 30) == 0;
    label = (whole_gib ? std::to_string(bytes >> 30) + " GiB" : sema::format_bytes(bytes)) + " (" + text + ")";
    return true;
  }
  if (sema::check::parse_memory_size(text, bytes, label, err)) return true;
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  err += " or a device profile (" + list + ")";
  return false;
}

}  // namespace nns::planner
