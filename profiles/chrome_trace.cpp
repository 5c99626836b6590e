// chrome_trace.cpp: Timeline -> Chrome trace JSON / plain JSON.
#include "profiles/chrome_trace.h"

#include <set>

namespace bpbench::profiles {

namespace {
nlohmann::json categories_json(const CategoryBytes& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kCategoryCount; ++c) j[category_name(static_cast<Category>(c))] = bytes[c];
  return j;
}
}  // namespace

nlohmann::json chrome_trace(const Timeline& timeline, const std::string& process_name,
                            const std::vector<DeviceActivity>& device) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", process_name}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "phases"}}}});
  for (const auto& p : timeline.points)
    events.push_back({{"name", "live bytes"},
                      {"ph", "C"},
                      {"pid", 1},
                      {"ts", p.t_ms * 1000.0},
                      {"args", categories_json(p.by_category)}});
  for (const auto& ph : timeline.phases)
    events.push_back({{"name", ph.name},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", ph.begin_ms * 1000.0},
                      {"dur", (ph.end_ms - ph.begin_ms) * 1000.0},
                      {"args", {{"depth", ph.depth}}}});
  // One track per stream, below the phases: tid = kFirstStreamTid + stream id.
  constexpr int64_t kFirstStreamTid = 100;
  std::set<uint32_t> streams;
  for (const auto& a : device) {
    if (streams.insert(a.stream).second)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 1},
                        {"tid", kFirstStreamTid + a.stream},
                        {"args", {{"name", "CUDA stream " + std::to_string(a.stream)}}}});
    nlohmann::json args = {{"kind", a.kind}};
    if (a.bytes > 0) args["bytes"] = a.bytes;
    events.push_back({{"name", a.name},
                      {"cat", a.kind},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", kFirstStreamTid + a.stream},
                      {"ts", a.begin_ms * 1000.0},
                      {"dur", (a.end_ms - a.begin_ms) * 1000.0},
                      {"args", args}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

nlohmann::json timeline_to_json(const Timeline& timeline) {
  nlohmann::json points = nlohmann::json::array(), phases = nlohmann::json::array();
  for (const auto& p : timeline.points)
    points.push_back({{"t_ms", p.t_ms}, {"live", p.live}, {"by_category", categories_json(p.by_category)}});
  for (const auto& ph : timeline.phases)
    phases.push_back(
        {{"name", ph.name}, {"begin_ms", ph.begin_ms}, {"end_ms", ph.end_ms}, {"depth", ph.depth}});
  return {{"points", points}, {"phases", phases}};
}

}  // namespace bpbench::profiles
