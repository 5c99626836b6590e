// train_data.h: the batches of a training run (train_loop.h's TrainData), from synthetic tokens or from the
// scenario's data file, split into training and held-out sequences by the scenario's seed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "harness/objectives/objective.h"
#include "harness/run/train_loop.h"
#include "harness/run/train_spec.h"

namespace bpbench {

// `base` is the cell's batch (examples, length, objective options, seed). Synthetic: training batch k
// (1-based) is drawn with seed base.seed + k, held-out batch i with base.seed + 1000000 + i, so every
// strategy of a scenario sees the same batches. With a data file (`data_path`, SFT): its sequences are
// shuffled by a permutation seeded by base.seed; the first eval_batches x examples are held out, the rest
// train, in order, batch after batch (an epoch ends where they run out, and the next starts over).
// `data_record` gets
// {"file", "sha256", "sequences", "train_sequences", "eval_sequences"}. Throws InputError when the file has
// too few sequences for one training batch beside the held-out ones.
TrainData make_train_data(const TrainSpec& spec, const BatchSpec& base, Model& model,
                          const Objective& objective, int64_t logits_rows, const std::string& data_path,
                          nlohmann::json& data_record);

}  // namespace bpbench
