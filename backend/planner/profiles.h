// Device profiles (stdlib/profiles/*.json) as the one place that names a
// device and its memory: the list of shipped profiles for messages, the one
// loader the driver, the simulator and the REPL use, and --device-memory's
// profile names. Adding a device is adding its JSON file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/planner/cost_model.h"

namespace nns::planner {

// $NNS_STDLIB/profiles, else the source tree's stdlib/profiles.
std::string profiles_dir();
// The names of the profiles in `dir` (its *.json files without the
// extension), sorted; empty when it cannot be read.
std::vector<std::string> list_profiles(const std::string& dir);
// "a100|cpu|h100|h200|v100|PATH.json": what --device takes.
std::string device_choices(const std::string& dir = profiles_dir());
// A shipped profile's name (in profiles_dir()) or a path to a .json file.
bool load_device(const std::string& spec, DeviceProfile& out, std::string& err);
// --device-memory: a size ("80GiB", "512 MiB", "1.5TB", bytes) or the name
// of a profile in `dir`, whose memory_bytes it reads. `label` names the
// capacity in messages ("80 GiB (h100)").
bool parse_device_memory(const std::string& text, int64_t& bytes, std::string& label, std::string& err,
                         const std::string& dir = profiles_dir());

}  // namespace nns::planner
