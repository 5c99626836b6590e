// memory_viz.cpp: memory_viz.h, with the few pickle opcodes its structure needs (protocol 2: dicts, lists,
// strings, integers), each string and each stack of frames written once and memoised.
#include "profiles/memory_viz.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bpbench::profiles {
namespace {

class Pickler {
 public:
  Pickler() { out_ += "\x80\x02"; }    // PROTO 2
  void begin_dict() { out_ += "}("; }  // EMPTY_DICT, MARK: then key, value pairs
  void end_dict() { out_ += 'u'; }     // SETITEMS
  void begin_list() { out_ += "]("; }  // EMPTY_LIST, MARK: then items
  void end_list() { out_ += 'e'; }     // APPENDS
  // A string: BINUNICODE (uint32 length, UTF-8 bytes) the first time, memoised (LONG_BINPUT), then fetched
  // from the memo (LONG_BINGET): every key and phase name is written once.
  void str(std::string_view s) {
    if (fetch("s" + std::string(s))) return;
    out_ += 'X';
    raw_le(static_cast<uint64_t>(s.size()), 4);
    out_ += s;
    remember("s" + std::string(s));
  }
  // A value already written under `key` is fetched from the memo; else false, and the caller writes it and
  // then calls remember(key).
  bool fetch(const std::string& key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) return false;
    out_ += 'j';  // LONG_BINGET
    raw_le(it->second, 4);
    return true;
  }
  void remember(const std::string& key) {
    const auto id = static_cast<uint32_t>(memo_.size());
    memo_.emplace(key, id);
    out_ += 'r';  // LONG_BINPUT
    raw_le(id, 4);
  }
  void integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {  // BININT: int32, little-endian
      out_ += 'J';
      raw_le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
      return;
    }
    long1(static_cast<uint64_t>(v), /*negative=*/v < 0);
  }
  void unsigned_integer(uint64_t v) {
    if (v <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(v));
    long1(v, /*negative=*/false);
  }
  void key(std::string_view k) { str(k); }
  std::string finish() {
    out_ += '.';  // STOP
    return std::move(out_);
  }

 private:
  // LONG1: a length byte, then the two's complement bytes little-endian, as few as keep the sign (a ninth,
  // the sign's, above a positive value whose top bit is set).
  void long1(uint64_t v, bool negative) {
    std::string bytes;
    for (int i = 0; i < 8; ++i, v >>= 8) bytes += static_cast<char>(v & 0xff);
    bytes += static_cast<char>(negative ? 0xff : 0x00);
    while (bytes.size() > 1) {
      const auto last = static_cast<unsigned char>(bytes.back());
      const auto prev = static_cast<unsigned char>(bytes[bytes.size() - 2]);
      if ((last == 0x00 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80)))
        bytes.pop_back();
      else
        break;
    }
    out_ += '\x8a';
    out_ += static_cast<char>(bytes.size());
    out_ += bytes;
  }
  void raw_le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i, v >>= 8) out_ += static_cast<char>(v & 0xff);
  }
  std::string out_;
  std::unordered_map<std::string, uint32_t> memo_;
};

// A stack of frames: phase names, innermost first, and the memo key that names the list once written.
struct Stack {
  std::vector<std::string> names;
  std::string key;
  explicit Stack(std::vector<std::string> n) : names(std::move(n)), key("f") {
    for (const auto& name : names) key += name + '\n';
  }
};

