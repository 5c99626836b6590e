// rope_config.cpp: transformers' RoPE parameters (either config form) -> RopeConfig, and back.
#include "harness/model/rope_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <vector>

namespace bpbench {

using nlohmann::json;

namespace {

struct TypeInfo {
  RopeType type;
  const char* name;
  std::vector<std::string> fields;  // what the type reads besides rope_type and rope_theta
};

const std::vector<TypeInfo>& types() {
  static const std::vector<TypeInfo> t = {
      {RopeType::kDefault, "default", {}},
      {RopeType::kLinear, "linear", {"factor"}},
      {RopeType::kDynamic, "dynamic", {"factor"}},
      {RopeType::kYarn,
       "yarn",
       {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
        "mscale_all_dim", "truncate"}},
      {RopeType::kLlama3,
       "llama3",
       {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}},
      {RopeType::kLongrope,
       "longrope",
       {"factor", "original_max_position_embeddings", "attention_factor", "short_factor", "long_factor"}},
  };
  return t;
}

const TypeInfo& info(RopeType type) {
  for (const auto& t : types())
    if (t.type == type) return t;
  throw std::logic_error("rope: unknown RopeType");
}

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument(what);
}

// What the top level of a config.json says around its RoPE object(s).
struct Context {
  RopeConfig base;                      // theta and max_positions to start from
  std::optional<double> top_theta;      // a top-level "rope_theta"
  std::optional<int64_t> top_original;  // a top-level "original_max_position_embeddings"
};

// One RoPE-parameters object; `name` is how messages call it ("\"rope_scaling\"", "rope").
class Params {
 public:
  Params(const json& j, std::string name) : j_(j), name_(std::move(name)) {
    if (!j_.is_object()) refuse(fmt::format("{} must be an object, got {}", name_, j_.dump()));
  }

  // The top level of a config.json has no name: its fields are quoted, "rope_theta".
  std::string field(const std::string& key) const {
    return name_.empty() ? fmt::format("\"{}\"", key) : fmt::format("{}.{}", name_, key);
  }

  // Absent and null both mean "not given", as transformers reads them.
  const json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has_key(const std::string& key) const { return j_.contains(key); }

  std::optional<double> number(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number() || v->is_boolean())
      refuse(fmt::format("{} must be a number, got {}", field(key), v->dump()));
    return v->get<double>();
  }
  double positive(const std::string& key) const {
    auto v = number(key);
    if (!v) refuse(fmt::format("{} is required", field(key)));
    if (!(*v > 0)) refuse(fmt::format("{} must be > 0, got {}", field(key), *v));
    return *v;
  }
  std::optional<int64_t> count(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() <= 0)
      refuse(fmt::format("{} must be a positive integer, got {}", field(key), v->dump()));
    return v->get<int64_t>();
  }
  std::optional<bool> boolean(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) refuse(fmt::format("{} must be true or false, got {}", field(key), v->dump()));
    return v->get<bool>();
  }
  std::optional<std::string> string(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) refuse(fmt::format("{} must be a string, got {}", field(key), v->dump()));
    return v->get<std::string>();
  }
  const json& object() const { return j_; }

 private:
  const json& j_;
  std::string name_;
};

// transformers' "rope_type", or the "type" that older files write; the two must agree where both are given.
const TypeInfo& read_type(const Params& p) {
  const auto rope_type = p.string("rope_type"), old_type = p.string("type");
  if (rope_type && old_type && *rope_type != *old_type)
    refuse(fmt::format("{} '{}' disagrees with {} '{}'", p.field("rope_type"), *rope_type, p.field("type"),
                       *old_type));
  const std::string name = rope_type ? *rope_type : old_type ? *old_type : "default";
  for (const auto& t : types())
    if (name == t.name) return t;
  refuse(fmt::format("{} '{}' is not supported (supported: {})", p.field(rope_type ? "rope_type" : "type"),
                     name, rope_type_names()));
}

