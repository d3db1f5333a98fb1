// --trace: a Chrome trace (Trace Event Format JSON; opens in Perfetto,
// ui.perfetto.dev, or chrome://tracing) of what every rank executed, with
// measured times.
//
// Each rank records into a TraceRecorder: its trainer (the plan executor,
// or the single-device Trainer) registers one label per thing it can run
// (an instruction of its program, a node of its graph) up front, and then
// records only (label, begin, end, micro-batch, step) per execution, into a
// vector reserved before the first step. Nothing is formatted while the
// steps run; with tracing off no recorder exists and the trainers test one
// pointer per step.
//
// Times are CLOCK_MONOTONIC nanoseconds: the ranks of one host are forked
// processes, and that clock is common to them, so the merge subtracts the
// earliest time over all ranks and the rows line up.
//
// After the steps each rank writes OUT.rank-R (write_part: a line format of
// its own, with the events' JSON fragments ready); when every rank has
// exited, the launching process merges the parts into OUT (merge_trace_parts)
// and removes them. Rows (pid) are ranks, named "rank R (device D)"; threads
// (tid) are tracks, so that overlapping kinds render side by side:
//   compute  Forward / Backward / BackwardW (the weight gradients of a
//            zero-bubble schedule) of a kernel ("linear#1 F mb3", "... W mb3")
//   comm     collectives ("AllReduce 4.0 KiB {0,1}") and transfers
//            ("Send 2.0 KiB to rank 1 tag 3 mb0"); "Wait for posted
//            collective": the part of an instruction spent completing an
//            operation posted earlier on its buffers (a gradient bucket's
//            allreduce and its copy back), recorded before the
//            instruction's own event so that waiting is not counted as
//            local work
//   local    the optimizer ("Update fc1.weight"), input loading, clipping;
//            runs of cheap bookkeeping instructions (Alloc, Free, SliceIn,
//            CollectOut, Extract, AddTo, ...) are merged into one "local work"
//            event per run (args: how many instructions); with the
//            environment variable NNS_TRACE_EVERY_INSTRUCTION=1 each is an
//            event of its own, named as rank_program.h's instr_name names
//            its kind ("slice-in mb0") — what `nns profile` reads of its
//            calibration run
//   step     one event per training step
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nns::backend {

// Tracks, the tid of each event (and its "cat").
enum class TraceTrack : uint8_t { Compute = 1, Comm = 2, Local = 3, Step = 4 };
const char* trace_track_name(TraceTrack t);

// `s` escaped for the inside of a JSON string literal (quotes, backslash,
// control characters as \n, \t or \u00XX); other bytes pass through.
std::string json_escape(const std::string& s);

// "512 B", "4.0 KiB", "1.5 MiB".
std::string trace_bytes(int64_t bytes);

class TraceRecorder {
 public:
  struct Label {
    TraceTrack track = TraceTrack::Local;
    std::string name;  // the event's name ("linear#1 F"); " mbK" is appended for an event with a micro-batch
    std::string args;  // extra JSON members for "args", without braces ("\"kernel\":3,\"instr\":17") or empty
    bool merge = false;  // consecutive events of this label merge into one (cheap instructions)
  };
  struct Event {
    int64_t begin = 0, end = 0;  // CLOCK_MONOTONIC ns
    int32_t label = 0;
    int32_t mb = -1;     // micro-batch, -1: none
    int32_t count = 1;   // executions merged into it
    int32_t step = 0;
  };

  TraceRecorder(int rank, int device) : rank_(rank), device_(device) {}

  static int64_t now_ns();  // CLOCK_MONOTONIC

  int add_label(TraceTrack track, std::string name, std::string args = {}, bool merge = false);
  // Keys: what a trainer records by (its instruction indices, its graph's
  // node ids), each mapped to a label; -1 = not recorded.
  void set_key(int key, int label);
  void reserve(size_t events) { events_.reserve(events); }

  void record_key(int key, int64_t begin, int64_t end, int mb, int64_t step) {
    int l = key < static_cast<int>(keys_.size()) ? keys_[static_cast<size_t>(key)] : -1;
    if (l >= 0) record(l, begin, end, mb, step);
  }
  void record(int label, int64_t begin, int64_t end, int mb, int64_t step) {
    if (!events_.empty()) {
      Event& last = events_.back();
      if (last.label == label && labels_[static_cast<size_t>(label)].merge && last.step == step) {
        last.end = end;
        ++last.count;
        return;
      }
    }
    events_.push_back(Event{begin, end, label, mb, 1, static_cast<int32_t>(step)});
  }
  // A whole training step (on the step track).
  void record_step(int64_t step, int64_t begin, int64_t end);

  const std::vector<Event>& events() const { return events_; }
  const std::vector<Label>& labels() const { return labels_; }
  int rank() const { return rank_; }

  // Of the last recorded step: compute (Forward/Backward) time, and the time
  // spent in no compute and no local work (communication calls, waiting,
  // gaps between instructions), as percentages of the step's duration.
  void last_step_shares(double& busy_pct, double& idle_pct) const;

  // Writes this rank's part (trace_part_path); throws RuntimeError if it cannot.
  void write_part(const std::string& out) const;

 private:
  int rank_, device_;
  int step_label_ = -1;
  std::vector<Label> labels_;
  std::vector<int> keys_;
  std::vector<Event> events_;
};

// OUT.rank-R.
std::string trace_part_path(const std::string& out, int rank);

// Merges the parts of ranks 0..ranks-1 into `out` (times relative to the
// earliest event of any rank) and removes them. `summary` gets one line per
// rank: "trace: rank R busy X% (compute), idle Y% of the last step".
// False with `err` when a part is missing or unreadable or `out` cannot be
// written (the parts are removed all the same).
bool merge_trace_parts(const std::string& out, int ranks, std::vector<std::string>& summary, std::string& err);

// Removes whatever parts exist (a failed run).
void remove_trace_parts(const std::string& out, int ranks);

}  // namespace nns::backend
