#!/usr/bin/python3
"""Expected logits of an absorbed prefill (RuntimeOptions::absorbed_prefill_from = 0).

For each golden scenario named, the prompt of its first call (the prefill) is fed one token at a time
through the decode path of the golden generator's independent oracle (../shared/golden/generator/
oracle.py: the reference's decode arithmetic, written without the reference's code). The logits of
every step, [batch, seq, vocab] f32, go to OUT_DIR/<scenario>.safetensors as "logits".

usage: /usr/bin/python3 make_absorbed.py ORACLE_DIR GOLDEN_DIR OUT_DIR SCENARIO...
  e.g. /usr/bin/python3 tests/data/absorbed/make_absorbed.py ../shared/golden/generator \
           tests/data/golden tests/data/absorbed tiny_bf16 tiny_fp8_ue8m0_yarn tiny_fp8_plain_scale
Needs torch (Debian: python3-torch).
"""
import json
import os
import struct
import sys


def write_f32(path, name, tensor):
    data = tensor.contiguous().numpy().astype("<f4").tobytes()
    header = json.dumps({name: {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [0, len(data)]}},
                        separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    oracle_dir, golden_dir, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    sys.path.insert(0, oracle_dir)
    import oracle  # noqa: E402 (found through ORACLE_DIR)
    import torch
    for name in names:
        d = os.path.join(golden_dir, name)
        model = oracle.Model(d)
        call = json.load(open(os.path.join(d, "manifest.json")))["calls"][0]
        tokens, start = torch.tensor(call["tokens"]), call["start_pos"]
        steps = [model.forward(tokens[:, s:s + 1], start + s) for s in range(tokens.shape[1])]
        logits = torch.stack(steps, 1).to(torch.float32)
        write_f32(os.path.join(out_dir, name + ".safetensors"), "logits", logits)
        print(f"{name}: {tuple(logits.shape)} logits, max |logit| {float(logits.abs().max()):.4f}")


if __name__ == "__main__":
    main()