// The phases open at each event, innermost first: a sweep over the marks in order of their start, the stack
// made again only when a phase opened or closed since the last event.
class OpenPhases {
 public:
  explicit OpenPhases(const std::vector<PhaseMark>& marks) : marks_(marks) {
    order_.resize(marks.size());
    for (size_t i = 0; i < marks.size(); ++i) order_[i] = i;
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return marks_[a].begin_ms < marks_[b].begin_ms; });
  }
  // The stack open at t (t never decreases between calls).
  std::shared_ptr<const Stack> at(double t) {
    const size_t before = open_.size(), opened = next_;
    while (next_ < order_.size() && marks_[order_[next_]].begin_ms <= t) open_.push_back(order_[next_++]);
    open_.erase(std::remove_if(open_.begin(), open_.end(), [&](size_t i) { return marks_[i].end_ms < t; }),
                open_.end());
    if (stack_ && next_ == opened && open_.size() == before) return stack_;
    std::vector<size_t> sorted = open_;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](size_t a, size_t b) { return marks_[a].depth > marks_[b].depth; });
    std::vector<std::string> names;
    for (size_t i : sorted) names.push_back(marks_[i].name);
    stack_ = std::make_shared<const Stack>(std::move(names));
    return stack_;
  }

 private:
  const std::vector<PhaseMark>& marks_;
  std::vector<size_t> order_, open_;
  size_t next_ = 0;
  std::shared_ptr<const Stack> stack_;
};

// The frames of one event: its open phases, then the C++ stack recorded with it (if any).
struct FrameRef {
  std::shared_ptr<const Stack> phases;
  int32_t cpp_stack = -1;
};

class FrameWriter {
 public:
  FrameWriter(Pickler& p, const std::vector<std::vector<CodeFrame>>& cpp_stacks)
      : p_(p), cpp_stacks_(cpp_stacks) {}

  // A list of frames, written once per distinct (phases, C++ stack) and fetched from the memo after (the
  // viewer only reads it); each frame too. Consecutive entries mostly share their frames: the memo key is
  // made again only when they change (last_ holds its stack alive, so a pointer names one stack).
  void frames(const FrameRef& f) {
    if (f.phases != last_.phases || f.cpp_stack != last_.cpp_stack) {
      last_ = f;
      last_key_ = f.phases->key + '#' + std::to_string(f.cpp_stack);
    }
    const std::string& key = last_key_;
    if (p_.fetch(key)) return;
    p_.begin_list();
    for (const auto& name : f.phases->names) frame(name, "bpbench", 0);
    if (f.cpp_stack >= 0)
      for (const CodeFrame& c : cpp_stacks_.at(static_cast<size_t>(f.cpp_stack)))
        frame(c.function, c.file, c.line);
    p_.end_list();
    p_.remember(key);
  }
  void none() { frames({empty_, -1}); }

 private:
  void frame(const std::string& name, const std::string& file, int64_t line) {
    const std::string key = "F" + name + '\n' + file + '\n' + std::to_string(line);
    if (p_.fetch(key)) return;
    p_.begin_dict();
    p_.key("filename");
    p_.str(file);
    p_.key("line");
    p_.integer(line);
    p_.key("name");
    p_.str(name);
    p_.end_dict();
    p_.remember(key);
  }
  Pickler& p_;
  const std::vector<std::vector<CodeFrame>>& cpp_stacks_;
  const std::shared_ptr<const Stack> empty_ = std::make_shared<const Stack>(std::vector<std::string>{});
  FrameRef last_;
  std::string last_key_;
};

void trace_entry(Pickler& p, FrameWriter& frames, AllocatorAction action, const AllocationEvent& e,
                 int64_t time_us, const FrameRef& f) {
  p.begin_dict();
  p.key("action");
  p.str(allocator_action_name(action));
  p.key(action == AllocatorAction::oom ? "device_free" : "addr");  // an OOM's addr is the free bytes
  p.unsigned_integer(e.addr);
  p.key("size");
  p.integer(e.bytes);
  p.key("stream");
  p.unsigned_integer(e.stream);
  p.key("time_us");
  p.integer(time_us);
  p.key("frames");
  frames.frames(f);
  p.end_dict();
}

const char* state_name(SegmentBlock::State s) {
  switch (s) {
    case SegmentBlock::State::allocated:
      return "active_allocated";
    case SegmentBlock::State::pending_free:
      return "active_pending_free";
    case SegmentBlock::State::inactive:
      return "inactive";
  }
  return "inactive";
}

