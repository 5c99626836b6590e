#!/usr/bin/env python3
"""write_hf_configs.py: config.json files as transformers itself writes them, for bpbench's estimate tests.

usage: write_hf_configs.py IN.json OUT_DIR

IN.json maps a name to a config object (as `bpbench hf-config` prints one: architectures, model_type and the
fields). For each, transformers' own config class of that model_type is built from the fields and saved with
save_pretrained into OUT_DIR/<name>/config.json, so that the file holds what transformers writes (its
defaults, its field names, its RoPE form), not what bpbench wrote. Prints each directory written.
"""
import json
import os
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    from transformers import CONFIG_MAPPING

    with open(argv[1]) as f:
        wanted = json.load(f)
    for name, fields in wanted.items():
        fields = dict(fields)
        architectures = fields.pop("architectures")
        model_type = fields.pop("model_type")
        config = CONFIG_MAPPING[model_type](**fields)
        config.architectures = architectures
        out = os.path.join(argv[2], name)
        config.save_pretrained(out)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