RopeConfig parse(const Params& p, const Context& ctx) {
  const TypeInfo& type = read_type(p);
  for (const auto& [key, value] : p.object().items()) {
    if (value.is_null() || key == "rope_type" || key == "type" || key == "rope_theta" ||
        key == "partial_rotary_factor")
      continue;
    bool used = false;
    for (const auto& f : type.fields) used = used || f == key;
    if (!used)
      refuse(fmt::format("{} is not a field of rope_type '{}' (its fields: {})", p.field(key), type.name,
                         type.fields.empty() ? std::string("rope_theta")
                                             : fmt::format("rope_theta, {}", fmt::join(type.fields, ", "))));
  }
  if (auto partial = p.number("partial_rotary_factor"); partial && *partial != 1.0)
    refuse(fmt::format("{} {} is not supported (bpbench rotates the whole head: 1)",
                       p.field("partial_rotary_factor"), *partial));

  RopeConfig r;
  r.type = type.type;
  r.max_positions = ctx.base.max_positions;
  r.theta = ctx.base.theta;
  if (auto theta = p.number("rope_theta")) {
    if (ctx.top_theta && *ctx.top_theta != *theta)
      refuse(fmt::format("\"rope_theta\" {} disagrees with {} {}", *ctx.top_theta, p.field("rope_theta"),
                         *theta));
    if (!(*theta > 0)) refuse(fmt::format("{} must be > 0, got {}", p.field("rope_theta"), *theta));
    r.theta = *theta;
  }
  if (r.type == RopeType::kDefault) return r;

  // transformers: a top-level original_max_position_embeddings wins, else max_position_embeddings.
  if (r.type == RopeType::kYarn || r.type == RopeType::kLlama3 || r.type == RopeType::kLongrope) {
    const auto nested = p.count("original_max_position_embeddings");
    if (nested && ctx.top_original && *nested != *ctx.top_original)
      refuse(fmt::format("\"original_max_position_embeddings\" {} disagrees with {} {}", *ctx.top_original,
                         p.field("original_max_position_embeddings"), *nested));
    r.original_max_positions = ctx.top_original ? *ctx.top_original : nested ? *nested : r.max_positions;
    if (r.original_max_positions <= 0)
      refuse(fmt::format("{} is required (no max_position_embeddings to default to)",
                         p.field("original_max_position_embeddings")));
  }
  switch (r.type) {
    case RopeType::kLinear:
      r.factor = p.positive("factor");
      break;
    case RopeType::kDynamic:
      r.factor = p.positive("factor");
      if (r.max_positions <= 0)
        refuse(fmt::format(
            "{} 'dynamic' needs max_position_embeddings (the length it scales past), and there is none",
            p.field("rope_type")));
      break;
    case RopeType::kLlama3:
      r.factor = p.positive("factor");
      r.low_freq_factor = p.positive("low_freq_factor");
      r.high_freq_factor = p.positive("high_freq_factor");
      if (r.high_freq_factor == r.low_freq_factor)
        refuse(fmt::format("{} must differ from {} (both {})", p.field("high_freq_factor"),
                           p.field("low_freq_factor"), r.low_freq_factor));
      break;
    case RopeType::kYarn: {
      // transformers requires the key; null means max_position_embeddings / original_max_position_embeddings.
      if (!p.has_key("factor")) refuse(fmt::format("{} is required", p.field("factor")));
      r.factor = p.find("factor") ? p.positive("factor")
                                  : static_cast<double>(r.max_positions) / r.original_max_positions;
      if (!(r.factor > 0))
        refuse(
            fmt::format("{} is null and there is no max_position_embeddings to infer it", p.field("factor")));
      const auto mscale = p.number("mscale"), mscale_all_dim = p.number("mscale_all_dim");
      if (auto given = p.number("attention_factor")) {
        if (!(*given > 0)) refuse(fmt::format("{} must be > 0, got {}", p.field("attention_factor"), *given));
        r.attention_factor = *given;
      } else if (mscale && mscale_all_dim && *mscale != 0 && *mscale_all_dim != 0) {
        r.attention_factor = yarn_mscale(r.factor, *mscale) / yarn_mscale(r.factor, *mscale_all_dim);
      } else {
        r.attention_factor = yarn_mscale(r.factor, 1.0);
      }
      // transformers reads `beta_fast or 32`: absent, null and 0 all mean the default.
      const auto fast = p.number("beta_fast"), slow = p.number("beta_slow");
      r.beta_fast = fast && *fast != 0 ? *fast : 32.0;
      r.beta_slow = slow && *slow != 0 ? *slow : 1.0;
      r.truncate = p.boolean("truncate").value_or(true);
      break;
    }
    case RopeType::kLongrope: {
      // transformers: factor, when not given, is max_position_embeddings / original_max_position_embeddings;
      // the attention factor, when not given, follows from it (1 where factor <= 1).
      r.factor = p.find("factor") ? p.positive("factor")
                                  : static_cast<double>(r.max_positions) / r.original_max_positions;
      if (auto given = p.number("attention_factor")) {
        if (!(*given > 0)) refuse(fmt::format("{} must be > 0, got {}", p.field("attention_factor"), *given));
        r.attention_factor = *given;
      } else {
        r.attention_factor =
            r.factor <= 1 ? 1.0 : std::sqrt(1 + std::log(r.factor) / std::log(r.original_max_positions));
      }
      auto factors = [&](const char* key) {
        const json* v = p.find(key);
        if (!v || !v->is_array() || v->empty())
          refuse(fmt::format("{} must be a list of numbers (one per frequency: head_dim / 2)", p.field(key)));
        std::vector<double> out;
        for (const auto& x : *v) {
          if (!x.is_number() || !(x.get<double>() > 0))
            refuse(fmt::format("{} must hold numbers > 0, got {}", p.field(key), x.dump()));
          out.push_back(x.get<double>());
        }
        return out;
      };
      r.short_factor = factors("short_factor");
      r.long_factor = factors("long_factor");
      if (r.short_factor.size() != r.long_factor.size())
        refuse(fmt::format("{} and {} must have one factor per frequency each (got {} and {})",
                           p.field("short_factor"), p.field("long_factor"), r.short_factor.size(),
                           r.long_factor.size()));
      break;
    }
    case RopeType::kDefault:
      break;
  }
  return r;
}

}  // namespace

