// json_fields.h: a record's JSON fields as data. Each row names one key, says when it is written and how,
// and how it is read back; to_json and from_json walk the same table, so a field cannot be written without
// being read (or the other way round), and the tests compare each table's names with the published schema
// (reports/results.schema.json).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bpbench {

template <class R>
struct JsonField {
  std::string name;
  std::function<std::optional<nlohmann::json>(const R&)> write;  // nullopt: the key is left out
  // Given the key's value when the file has it, and the whole record (for keys read together);
  // empty: written only (derived from other fields).
  std::function<void(R&, const nlohmann::json& value, const nlohmann::json& record)> read;
  bool required = false;  // from_json throws when a file lacks it
};

template <class R>
using JsonFields = std::vector<JsonField<R>>;

template <class R>
nlohmann::json fields_to_json(const JsonFields<R>& fields, const R& r) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields)
    if (auto v = f.write(r)) j[f.name] = std::move(*v);
  return j;
}

// Throws std::invalid_argument naming `what` and the key for a required key that is absent.
template <class R>
void fields_from_json(const JsonFields<R>& fields, const nlohmann::json& j, R& r, const char* what) {
  for (const auto& f : fields) {
    if (!j.contains(f.name)) {
      if (f.required) throw std::invalid_argument(fmt::format("{}: missing \"{}\"", what, f.name));
      continue;
    }
    if (f.read) f.read(r, j.at(f.name), j);
  }
}

template <class R>
std::vector<std::string> field_names(const JsonFields<R>& fields) {
  std::vector<std::string> names;
  for (const auto& f : fields) names.push_back(f.name);
  return names;
}

// ---- the common kinds of row ----

// Always written; read as its type.
template <class R, class T>
JsonField<R> always(std::string name, T R::*member, bool required = false) {
  return {std::move(name),
          [member](const R& r) -> std::optional<nlohmann::json> { return nlohmann::json(r.*member); },
          [member](R& r, const nlohmann::json& v, const nlohmann::json&) { r.*member = v.get<T>(); },
          required};
}

// An optional number written as null when unset; a non-number reads as unset.
template <class R, class T>
JsonField<R> nullable(std::string name, std::optional<T> R::*member) {
  return {std::move(name),
          [member](const R& r) -> std::optional<nlohmann::json> {
            return r.*member ? nlohmann::json(*(r.*member)) : nlohmann::json(nullptr);
          },
          [member](R& r, const nlohmann::json& v, const nlohmann::json&) {
            if (v.is_number()) r.*member = v.get<T>();
          }};
}

// An optional number left out when unset.
template <class R, class T>
JsonField<R> when_set(std::string name, std::optional<T> R::*member) {
  return {std::move(name),
          [member](const R& r) -> std::optional<nlohmann::json> {
            return r.*member ? std::optional<nlohmann::json>(*(r.*member)) : std::nullopt;
          },
          [member](R& r, const nlohmann::json& v, const nlohmann::json&) {
            if (v.is_number()) r.*member = v.get<T>();
          }};
}

// A string left out when empty.
template <class R>
JsonField<R> when_nonempty(std::string name, std::string R::*member) {
  return {
      std::move(name),
      [member](const R& r) -> std::optional<nlohmann::json> {
        return (r.*member).empty() ? std::nullopt : std::optional<nlohmann::json>(r.*member);
      },
      [member](R& r, const nlohmann::json& v, const nlohmann::json&) { r.*member = v.get<std::string>(); }};
}

// A JSON member written as it is (null included), or left out when null with `omit_null`.
template <class R>
JsonField<R> raw(std::string name, nlohmann::json R::*member, bool omit_null) {
  return {std::move(name),
          [member, omit_null](const R& r) -> std::optional<nlohmann::json> {
            if (omit_null && (r.*member).is_null()) return std::nullopt;
            return r.*member;
          },
          [member](R& r, const nlohmann::json& v, const nlohmann::json&) { r.*member = v; }};
}

// Written from the record, never read (derived from other fields).
template <class R>
JsonField<R> derived(std::string name, std::function<nlohmann::json(const R&)> value) {
  return {std::move(name), [value](const R& r) -> std::optional<nlohmann::json> { return value(r); }, {}};
}

}  // namespace bpbench
