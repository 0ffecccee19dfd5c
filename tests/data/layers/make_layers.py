#!/usr/bin/python3
"""Per-layer inputs and outputs of the golden generator's independent oracle, for layer-level tests.

For each golden scenario named, the first sequences of its prompts go through the oracle
(../shared/golden/generator/oracle.py, written from the golden README, not from the reference's code)
in three calls: a prefill of positions [0, A), a prefill of [A, A + B) (start_pos > 0) and a decode
step at A + B. Every layer's inputs and outputs of every call go to OUT_DIR/<scenario>.safetensors:

  callC.tokens [batch, seq] I64, callC.start_pos [1] I64
  callC.layers.L.h_in, .res_in    the block's input and residual stream (res_in absent for L = 0)
  callC.layers.L.attn_in          attn_norm's output: the MLA's input
  callC.layers.L.attn_out         the MLA's output (after wo)
  callC.layers.L.topk             [batch, seq, k] I64, the indexer's picks
  callC.layers.L.ffn_in           ffn_norm's output: the MLP's or MoE's input
  callC.layers.L.x, .residual     the block's outputs (the FFN output and the residual stream)
  callC.layers.L.gate_weights / gate_indices   (MoE layers) the routing
bf16 activations are stored as BF16 (exact: the oracle's activations are bf16 values).

One extension of the oracle: its prefill expands (wkv_b) the keys of the call's own tokens only, as
the reference does, which is only defined at start_pos 0. Here a prefill expands the keys of every
cached position [0, end) (the latents the cache holds), which at start_pos 0 is the oracle's
arithmetic unchanged, and at start_pos > 0 the same per-row arithmetic on rows computed by an
earlier call (wkv_b, its activation quantization included, works row by row).

usage: /usr/bin/python3 make_layers.py ORACLE_DIR GOLDEN_DIR OUT_DIR A B SCENARIO...
  e.g. /usr/bin/python3 tests/data/layers/make_layers.py ../shared/golden/generator tests/data/golden \
           tests/data/layers 4 2 tiny_bf16 tiny_fp8_ue8m0_yarn
Needs torch (Debian: python3-torch).
"""
import json
import os
import struct
import sys


