// The on-disk layout of a partitioned checkpoint (`nns run --plan P --save
// DIR`), made so that a save interrupted at any moment never costs the last
// complete checkpoint:
//
//   DIR/latest                 "step-4\n": the last complete save, written last
//   DIR/step-4/rank-<r>.safetensors   each rank's pieces (plan_checkpoint.cpp)
//   DIR/step-4/manifest        what a complete save holds: step, world,
//                              optimizer, plan and every shard's size and
//                              FNV-1a checksum
//
// A save writes every shard into a new folder, then rank 0 writes the
// manifest and only then replaces `latest` (each an atomic rename), and
// only then removes the previous folder. A reader follows `latest`, checks
// the manifest against the files, and refuses anything torn or missing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/runtime/safetensors.h"

namespace nns::backend {

struct ShardFile {
  std::string name;  // "rank-3.safetensors"
  int64_t bytes = 0;
  uint64_t checksum = 0;  // FNV-1a 64 of the file's bytes
};

struct ShardManifest {
  int64_t step = 0, world = 0;
  std::string optimizer, plan;
  std::vector<ShardFile> files;  // rank order, one per rank
  std::string folder;            // DIR/step-S (set by read_latest_shards)
};

// The folder the save of `step` writes into, the same on every rank: read
// from DIR/latest before anyone changes it. "step-S", or "step-S.1" when
// "step-S" is the complete checkpoint (a second save of the same step must
// not write into the one it would replace).
std::string next_shard_folder(const std::string& dir, int64_t step);
// Rank 0, before the ranks write: creates DIR and DIR/FOLDER (emptied), and
// removes what interrupted saves left (step-* folders `latest` does not
// name, stale temporaries).
void prepare_shard_folder(const std::string& dir, const std::string& folder);
// Rank 0, after every rank's shard is in place: checks there is one per
// rank, writes the manifest, makes DIR/latest name FOLDER, then removes the
// previous checkpoint's folder.
void publish_shards(const std::string& dir, const std::string& folder, ShardManifest m);
// The last complete save of DIR, every file checked against its manifest.
// Throws SafetensorsError (bad input, exit 65) naming what is torn or missing.
ShardManifest read_latest_shards(const std::string& dir);

// FNV-1a 64 of a file's bytes; `bytes` = its size, -1 if it cannot be read.
uint64_t file_checksum(const std::string& path, int64_t& bytes);

// The single-device checkpoint that the last complete save into shard
// folder `dir` holds, assembled in memory from the pieces (what `nns ckpt
// merge` writes; plan_checkpoint.cpp). Every element must come from exactly
// one shard.
SafetensorsFile assemble_shards(const std::string& dir);
// A checkpoint file, or a shard folder's last complete save assembled.
SafetensorsFile read_checkpoint(const std::string& path);
// The metadata of a checkpoint file, or of a shard folder's last complete
// save (read from its first shard, without assembling the tensors).
std::map<std::string, std::string> checkpoint_metadata(const std::string& path);

}  // namespace nns::backend