void segment(Pickler& p, FrameWriter& frames, const MemorySegment& s,
             const std::unordered_map<uint64_t, FrameRef>& alloc_frames) {
  int64_t allocated = 0, active = 0, requested = 0;
  for (const SegmentBlock& b : s.blocks) {
    if (b.state == SegmentBlock::State::inactive) continue;
    active += b.bytes;
    requested += b.requested_bytes;
    if (b.state == SegmentBlock::State::allocated) allocated += b.bytes;
  }
  p.begin_dict();
  p.key("device");
  p.integer(0);
  p.key("address");
  p.unsigned_integer(s.addr);
  p.key("total_size");
  p.integer(s.bytes);
  p.key("allocated_size");
  p.integer(allocated);
  p.key("active_size");
  p.integer(active);
  p.key("requested_size");
  p.integer(requested);
  p.key("stream");
  p.unsigned_integer(s.stream);
  p.key("segment_type");
  p.str(s.large ? "large" : "small");
  p.key("frames");
  frames.none();
  p.key("blocks");
  p.begin_list();
  uint64_t addr = s.addr;
  for (const SegmentBlock& b : s.blocks) {
    p.begin_dict();
    p.key("address");
    p.unsigned_integer(addr);
    p.key("size");
    p.integer(b.bytes);
    p.key("requested_size");
    p.integer(b.requested_bytes);
    p.key("state");
    p.str(state_name(b.state));
    p.key("frames");
    const auto found = alloc_frames.find(addr);
    if (b.state != SegmentBlock::State::inactive && found != alloc_frames.end())
      frames.frames(found->second);
    else
      frames.none();
    p.end_dict();
    addr += static_cast<uint64_t>(b.bytes);
  }
  p.end_list();
  p.end_dict();
}

}  // namespace

std::string memory_viz_pickle(const Timeline& timeline) {
  Pickler p;
  FrameWriter frames(p, timeline.cpp_stacks);
  p.begin_dict();

  // The trace first, remembering each live block's allocation frames for the segments.
  const FrameRef before{std::make_shared<const Stack>(std::vector<std::string>{"alive before the step"}), -1};
  std::unordered_map<uint64_t, FrameRef> alloc_frames;
  p.key("device_traces");
  p.begin_list();
  p.begin_list();
  {
    OpenPhases phases(timeline.phases);
    int64_t last_us = timeline.origin_unix_us;
    for (size_t i = 0; i < timeline.events.size(); ++i) {
      const AllocationEvent& e = timeline.events[i];
      const auto us = std::max(last_us, timeline.origin_unix_us + static_cast<int64_t>(e.t_ms * 1000.0));
      last_us = us;
      const FrameRef f = i < timeline.alive_at_start ? before : FrameRef{phases.at(e.t_ms), e.cpp_stack};
      const auto write = [&](AllocatorAction action) { trace_entry(p, frames, action, e, us, f); };
      if (e.action == AllocatorAction::alloc) alloc_frames[e.addr] = f;
      if (e.action == AllocatorAction::free_completed) alloc_frames.erase(e.addr);
      if (!timeline.blocks_are_segments) {
        write(e.action);
      } else if (e.action == AllocatorAction::alloc) {  // each CPU block is a segment of its own
        write(AllocatorAction::segment_alloc);
        write(AllocatorAction::alloc);
      } else if (e.action == AllocatorAction::free_completed) {  // and its free completes at once
        write(AllocatorAction::free_requested);
        write(AllocatorAction::free_completed);
        write(AllocatorAction::segment_free);
      } else {
        write(e.action);
      }
    }
  }
  p.end_list();
  p.end_list();

  p.key("segments");
  p.begin_list();
  for (const MemorySegment& s : timeline.segments_at_stop) segment(p, frames, s, alloc_frames);
  p.end_list();
  p.end_dict();
  return p.finish();
}

}  // namespace bpbench::profiles
