#include "backend/runtime/trace.h"

#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "backend/runtime/backend.h"

namespace nns::backend {

const char* trace_track_name(TraceTrack t) {
  switch (t) {
    case TraceTrack::Compute: return "compute";
    case TraceTrack::Comm: return "comm";
    case TraceTrack::Local: return "local";
    case TraceTrack::Step: return "step";
  }
  return "?";
}

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string trace_bytes(int64_t bytes) {
  char buf[32];
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (bytes < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else if (bytes < 1024LL * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

int64_t TraceRecorder::now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int TraceRecorder::add_label(TraceTrack track, std::string name, std::string args, bool merge) {
  labels_.push_back(Label{track, std::move(name), std::move(args), merge});
  return static_cast<int>(labels_.size()) - 1;
}

void TraceRecorder::set_key(int key, int label) {
  if (key < 0) return;
  if (static_cast<size_t>(key) >= keys_.size()) keys_.resize(static_cast<size_t>(key) + 1, -1);
  keys_[static_cast<size_t>(key)] = label;
}

void TraceRecorder::record_step(int64_t step, int64_t begin, int64_t end) {
  if (step_label_ < 0) step_label_ = add_label(TraceTrack::Step, "step");
  events_.push_back(Event{begin, end, step_label_, -1, 1, static_cast<int32_t>(step)});
}

void TraceRecorder::last_step_shares(double& busy_pct, double& idle_pct) const {
  busy_pct = idle_pct = 0;
  const Event* st = nullptr;
  for (auto it = events_.rbegin(); it != events_.rend() && !st; ++it)
    if (it->label == step_label_) st = &*it;
  if (!st || st->end <= st->begin) return;
  int64_t compute = 0, local = 0;
  for (const Event& e : events_) {
    if (e.step != st->step || e.label == step_label_) continue;
    int64_t d = std::min(e.end, st->end) - std::max(e.begin, st->begin);
    if (d <= 0) continue;
    TraceTrack t = labels_[static_cast<size_t>(e.label)].track;
    if (t == TraceTrack::Compute) compute += d;
    else if (t == TraceTrack::Local) local += d;
  }
  double dur = static_cast<double>(st->end - st->begin);
  busy_pct = 100.0 * static_cast<double>(compute) / dur;
  idle_pct = std::max(0.0, 100.0 - busy_pct - 100.0 * static_cast<double>(local) / dur);
}

std::string trace_part_path(const std::string& out, int rank) { return out + ".rank-" + std::to_string(rank); }

// The part: a header, the last step's shares, then one line per event:
//   X TID BEGIN_NS END_NS "name":"...","cat":"...","args":{...}
void TraceRecorder::write_part(const std::string& out) const {
  std::string path = trace_part_path(out, rank_);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw RuntimeError("--trace: cannot write " + path);
  double busy = 0, idle = 0;
  last_step_shares(busy, idle);
  std::fprintf(f, "nns-trace-part 1\nrank %d device %d\nshares %.6f %.6f\n", rank_, device_, busy, idle);
  // Escaped once per label, not per event.
  std::vector<std::string> names, args;
  for (const Label& l : labels_) {
    names.push_back(json_escape(l.name));
    args.push_back(l.args);
  }
  std::string line;
  for (const Event& e : events_) {
    const Label& l = labels_[static_cast<size_t>(e.label)];
    line = "\"name\":\"" + names[static_cast<size_t>(e.label)];
    if (l.track == TraceTrack::Step) line += " " + std::to_string(e.step);
    if (e.mb >= 0) line += " mb" + std::to_string(e.mb);
    if (e.count > 1) line += " (" + std::to_string(e.count) + " instrs)";
    line += "\",\"cat\":\"";
    line += trace_track_name(l.track);
    line += "\",\"args\":{\"step\":" + std::to_string(e.step);
    if (e.mb >= 0) line += ",\"mb\":" + std::to_string(e.mb);
    if (l.merge) line += ",\"instrs\":" + std::to_string(e.count);
    if (!l.args.empty()) line += "," + l.args;
    line += "}";
    std::fprintf(f, "X %d %" PRId64 " %" PRId64 " %s\n", static_cast<int>(l.track), e.begin, e.end, line.c_str());
  }
  bool ok = std::ferror(f) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw RuntimeError("--trace: cannot write " + path);
}

void remove_trace_parts(const std::string& out, int ranks) {
  for (int r = 0; r < ranks; ++r) std::remove(trace_part_path(out, r).c_str());
}

namespace {

struct PartEvent {
  int tid = 0;
  int64_t begin = 0, end = 0;
  std::string fragment;
};

struct Part {
  int rank = 0, device = 0;
  double busy = 0, idle = 0;
  std::vector<PartEvent> events;
};

bool read_part(const std::string& path, Part& p, std::string& err) {
  std::ifstream in(path);
  if (!in) { err = "--trace: rank part " + path + " is missing (did the rank write it?)"; return false; }
  std::string line;
  if (!std::getline(in, line) || line != "nns-trace-part 1") { err = "--trace: " + path + " is not a trace part"; return false; }
  if (!std::getline(in, line) || std::sscanf(line.c_str(), "rank %d device %d", &p.rank, &p.device) != 2 ||
      !std::getline(in, line) || std::sscanf(line.c_str(), "shares %lf %lf", &p.busy, &p.idle) != 2) {
    err = "--trace: " + path + ": bad header";
    return false;
  }
  while (std::getline(in, line)) {
    PartEvent e;
    int used = 0;
    if (std::sscanf(line.c_str(), "X %d %" SCNd64 " %" SCNd64 " %n", &e.tid, &e.begin, &e.end, &used) != 3 || used <= 0) {
      err = "--trace: " + path + ": bad event line";
      return false;
    }
    e.fragment = line.substr(static_cast<size_t>(used));
    p.events.push_back(std::move(e));
  }
  return true;
}

}  // namespace

bool merge_trace_parts(const std::string& out, int ranks, std::vector<std::string>& summary, std::string& err) {
  std::vector<Part> parts(static_cast<size_t>(ranks));
  bool ok = true;
  for (int r = 0; r < ranks && ok; ++r) ok = read_part(trace_part_path(out, r), parts[static_cast<size_t>(r)], err);
  remove_trace_parts(out, ranks);
  if (!ok) return false;
  int64_t origin = INT64_MAX;
  for (const Part& p : parts)
    for (const PartEvent& e : p.events) origin = std::min(origin, e.begin);
  if (origin == INT64_MAX) origin = 0;

  std::FILE* f = std::fopen(out.c_str(), "w");
  if (!f) { err = "--trace: cannot write " + out; return false; }
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"nns run --trace\",\"ranks\":%d},\n\"traceEvents\":[\n", ranks);
  bool first = true;
  auto sep = [&] {
    std::fputs(first ? "" : ",\n", f);
    first = false;
  };
  for (const Part& p : parts) {
    sep();
    std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d (device %d)\"}}", p.rank, p.rank, p.device);
    sep();
    std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}", p.rank, p.rank);
    for (TraceTrack t : {TraceTrack::Compute, TraceTrack::Comm, TraceTrack::Local, TraceTrack::Step}) {
      sep();
      std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}", p.rank, static_cast<int>(t),
                   trace_track_name(t));
      sep();
      std::fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}", p.rank,
                   static_cast<int>(t), static_cast<int>(t));
    }
  }
  for (const Part& p : parts)
    for (const PartEvent& e : p.events) {
      sep();
      std::fprintf(f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,%s}", p.rank, e.tid, static_cast<double>(e.begin - origin) / 1000.0,
                   static_cast<double>(std::max<int64_t>(0, e.end - e.begin)) / 1000.0, e.fragment.c_str());
    }
  std::fputs("\n]}\n", f);
  ok = std::ferror(f) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) { err = "--trace: cannot write " + out; return false; }
  for (const Part& p : parts) {
    char line[160];
    std::snprintf(line, sizeof line, "trace: rank %d busy %.1f%% (compute), idle %.1f%% of the last step", p.rank, p.busy, p.idle);
    summary.push_back(line);
  }
  return true;
}

}  // namespace nns::backend
