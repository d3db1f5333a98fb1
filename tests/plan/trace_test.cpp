// --trace's recorder (backend/runtime/trace.h): JSON escaping, merging of
// cheap instructions, the last step's shares, and a part written and merged.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/runtime/trace.h"

using namespace nns::backend;

TEST_CASE("json_escape escapes quotes, backslashes and control characters", "[trace]") {
  CHECK(json_escape("linear#1") == "linear#1");
  CHECK(json_escape("a\"b\\c") == "a\\\"b\\\\c");
  CHECK(json_escape("x\ny\tz\r") == "x\\ny\\tz\\r");
  CHECK(json_escape(std::string("\x01\x1f", 2)) == "\\u0001\\u001f");
  CHECK(json_escape("blocks.3.attn/\xc3\xa9") == "blocks.3.attn/\xc3\xa9");  // UTF-8 passes through
}

TEST_CASE("trace_bytes", "[trace]") {
  CHECK(trace_bytes(8) == "8 B");
  CHECK(trace_bytes(8192) == "8.0 KiB");
  CHECK(trace_bytes(3 * 1024 * 1024 / 2) == "1.5 MiB");
}

TEST_CASE("recorder: cheap instructions merge, shares of the last step, part merged into valid events", "[trace]") {
  TraceRecorder t(0, 0);
  int cheap = t.add_label(TraceTrack::Local, "local work", {}, true);
  int fwd = t.add_label(TraceTrack::Compute, "op \"q\" F", "\"kernel\":0");
  int send = t.add_label(TraceTrack::Comm, "Send 4 B to rank 1 tag 0");
  t.set_key(0, cheap);
  t.set_key(1, cheap);
  t.set_key(2, fwd);
  t.set_key(3, send);
  t.set_key(5, -1);
  // Step 1 (ignored by the shares), step 2: 1000 ns, 400 compute, 100 local, 500 in send.
  t.record_key(2, 0, 10, 0, 1);
  t.record_step(1, 0, 20);
  t.record_key(0, 1000, 1050, 0, 2);
  t.record_key(1, 1050, 1100, 0, 2);  // merges with the previous
  t.record_key(2, 1100, 1500, 0, 2);
  t.record_key(3, 1500, 2000, 0, 2);
  t.record_key(5, 2000, 2000, 0, 2);  // not recorded
  t.record_key(9, 2000, 2000, 0, 2);  // no key: not recorded
  t.record_step(2, 1000, 2000);
  REQUIRE(t.events().size() == 6);
  CHECK(t.events()[2].count == 2);
  double busy = 0, idle = 0;
  t.last_step_shares(busy, idle);
  CHECK(busy == Approx(40.0));
  CHECK(idle == Approx(50.0));

  std::string out = "/tmp/nns_trace_test_" + std::to_string(getpid()) + ".json";
  t.write_part(out);
  std::vector<std::string> summary;
  std::string err;
  REQUIRE(merge_trace_parts(out, 1, summary, err));
  REQUIRE(summary.size() == 1);
  CHECK(summary[0] == "trace: rank 0 busy 40.0% (compute), idle 50.0% of the last step");
  CHECK(!std::ifstream(trace_part_path(out, 0)));  // the part is removed
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  std::string json = ss.str();
  std::remove(out.c_str());
  CHECK(json.find("\"name\":\"op \\\"q\\\" F mb0\"") != std::string::npos);
  CHECK(json.find("\"ts\":1.100,\"dur\":0.400") != std::string::npos);  // relative to the earliest event, in us
  CHECK(json.find("\"name\":\"local work mb0 (2 instrs)\"") != std::string::npos);
  CHECK(json.find("\"process_name\",\"args\":{\"name\":\"rank 0 (device 0)\"}") != std::string::npos);
  CHECK(json.find("\"name\":\"step 2\"") != std::string::npos);
  CHECK(json.back() == '\n');

  // A missing part: an error, and nothing written.
  summary.clear();
  CHECK(!merge_trace_parts(out, 1, summary, err));
  CHECK(err.find("missing") != std::string::npos);
}