def write(path, tensors):
    import torch
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        if t.dtype == torch.int64:
            dt, data = "I64", t.numpy().astype("<i8").tobytes()
        elif t.dtype == torch.bfloat16:
            dt, data = "BF16", t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            dt, data = "F32", t.to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    oracle_dir, golden_dir, out_dir = sys.argv[1:4]
    A, B, names = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
    sys.path.insert(0, oracle_dir)
    import oracle  # noqa: E402 (found through ORACLE_DIR)
    import torch
    bf, rope, rmsnorm = oracle.bf, oracle.rope, oracle.rmsnorm

    class Model(oracle.Model):
        def mla(self, li, x, start):  # oracle.Model.mla, the prefill expanding every cached position
            c, p = self.c, f"layers.{li}.attn."
            b, s, _ = x.shape
            end = start + s
            H, nope, r, v, lr = (c["n_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"],
                                 c["kv_lora_rank"])
            cos, sin = self.cos[start:end], self.sin[start:end]
            qr = rmsnorm(self.lin(p + "wq_a")(x), self.W[p + "q_norm.weight"])
            q = self.lin(p + "wq_b")(qr).reshape(b, s, H, nope + r)
            q_nope, q_pe = q[..., :nope], rope(q[..., nope:], cos, sin, True)
            kv = self.lin(p + "wkv_a")(x)
            kvn = rmsnorm(kv[..., :lr], self.W[p + "kv_norm.weight"])
            k_pe = rope(kv[..., lr:].unsqueeze(2), cos, sin, True).squeeze(2)
            self.kv[li][:b, start:end] = kvn
            self.pe[li][:b, start:end] = k_pe
            prefill = s > 1
            top = self.indexer(li, x, qr, start, cos, sin, prefill)
            self.trace[f"layers.{li}.topk"] = top
            mask = torch.full((b, s, end), float("-inf")).scatter_(-1, top, 0)
            if prefill:
                mask = mask + torch.full((s, end), float("-inf")).triu_(1 + start)
                kvb = self.lin(p + "wkv_b")(self.kv[li][:b, :end]).reshape(b, end, H, nope + v)
                k = torch.cat([kvb[..., :nope], self.pe[li][:b, :end].unsqueeze(2).expand(b, end, H, r)], -1)
                qf = torch.cat([q_nope, q_pe], -1)
                sc = torch.einsum("bshd,bthd->bsht", qf, k) * self.scale + mask.unsqueeze(2)
                pr = bf(sc.softmax(-1))
                o = bf(torch.einsum("bsht,bthd->bshd", pr, kvb[..., nope:]))
            else:
                lin = self.lin(p + "wkv_b")
                wkv = (lin.dequant() if lin.fp8 else lin.w).reshape(H, nope + v, lr)
                qn = bf(torch.einsum("bshd,hdc->bshc", q_nope, wkv[:, :nope]))
                sc = (torch.einsum("bshc,btc->bsht", qn, self.kv[li][:b, :end]) +
                      torch.einsum("bshr,btr->bsht", q_pe, self.pe[li][:b, :end])) * self.scale + mask.unsqueeze(2)
                pr = bf(sc.softmax(-1))
                o = bf(torch.einsum("bsht,btc->bshc", pr, self.kv[li][:b, :end]))
                o = bf(torch.einsum("bshc,hdc->bshd", o, wkv[:, -v:]))
            self.trace[f"layers.{li}.attn_in"] = x
            return self.lin(p + "wo")(o.reshape(b, s, H * v))

        def mlp(self, p, x):
            if p.endswith(".ffn."):  # a dense layer's FFN
                self.trace[p[:-len("ffn.")] + "ffn_in"] = x
            return super().mlp(p, x)

        def moe(self, li, x):
            self.trace[f"layers.{li}.ffn_in"] = x
            return super().moe(li, x)

    for name in names:
        d = os.path.join(golden_dir, name)
        model = Model(d)
        prompt = torch.tensor(json.load(open(os.path.join(d, "manifest.json")))["calls"][0]["tokens"])
        assert prompt.shape[1] >= A + B + 1, "the golden prompt is too short"
        calls = [(prompt[:, :A], 0), (prompt[:, A:A + B], A), (prompt[:, A + B:A + B + 1], A + B)]
        out = {}
        for ci, (tokens, start) in enumerate(calls):
            model.forward(tokens, start)
            t = model.trace
            pre = f"call{ci}."
            out[pre + "tokens"] = tokens.to(torch.int64)
            out[pre + "start_pos"] = torch.tensor([start], dtype=torch.int64)
            for li in range(model.c["n_layers"]):
                L = f"layers.{li}."
                h_in = t["embed"] if li == 0 else t[f"layers.{li - 1}.x"]
                out[pre + L + "h_in"] = h_in.to(torch.bfloat16)
                if li > 0:
                    out[pre + L + "res_in"] = t[f"layers.{li - 1}.residual"].to(torch.bfloat16)
                for key in ("attn_in", "attn_out", "ffn_in", "x", "residual"):
                    out[pre + L + key] = t[L + key].to(torch.bfloat16)
                out[pre + L + "topk"] = t[L + "topk"].to(torch.int64)
                if L + "gate" in t:
                    w, idx = t[L + "gate"]
                    out[pre + L + "gate_weights"] = w.to(torch.float32)
                    out[pre + L + "gate_indices"] = idx.to(torch.int64)
        path = os.path.join(out_dir, name + ".safetensors")
        write(path, out)
        print(f"{name}: calls {[(int(s), tuple(tk.shape)) for tk, s in calls]}, {len(out)} tensors, "
              f"{os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
