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
  const Stack& at(double t) {
    const size_t before = open_.size(), opened = next_;
    while (next_ < order_.size() && marks_[order_[next_]].begin_ms <= t) open_.push_back(order_[next_++]);
    open_.erase(std::remove_if(open_.begin(), open_.end(), [&](size_t i) { return marks_[i].end_ms < t; }),
                open_.end());
    if (stack_ && next_ == opened && open_.size() == before) return *stack_;
    std::vector<size_t> sorted = open_;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](size_t a, size_t b) { return marks_[a].depth > marks_[b].depth; });
    std::vector<std::string> names;
    for (size_t i : sorted) names.push_back(marks_[i].name);
    stack_ = std::make_shared<const Stack>(std::move(names));
    return *stack_;
  }
  std::shared_ptr<const Stack> current() const { return stack_; }

 private:
  const std::vector<PhaseMark>& marks_;
  std::vector<size_t> order_, open_;
  size_t next_ = 0;
  std::shared_ptr<const Stack> stack_;
};

// A list of frames, written once per distinct stack and fetched from the memo after (the viewer only reads
// it).
void frames(Pickler& p, const Stack& stack) {
  if (p.fetch(stack.key)) return;
  p.begin_list();
  for (const auto& name : stack.names) {
    p.begin_dict();
    p.key("filename");
    p.str("bpbench");
    p.key("line");
    p.integer(0);
    p.key("name");
    p.str(name);
    p.end_dict();
  }
  p.end_list();
  p.remember(stack.key);
}

void trace_entry(Pickler& p, const char* action, const AllocationEvent& e, int64_t time_us,
                 const Stack& stack) {
  p.begin_dict();
  p.key("action");
  p.str(action);
  p.key("addr");
  p.unsigned_integer(e.addr);
  p.key("size");
  p.integer(e.bytes);
  p.key("stream");
  p.integer(0);
  p.key("time_us");
  p.integer(time_us);
  p.key("category");
  p.str(category_name(e.category));
  p.key("frames");
  frames(p, stack);
  p.end_dict();
}

}  // namespace

std::string memory_viz_pickle(const Timeline& timeline) {
  Pickler p;
  p.begin_dict();

  // The trace first, remembering each live block's allocation frames for the segments.
  const auto before = std::make_shared<const Stack>(std::vector<std::string>{"alive before the step"});
  std::unordered_map<uint64_t, std::shared_ptr<const Stack>> alloc_frames;
  p.key("device_traces");
  p.begin_list();
  p.begin_list();
  {
    OpenPhases phases(timeline.phases);
    int64_t last_us = 0;
    for (const AllocationEvent& e : timeline.events) {
      const auto us = std::max(last_us, static_cast<int64_t>(e.t_ms * 1000.0));
      last_us = us;
      const bool preexisting = e.t_ms == 0.0 && e.alloc;
      if (!preexisting) phases.at(e.t_ms);
      const std::shared_ptr<const Stack> stack = preexisting ? before : phases.current();
      if (e.alloc) {
        trace_entry(p, "segment_alloc", e, us, *stack);
        trace_entry(p, "alloc", e, us, *stack);
        alloc_frames[e.addr] = stack;
      } else {
        trace_entry(p, "free_requested", e, us, *stack);
        trace_entry(p, "free_completed", e, us, *stack);
        trace_entry(p, "segment_free", e, us, *stack);
        alloc_frames.erase(e.addr);
      }
    }
  }
  p.end_list();
  p.end_list();

  p.key("segments");
  p.begin_list();
  for (const AllocationEvent& b : timeline.live_at_stop) {
    const auto found = alloc_frames.find(b.addr);
    const Stack& stack = found != alloc_frames.end() ? *found->second : *before;
    p.begin_dict();
    p.key("device");
    p.integer(0);
    p.key("address");
    p.unsigned_integer(b.addr);
    for (const char* size_key : {"total_size", "allocated_size", "active_size", "requested_size"}) {
      p.key(size_key);
      p.integer(b.bytes);
    }
    p.key("stream");
    p.integer(0);
    p.key("segment_type");
    p.str("large");
    p.key("frames");
    frames(p, Stack({}));
    p.key("blocks");
    p.begin_list();
    p.begin_dict();
    p.key("address");
    p.unsigned_integer(b.addr);
    p.key("size");
    p.integer(b.bytes);
    p.key("requested_size");
    p.integer(b.bytes);
    p.key("state");
    p.str("active_allocated");
    p.key("frames");
    frames(p, stack);
    p.end_dict();
    p.end_list();
    p.end_dict();
  }
  p.end_list();
  p.end_dict();
  return p.finish();
}

}  // namespace bpbench::profiles
