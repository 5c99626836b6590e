#!/usr/bin/env python3
"""transformers_configs.py: transformers itself on bpbench's config.json files, for the tests that ask it
(EstimateCalculator.TransformersWrittenConfigsOfEachFamily, HfConfig.TransformersBuildsTheTinyPresetsOfEachLayerKind), in one
process: transformers' import is most of the cost, so they share it, and the test binary makes the output at
build time (tests/support/transformers_configs.h).

usage: transformers_configs.py OUT_DIR IN.json

IN.json: {"write": {NAME: CONFIG, ...}, "build": {NAME: CONFIG, ...}}, each CONFIG a config object as
`bpbench hf-config` prints one (architectures, model_type and the fields).
  - write: transformers' own config class of that model_type is built from the fields and saved with
    save_pretrained into OUT_DIR/write/NAME/config.json, so that the file holds what transformers writes (its
    defaults, its field names, its RoPE form), not what bpbench wrote;
  - build: bpbench's file as it is, OUT_DIR/build/NAME/config.json, read by AutoConfig.from_pretrained (its
    strict config types included) and built by AutoModelForCausalLM.from_config; OUT_DIR/build/NAME/built.txt
    holds "CLASS PARAMETERS LAYER_TYPES" (the layer types comma-separated, "-" where the config has none).
OUT_DIR/done is written last.
"""
import json
import os
import sys


def write_with_config_class(fields, out):
    from transformers import CONFIG_MAPPING

    fields = dict(fields)
    architectures = fields.pop("architectures")
    model_type = fields.pop("model_type")
    config = CONFIG_MAPPING[model_type](**fields)
    config.architectures = architectures
    config.save_pretrained(out)


def build_from_file(fields, out):
    import transformers

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(fields, f, indent=2)
    config = transformers.AutoConfig.from_pretrained(out)
    model = transformers.AutoModelForCausalLM.from_config(config)
    layer_types = getattr(config, "layer_types", None)
    with open(os.path.join(out, "built.txt"), "w") as f:
        f.write(f"{type(model).__name__} {sum(p.numel() for p in model.parameters())} "
                f"{','.join(layer_types) if layer_types else '-'}\n")


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[5], file=sys.stderr)
        return 2
    out_dir, wanted_file = argv[1], argv[2]
    with open(wanted_file) as f:
        wanted = json.load(f)
    for name, fields in wanted.get("write", {}).items():
        write_with_config_class(fields, os.path.join(out_dir, "write", name))
    for name, fields in wanted.get("build", {}).items():
        build_from_file(fields, os.path.join(out_dir, "build", name))
    with open(os.path.join(out_dir, "done"), "w") as f:
        f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
