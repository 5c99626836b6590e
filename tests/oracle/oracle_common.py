"""oracle_common.py: what the transformers oracle (hf_oracle.py) shares with the peers that reuse its float64
mode under another transformers (impls/peers/streambp_official_exactness.py, on the official StreamBP's pinned
4.51.3, which has none of the newer families hf_oracle.py imports): the float64 mode and the oracle's batch.
"""

import torch
from torch.overrides import TorchFunctionMode


class Float64Casts(TorchFunctionMode):
    """Every float32 cast or dtype argument becomes float64, for the code run under it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.float:
            return args[0].double()
        swap = lambda a: torch.float64 if a is torch.float32 else a
        args = tuple(swap(a) for a in args)
        kwargs = {k: swap(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def make_batch(config, T, lengths, prompt, generator):
    """Token ids right-padded to `lengths` (pad id 0, as bpbench pads), the attention mask, and the shifted
    targets (-100: prompt, padding, last position). Rows 2b and 2b+1 share their first `prompt` tokens."""
    N = len(lengths)
    ids = torch.randint(1, config.vocab_size, (N, T), generator=generator)
    if prompt:
        ids[1::2, :prompt] = ids[0::2, :prompt]
    mask = torch.zeros(N, T, dtype=torch.long)
    for n, length in enumerate(lengths):
        mask[n, :length] = 1
    ids = ids * mask
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :prompt] = -100
    targets = torch.full_like(ids, -100)
    targets[:, :-1] = labels[:, 1:]
    return ids, mask, labels, targets