bool RopeConfig::operator==(const RopeConfig& o) const {
  return type == o.type && theta == o.theta && max_positions == o.max_positions && factor == o.factor &&
         original_max_positions == o.original_max_positions && attention_factor == o.attention_factor &&
         beta_fast == o.beta_fast && beta_slow == o.beta_slow && truncate == o.truncate &&
         low_freq_factor == o.low_freq_factor && high_freq_factor == o.high_freq_factor &&
         short_factor == o.short_factor && long_factor == o.long_factor && frequency_dims == o.frequency_dims;
}

const char* rope_type_name(RopeType type) {
  return info(type).name;
}

std::string rope_type_names() {
  std::string s;
  for (const auto& t : types()) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

RopeConfig rope_from_hf_config(const json& config, int64_t default_max_positions) {
  const Params top(config, "");
  auto quoted = [](const char* key) { return fmt::format("\"{}\"", key); };
  Context ctx;
  ctx.base.max_positions = top.count("max_position_embeddings").value_or(default_max_positions);
  ctx.top_theta = top.number("rope_theta");
  if (ctx.top_theta && !(*ctx.top_theta > 0))
    refuse(fmt::format("{} must be > 0, got {}", top.field("rope_theta"), *ctx.top_theta));
  ctx.base.theta = ctx.top_theta.value_or(10000.0);
  ctx.top_original = top.count("original_max_position_embeddings");
  if (auto partial = top.number("partial_rotary_factor"); partial && *partial != 1.0)
    refuse(fmt::format("\"partial_rotary_factor\" {} is not supported (bpbench rotates the whole head: 1)",
                       *partial));

  const json* v5 = top.find("rope_parameters");
  const json* v4 = top.find("rope_scaling");
  std::optional<RopeConfig> from_v5, from_v4;
  if (v5) from_v5 = parse(Params(*v5, quoted("rope_parameters")), ctx);
  if (v4) from_v4 = parse(Params(*v4, quoted("rope_scaling")), ctx);
  if (from_v5 && from_v4 && *from_v5 != *from_v4)
    refuse(fmt::format("\"rope_scaling\" ({}) disagrees with \"rope_parameters\" ({})",
                       rope_summary(*from_v4), rope_summary(*from_v5)));
  if (from_v5) return *from_v5;
  if (from_v4) return *from_v4;
  return ctx.base;
}

RopeConfig rope_with_parameters(const RopeConfig& base, const json& parameters) {
  Context ctx;
  ctx.base.theta = base.theta;
  ctx.base.max_positions = base.max_positions;
  return parse(Params(parameters, "rope"), ctx);
}

json rope_to_json(const RopeConfig& r) {
  json j = {{"rope_type", rope_type_name(r.type)}, {"rope_theta", r.theta}};
  if (r.type == RopeType::kDefault) return j;
  j["factor"] = r.factor;
  switch (r.type) {
    case RopeType::kDynamic:
      j["max_position_embeddings"] = r.max_positions;
      break;
    case RopeType::kYarn:
      j["original_max_position_embeddings"] = r.original_max_positions;
      j["attention_factor"] = r.attention_factor;
      j["beta_fast"] = r.beta_fast;
      j["beta_slow"] = r.beta_slow;
      j["truncate"] = r.truncate;
      break;
    case RopeType::kLlama3:
      j["original_max_position_embeddings"] = r.original_max_positions;
      j["low_freq_factor"] = r.low_freq_factor;
      j["high_freq_factor"] = r.high_freq_factor;
      break;
    case RopeType::kLongrope:
      j["original_max_position_embeddings"] = r.original_max_positions;
      j["attention_factor"] = r.attention_factor;
      j["short_factor"] = r.short_factor;
      j["long_factor"] = r.long_factor;
      break;
    default:
      break;
  }
  return j;
}

std::string rope_summary(const json& j) {
  auto num = [&](const char* key) {
    return j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : 0.0;
  };
  auto count = [&](const char* key) {
    return j.contains(key) && j.at(key).is_number() ? j.at(key).get<int64_t>() : int64_t{0};
  };
  const std::string type = j.value("rope_type", std::string("default"));
  const std::string theta = fmt::format("theta {}", num("rope_theta"));
  if (type == "default") return fmt::format("default, {}", theta);
  if (type == "dynamic")
    return fmt::format("dynamic x{} (past {}), {}", num("factor"), count("max_position_embeddings"), theta);
  if (type == "yarn")
    return fmt::format("yarn x{} (original {}, attention {:.4g}), {}", num("factor"),
                       count("original_max_position_embeddings"), num("attention_factor"), theta);
  if (type == "llama3")
    return fmt::format("llama3 x{} (original {}), {}", num("factor"),
                       count("original_max_position_embeddings"), theta);
  if (type == "longrope")
    return fmt::format("longrope x{:.4g} (original {}, attention {:.4g}), {}", num("factor"),
                       count("original_max_position_embeddings"), num("attention_factor"), theta);
  return fmt::format("{} x{}, {}", type, num("factor"), theta);
}

std::string rope_summary(const RopeConfig& r) {
  return rope_summary(rope_to_json(r));
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace bpbench
