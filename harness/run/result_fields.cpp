// result_fields.cpp: a cell's record in results.json as tables of fields (json_fields.h), one per object:
// the cell, its memory, time, gradient error, compute and max-length probes. CellResult::to_json and
// from_json walk these tables; result_field_names() gives them to the test that holds them equal to
// reports/results.schema.json.
#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/run/json_fields.h"
#include "harness/run/results.h"

namespace bpbench {

using nlohmann::json;

namespace {

const JsonFields<MemoryResult>& memory_fields() {
  using M = MemoryResult;
  static const JsonFields<M> fields = {
      always("base_bytes", &M::base_bytes, true),
      always("peak_bytes", &M::peak_bytes, true),
      derived<M>("peak_above_base_bytes", [](const M& m) { return json(m.peak_bytes - m.base_bytes); }),
      always("peak_by_category", &M::peak_by_category),
      nullable("estimate_bytes", &M::estimate_bytes),
      when_nonempty("timeline_file", &M::timeline_file),
      when_nonempty("trace_file", &M::trace_file),
      when_set("reserved_peak_bytes", &M::reserved_peak_bytes),
      when_set("alloc_retries", &M::alloc_retries),
      when_nonempty("snapshot_file", &M::snapshot_file),
      raw("device_activity", &M::device_activity, /*omit_null=*/true),
      when_set("host_peak_bytes", &M::host_peak_bytes),
      when_set("estimate_host_bytes", &M::estimate_host_bytes),
      when_set("host_copy_bytes", &M::host_copy_bytes),
      when_set("estimate_host_copy_bytes", &M::estimate_host_copy_bytes),
      raw("files_not_written", &M::files_not_written, /*omit_null=*/true),
  };
  return fields;
}

const JsonFields<TimeResult>& time_fields() {
  using T = TimeResult;
  static const JsonFields<T> fields = {
      always("median_s", &T::median_s, true),
      always("min_s", &T::min_s, true),
      always("max_s", &T::max_s, true),
      derived<T>("count", [](const T& t) { return json(t.runs_s.size()); }),
      always("warmup", &T::warmup),
      always("runs_s", &T::runs_s, true),
      nullable("stddev_s", &T::stddev_s),
      nullable("cv", &T::cv),
      nullable("tokens_per_s", &T::tokens_per_s),
  };
  return fields;
}

const JsonFields<ErrorStats>& error_stats_fields() {
  using E = ErrorStats;
  static const JsonFields<E> fields = {
      always("er_abs", &E::er_abs, true),   always("er_rel", &E::er_rel, true),
      always("max_abs", &E::max_abs, true), always("rel_l2", &E::rel_l2, true),
      always("count", &E::count, true),
  };
  return fields;
}

// The reference's numbers and the groups, or `error` when the reference could not be computed.
const JsonFields<GradErrorResult>& grad_error_fields() {
  using G = GradErrorResult;
  const auto measured = [](auto field) {
    auto write = field.write;
    field.write = [write](const G& g) { return g.error.empty() ? write(g) : std::nullopt; };
    return field;
  };
  static const JsonFields<G> fields = {
      always("reference", &G::reference),
      always("reference_device", &G::reference_device),
      when_nonempty("error", &G::error),
      measured(always("reference_loss", &G::reference_loss)),
      measured(always("loss_abs_error", &G::loss_abs_error)),
      {"groups",
       [](const G& g) -> std::optional<json> {
         if (!g.error.empty()) return std::nullopt;
         json groups = json::object();
         for (const auto& [name, s] : g.groups) groups[name] = fields_to_json(error_stats_fields(), s);
         return groups;
       },
       [](G& g, const json& v, const json&) {
         for (const auto& [name, s] : v.items())
           fields_from_json(error_stats_fields(), s, g.groups[name], "grad_error.groups");
       }},
  };
  return fields;
}

// FlopCounts' fields by their JSON name, in flop_count.h's order.
constexpr std::pair<const char*, int64_t FlopCounts::*> kFlopFields[] = {
    {"forward_matmul", &FlopCounts::forward_matmul},
    {"forward_attention", &FlopCounts::forward_attention},
    {"backward_matmul", &FlopCounts::backward_matmul},
    {"backward_attention", &FlopCounts::backward_attention},
    {"recompute_matmul", &FlopCounts::recompute_matmul},
    {"recompute_attention", &FlopCounts::recompute_attention},
    {"attention_rescore", &FlopCounts::attention_rescore},
    {"attention_masked", &FlopCounts::attention_masked},
    {"attention_dense", &FlopCounts::attention_dense}};

const JsonFields<ComputeResult>& compute_fields() {
  using C = ComputeResult;
  static const JsonFields<C> fields = {
      derived<C>("model_flops", [](const C& c) { return json(c.counts.model()); }),
      derived<C>("hardware_flops", [](const C& c) { return json(c.counts.hardware()); }),
      nullable("tflops_per_s", &C::tflops_per_s),
      nullable("mfu", &C::mfu),
      nullable("hfu", &C::hfu),
      raw("peak", &C::peak, /*omit_null=*/false),
      {"counts",
       [](const C& c) -> std::optional<json> {
         json counts = json::object();
         for (const auto& [name, field] : kFlopFields) counts[name] = c.counts.*field;
         return counts;
       },
       [](C& c, const json& v, const json&) {
         for (const auto& [name, field] : kFlopFields) c.counts.*field = v.at(name).get<int64_t>();
       },
       true},
  };
  return fields;
}

const JsonFields<Probe>& probe_fields() {
  using P = Probe;
  static const JsonFields<P> fields = {
      always("seq_len", &P::seq_len, true),
      always("status", &P::status, true),
      // Older files wrote null for a probe out of memory.
      {"peak_bytes", [](const P& p) -> std::optional<json> { return json(p.peak_bytes); },
       [](P& p, const json& v, const json&) { p.peak_bytes = v.is_number() ? v.get<int64_t>() : 0; }},
      always("reason", &P::reason),
      {"attempts",
       [](const P& p) -> std::optional<json> {
         return p.status == "started" ? std::optional<json>(p.attempts) : std::nullopt;
       },
       [](P& p, const json& v, const json&) { p.attempts = v.get<int64_t>(); }},
  };
  return fields;
}

// An optional sub-record written as an object from its own table, or null; read when it is an object.
template <class Sub>
JsonField<CellResult> sub_record(std::string name, std::optional<Sub> CellResult::*member,
                                 const JsonFields<Sub>& (*fields)(), Sub (*fresh)() = nullptr) {
  return {name,
          [member, fields](const CellResult& r) -> std::optional<json> {
            return r.*member ? fields_to_json(fields(), *(r.*member)) : json(nullptr);
          },
          [member, fields, fresh, name](CellResult& r, const json& v, const json&) {
            if (!v.is_object()) return;
            Sub sub = fresh ? fresh() : Sub{};
            fields_from_json(fields(), v, sub, name.c_str());
            r.*member = std::move(sub);
          }};
}

GradErrorResult fresh_grad_error() {
  GradErrorResult g;
  g.reference = "float64";  // files that name no reference: float64, the only one there is
  return g;
}

// A max-length search's four keys, written together; "search" reads all four (a file with max_seq_len but
// no search, from before searches were recorded, has no search record).
JsonField<CellResult> search_key(std::string name, std::function<json(const MaxLenRecord&)> value) {
  return {std::move(name),
          [value](const CellResult& r) -> std::optional<json> {
            return r.max_len ? std::optional<json>(value(*r.max_len)) : std::nullopt;
          },
          {}};
}

const JsonFields<CellResult>& cell_fields() {
  using C = CellResult;
  static const JsonFields<C> fields = {
      {"axes", [](const C& r) -> std::optional<json> { return r.cell.axes(); },
       [](C& r, const json& v, const json&) { r.cell = Cell::from_axes(v); }, true},
      always("threads", &C::threads),
      always("status", &C::status, true),
      always("reason", &C::reason),
      when_set("oom_requested_bytes", &C::oom_requested_bytes),
      nullable("loss", &C::loss),
      always("wall_s", &C::wall_s),
      always("uses_partition", &C::uses_partition),
      always("uses_logits_partition", &C::uses_logits_partition),
      raw("rope", &C::rope, /*omit_null=*/false),
      raw("sliding_window", &C::sliding_window, /*omit_null=*/false),
      raw("train", &C::train, /*omit_null=*/true),
      sub_record("memory", &C::memory, &memory_fields),
      sub_record("time", &C::time, &time_fields),
      sub_record("grad_error", &C::grad_error, &grad_error_fields, &fresh_grad_error),
      sub_record("compute", &C::compute, &compute_fields),
      raw("data", &C::data, /*omit_null=*/true),
      search_key("max_seq_len", [](const MaxLenRecord& m) { return json(m.max_seq_len); }),
      search_key("hit_upper", [](const MaxLenRecord& m) { return json(m.hit_upper); }),
      {"search",
       [](const C& r) -> std::optional<json> {
         if (!r.max_len) return std::nullopt;
         const MaxLenRecord& m = *r.max_len;
         json s = {{"budget_bytes", m.search.budget_bytes},
                   {"granularity", m.search.granularity},
                   {"upper", m.search.upper},
                   {"error", m.error}};
         if (m.host_budget_bytes) s["host_budget_bytes"] = *m.host_budget_bytes;
         if (m.estimate_max_seq_len) s["estimate_max_seq_len"] = *m.estimate_max_seq_len;
         return s;
       },
       [](C& r, const json& s, const json& record) {
         if (!record.contains("max_seq_len")) return;
         MaxLenRecord m;
         m.search.budget_bytes = s.at("budget_bytes").get<int64_t>();
         m.search.granularity = s.at("granularity").get<int64_t>();
         m.search.upper = s.at("upper").get<int64_t>();
         m.error = s.value("error", std::string());
         if (s.contains("host_budget_bytes")) m.host_budget_bytes = s.at("host_budget_bytes").get<int64_t>();
         if (s.contains("estimate_max_seq_len"))
           m.estimate_max_seq_len = s.at("estimate_max_seq_len").get<int64_t>();
         m.max_seq_len = record.at("max_seq_len").get<int64_t>();
         m.hit_upper = record.value("hit_upper", false);
         for (const auto& p : record.value("probes", json::array())) m.probes.push_back(probe_from_json(p));
         r.max_len = std::move(m);
       }},
      search_key("probes",
                 [](const MaxLenRecord& m) {
                   json probes = json::array();
                   for (const auto& p : m.probes) probes.push_back(probe_to_json(p));
                   return probes;
                 }),
      raw("comm", &C::comm, /*omit_null=*/true),
      {"world_size",
       [](const C& r) -> std::optional<json> {
         return r.world_size > 1 ? std::optional<json>(r.world_size) : std::nullopt;
       },
       [](C& r, const json& v, const json&) { r.world_size = v.get<int64_t>(); }},
      {"ranks",
       [](const C& r) -> std::optional<json> {
         return r.world_size > 1 ? std::optional<json>(r.ranks) : std::nullopt;
       },
       [](C& r, const json& v, const json&) { r.ranks = v; }},
      raw("measured_by", &C::measured_by, /*omit_null=*/true),
      when_set("interrupted", &C::interrupted),
  };
  return fields;
}

}  // namespace

json CellResult::to_json() const {
  return fields_to_json(cell_fields(), *this);
}

CellResult CellResult::from_json(const json& j) {
  CellResult r;
  fields_from_json(cell_fields(), j, r, "cell");
  return r;
}

json probe_to_json(const Probe& p) {
  return fields_to_json(probe_fields(), p);
}

Probe probe_from_json(const json& j) {
  Probe p;
  fields_from_json(probe_fields(), j, p, "probe");
  return p;
}

std::map<std::string, std::vector<std::string>> result_field_names() {
  return {{"cell", field_names(cell_fields())},
          {"memory", field_names(memory_fields())},
          {"time", field_names(time_fields())},
          {"grad_error", field_names(grad_error_fields())},
          {"error_stats", field_names(error_stats_fields())},
          {"compute", field_names(compute_fields())},
          {"probe", field_names(probe_fields())}};
}

}  // namespace bpbench
